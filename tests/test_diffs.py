"""A changed file is shown as a unified diff, in the plan and in a dry run (as `ansible --diff`
shows it): the lines that change with their context, not the whole file or a count of lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import profile, run_tune, write
from small_host import SmallHost, build

PROFILE = """
name: small
sysctl:
  vm.swappiness: 10
  kernel.numa_balancing: 0
"""
# What an earlier apply of the profile wrote, before vm.swappiness went from 30 to 10.
EARLIER = (
    "# Written by tune for profile small. tune owns this file: edits are overwritten.\n"
    "kernel.numa_balancing = 0\n"
    "vm.swappiness = 30\n"
)
DIFF = """\
        --- a/etc/sysctl.d/90-tune.conf
        +++ b/etc/sysctl.d/90-tune.conf
        @@ -1,3 +1,3 @@
         # Written by tune for profile small. tune owns this file: edits are overwritten.
        +vm.swappiness = 10
         kernel.numa_balancing = 0
        -vm.swappiness = 30
"""


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A host with the two sysctls PROFILE sets, as the untuned example host has them."""
    return build(
        tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60", "kernel.numa_balancing": "1"})
    )


def test_the_plan_and_the_dry_run_show_a_changed_file_as_a_unified_diff(
    host: Path, tmp_path: Path
) -> None:
    write(host, "/etc/sysctl.d/90-tune.conf", EARLIER)
    path = profile(tmp_path, PROFILE)
    plan = run_tune("plan", path, "--root", host)
    assert "    ~ file /etc/sysctl.d/90-tune.conf: 3 lines -> 3 lines (+1 -1)\n" + DIFF in plan.out
    dry = run_tune("apply", path, "--root", host, "--runtime-only", "--dry-run")
    assert dry.code == 0, dry.err
    assert "write file /etc/sysctl.d/90-tune.conf (mode 0644, 126 bytes):\n" + DIFF in dry.out


def test_colour_marks_added_and_removed_lines_only_when_asked(host: Path, tmp_path: Path) -> None:
    write(host, "/etc/sysctl.d/90-tune.conf", EARLIER)
    path = profile(tmp_path, PROFILE)
    coloured = run_tune("plan", path, "--root", host, "--color", "always").out
    assert "\x1b[32m+vm.swappiness = 10\x1b[0m" in coloured
    assert "\x1b[31m-vm.swappiness = 30\x1b[0m" in coloured
