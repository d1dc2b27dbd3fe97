"""A no-op is never success (issue 33.4): a knob the host does not have is skipped with a note,
and never kept for the next boot; a sysfs path whose directory exists but whose file does not
is a misspelling until the entry says the hardware may be absent."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_tune
from small_host import SmallHost, build, write_profile

SYSCTL_D = "etc/sysctl.d/90-tune.conf"
TMPFILES_D = "etc/tmpfiles.d/tune.conf"
# No such key near any the small host has: a knob this kernel lacks, not a typo.
ABSENT_KEY = "abi.zz_absent_knob"
# The directory of a device the host does not have.
NO_DEVICE = "/sys/class/infiniband/mlx5_0/device/numa_node_policy"
THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def host(tmp_path: Path) -> Path:
    return build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))


def test_a_knob_the_host_lacks_is_in_no_boot_time_file(tmp_path: Path) -> None:
    root = host(tmp_path)
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "sysctl": {"vm.swappiness": 10, ABSENT_KEY: 1},
            "sysfs": {THP: "madvise", NO_DEVICE: "1"},
        },
    )
    plan = run_tune("plan", profile, "--root", root)
    assert f"{ABSENT_KEY} does not exist on this host" in plan.out
    assert "Skipped: not a change" in plan.out
    done = run_tune("apply", profile, "--runtime-only", "--root", root, "--yes")
    assert done.code == 0, done.err
    sysctl_d = (root / SYSCTL_D).read_text()
    assert "vm.swappiness = 10" in sysctl_d
    assert ABSENT_KEY not in sysctl_d, "systemd-sysctl would fail on it at every boot"
    tmpfiles = (root / TMPFILES_D).read_text()
    assert f"w {THP} - - - - madvise" in tmpfiles
    assert NO_DEVICE not in tmpfiles
    # And the plan after it is empty: what was skipped is not a change to make.
    again = run_tune("plan", profile, "--root", root, "--format", "json")
    assert again.code == 0, again.out
    assert json.loads(again.out)["summary"]["writes"]["total"] == 0


def test_a_misspelled_sysfs_file_is_an_error_that_names_the_closest(tmp_path: Path) -> None:
    root = host(tmp_path)
    typo = THP.replace("enabled", "enabeld")
    profile = write_profile(tmp_path / "p.yaml", {"sysfs": {typo: "madvise"}})
    plan = run_tune("plan", profile, "--root", root)
    assert f"{typo} does not exist on this host; did you mean {THP}?" in plan.out
    assert "Skipped" not in plan.out
    assert plan.code == 2, "a typo is a change apply refuses, not a no-op"
    done = run_tune("apply", profile, "--runtime-only", "--root", root, "--yes")
    assert done.code != 0
    assert typo in done.err
    assert not (root / TMPFILES_D).exists(), "nothing written"


def test_a_sysfs_file_that_may_be_absent_is_skipped(tmp_path: Path) -> None:
    root = host(tmp_path)
    boost = "/sys/kernel/mm/transparent_hugepage/boost"  # as cpufreq/boost: a driver's own
    profile = write_profile(
        tmp_path / "p.yaml",
        {"sysfs": {THP: "madvise", boost: {"value": "1", "may_be_absent": True}}},
    )
    plan = run_tune("plan", profile, "--root", root)
    assert f"{boost} does not exist on this host." in plan.out
    assert "Skipped: not a change" in plan.out
    done = run_tune("apply", profile, "--runtime-only", "--root", root, "--yes")
    assert done.code == 0, done.err
    assert boost not in (root / TMPFILES_D).read_text()
