"""What a second look at the fixes of issue 15 found still getting through.

A snapshot directory is extracted from a ticket's archive, by root: `tar -x` then makes the
FIFOs, device nodes and hard links the archive holds. Every name in it is the sender's, the
names tune writes to as much as the ones it reads; and a config in a user's home is that
user's, whatever a profile says about it.
"""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_tune
from small_host import SmallHost, build, write_profile

from reconciler.errors import HostError
from reconciler.host import SnapshotHost
from reconciler.journal import Journal, run_path

DROP_IN = "etc/sysctl.d/90-tune.conf"
# Where put_file writes the drop-in before its rename (`steps.temporary`).
DROP_IN_TEMPORARY = "etc/sysctl.d/.90-tune.conf.tune-new"
SECRET = "root:$y$j9T$SeCrEtHaSh:19000:0:99999:7:::"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")


def small(root: Path) -> Path:
    """A small host with tune's state directories, as any host has /var/lib and /run/lock."""
    build(root, SmallHost(sysctls={"vm.swappiness": "60"}, modules=["nvidia"], gpus=[512]))
    (root / "var/lib/tune/runs").mkdir(parents=True)
    (root / "run/lock").mkdir(parents=True)
    return root


def swappiness(tmp_path: Path) -> Path:
    return write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Turns an open that would block forever into a failure of the test that made it."""

    def stop(signum: int, frame: object) -> None:
        raise TimeoutError("tune blocked on a file of the snapshot")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def plant(path: Path, kind: str, outside: Path | None = None) -> None:
    """A FIFO, a device (/dev/null's numbers) or a hard link to `outside` at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    else:
        assert outside is not None
        os.link(outside, path)


@pytest.mark.parametrize("kind", ["fifo", pytest.param("device", marks=needs_root), "hardlink"])
def test_a_file_at_a_temporary_name_is_replaced_never_opened(
    tmp_path: Path, kind: str, no_hang: None
) -> None:
    """put_file opened its temporary name with O_CREAT|O_TRUNC, not O_EXCL: a FIFO there made
    apply wait for ever, a device got the drop-in's bytes (a block device's first sector, had
    it been a disk's numbers), and a hard link to a file outside the snapshot had that file
    overwritten with them."""
    root = small(tmp_path / "host")
    outside = tmp_path / "outside"
    outside.write_text(SECRET + "\n")
    plant(root / DROP_IN_TEMPORARY, kind, outside)
    applied = run_tune("apply", swappiness(tmp_path), "--root", root, "-y")
    assert applied.code == 0, applied.err
    assert outside.read_text() == SECRET + "\n"
    drop_in = root / DROP_IN
    assert stat.S_ISREG(drop_in.lstat().st_mode)
    assert "vm.swappiness = 10" in drop_in.read_text()
    assert not (root / DROP_IN_TEMPORARY).exists()


@needs_root
def test_an_emulated_module_parameter_is_never_written_to_a_device(tmp_path: Path) -> None:
    """The emulated modprobe wrote a parameter with O_NONBLOCK alone: a device node planted at
    /sys/module/M/parameters/P got the value (here /dev/full's numbers: ENOSPC says so)."""
    root = small(tmp_path / "host")
    node = root / "sys/module/nvidia_peermem/parameters/foo"
    node.parent.mkdir(parents=True)
    os.mknod(node, 0o644 | stat.S_IFCHR, os.makedev(1, 7))
    profile = write_profile(
        tmp_path / "p.yaml",
        {"modules": {"nvidia_peermem": {"value": "loaded", "params": {"foo": 1}}}},
    )
    applied = run_tune("apply", profile, "--root", root, "-y", "--no-persist")
    assert applied.code == 3, applied.err
    assert "No space left" not in applied.out + applied.err
    assert "not a regular file" in applied.out + applied.err


@pytest.mark.parametrize("kind", ["fifo", pytest.param("device", marks=needs_root)])
def test_a_journal_name_taken_by_a_fifo_or_a_device_is_an_error_not_a_wait(
    tmp_path: Path, kind: str, no_hang: None
) -> None:
    """append opened the journal without O_NONBLOCK or a type check: a FIFO at a run's
    journal blocked the run, a device took its records."""
    root = small(tmp_path / "host")
    plant(root / run_path("r").lstrip("/"), kind)
    with pytest.raises(HostError, match="not a regular file"):
        Journal(SnapshotHost(root), "r").record("run")


@pytest.mark.parametrize("kind", ["fifo", pytest.param("device", marks=needs_root)])
def test_a_fifo_or_a_device_at_the_snapshots_lock_is_a_sentence_not_an_internal_error(
    tmp_path: Path, kind: str
) -> None:
    """The lock of a snapshot is opened O_RDWR|O_CREAT and truncated: a device there is opened
    (what Beneath.read never does) and ftruncate's EINVAL exits 70 "internal error"."""
    root = small(tmp_path / "host")
    plant(root / "run/lock/tune.lock", kind)
    applied = run_tune("apply", swappiness(tmp_path), "--root", root, "-y")
    assert applied.code not in (0, 70), applied.err
    assert "internal error" not in applied.err
    assert "tune.lock" in applied.err


def test_a_users_lxc_config_linked_to_a_root_only_file_never_copies_it(tmp_path: Path) -> None:
    """~/.local/share/lxc is one of the places whose files are edited without reading as a
    config, but the directory is its user's: a link there to /etc/shadow made apply read the
    shadow file and write it, with an lxc line appended, as a 0644 file in that user's home."""
    root = small(tmp_path / "host")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/shadow").write_text(SECRET + "\n")
    config = root / "home/alice/.local/share/lxc/x/config"
    config.parent.mkdir(parents=True)
    config.symlink_to("/etc/shadow")  # the host's own /etc/shadow, as alice would make it
    profile = write_profile(
        tmp_path / "p.yaml",
        {"lxc": [{"path": "/home/alice/.local/share/lxc/x/config", "memlock": "unlimited"}]},
    )
    plan = run_tune("plan", profile, "--root", root)
    assert plan.code == 1, plan.out
    assert "not an LXC container config" in plan.err
    run_tune("apply", profile, "--root", root, "-y")
    assert config.is_symlink() or SECRET not in config.read_text()
