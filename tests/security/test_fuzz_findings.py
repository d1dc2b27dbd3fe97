"""What the hostile-snapshot fuzz (test_snapshot_fuzz.py) found, each kept as the case that
showed it: a host file that made tune fail internally, wait, or not put back what it found."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_tune, write
from small_host import SmallHost, build, whole_tree, write_profile

BIG = b"# " + b"x" * 69_998 + b"\n"  # past the 64 KiB observation reads of a kernel file


def small(root: Path) -> Path:
    build(root, SmallHost(sysctls={"vm.swappiness": "60"}))
    (root / "var/lib/tune/runs").mkdir(parents=True)
    return root


def test_a_file_tune_replaces_past_the_read_limit_is_put_back_whole(tmp_path: Path) -> None:
    """Observation reads 64 KiB of a kernel file: a 70,000-byte /etc/sysctl.d/90-tune.conf was
    replaced, and its rollback put back the first 64 KiB of it. A file tune rewrites is read
    whole (up to 16 MiB), so the rollback puts every byte back."""
    root = small(tmp_path / "host")
    write(root, "/etc/sysctl.d/90-tune.conf", BIG)
    before = whole_tree(root)
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    applied = run_tune("apply", profile, "--root", root, "-y")
    assert applied.code == 0, applied.err
    assert run_tune("rollback", "--yes", "--root", root).code == 0
    assert whole_tree(root) == before


def test_an_lxc_config_past_the_read_limit_is_edited_whole(tmp_path: Path) -> None:
    """An edit of a container config read cut at 64 KiB wrote the cut text back: its lines
    past the limit were lost. It is read whole now: the edit keeps every other line, and the
    rollback puts every byte back."""
    root = small(tmp_path / "host")
    config = write(
        root, "/etc/pve/lxc/101.conf", b"arch: amd64\n" + BIG + b"lxc.prlimit.memlock: 65536\n"
    )
    before = whole_tree(root)
    profile = write_profile(
        tmp_path / "p.yaml", {"lxc": [{"container": "101", "memlock": "unlimited"}]}
    )
    applied = run_tune("apply", profile, "--root", root, "-y")
    assert applied.code == 0, applied.err
    edited = config.read_bytes()
    assert edited.startswith(b"arch: amd64\n" + BIG)
    assert b"lxc.prlimit.memlock: unlimited\n" in edited and b"65536" not in edited
    assert run_tune("rollback", "--yes", "--root", root).code == 0
    assert whole_tree(root) == before


@pytest.mark.xfail(
    strict=True,
    reason="not fixed: a file step journals the bytes it found, not that they were behind a "
    "link; both executors replace a link (never write through it) and put back a regular "
    "file, or nothing where the link led to a directory",
)
@pytest.mark.parametrize("target", ["/etc/other.conf", "/etc"])
def test_a_link_at_a_file_tune_replaces_is_put_back_by_rollback(
    tmp_path: Path, target: str
) -> None:
    root = small(tmp_path / "host")
    write(root, "/etc/other.conf", "vm.swappiness = 30\n")
    (root / "etc/sysctl.d").mkdir(parents=True)
    (root / "etc/sysctl.d/90-tune.conf").symlink_to(target)
    before = whole_tree(root)
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    assert run_tune("apply", profile, "--root", root, "-y").code == 0
    assert run_tune("rollback", "--yes", "--root", root).code == 0
    assert whole_tree(root) == before
