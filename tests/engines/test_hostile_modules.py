"""What the hostile-snapshot fuzz (tests/security/test_snapshot_fuzz.py) found, against both
engines: a snapshot's own bytes, and its links, are never a way to change another file."""

from __future__ import annotations

from pathlib import Path

import pytest
from small_host import SmallHost, build, tree, write_profile

from reconciler.core.errors import ApplyFailed

from .drive import Engine


def test_a_load_and_its_rollback_keep_the_other_lines_of_proc_modules(
    engine: Engine, tmp_path: Path
) -> None:
    """The emulated modprobe rewrote /proc/modules decoded with replacement: a line that is not
    UTF-8 came back as U+FFFD after the load and its rollback."""
    root = build(tmp_path / "h", SmallHost(modules=["nvidia"]))
    modules = root / "proc/modules"
    modules.write_bytes(modules.read_bytes() + b"\x80\xff odd 1 0 - Live 0x0\n")
    profile = write_profile(tmp_path / "p.yaml", {"modules": {"nvidia_peermem": "loaded"}})
    before = tree(root)
    assert engine.apply(root, profile, with_persistence=False) is not None
    assert b"nvidia_peermem" in modules.read_bytes()
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == before


def test_a_link_as_a_kernel_attributes_name_is_never_written_through(
    engine: Engine, tmp_path: Path
) -> None:
    """/sys/block/X/queue/scheduler planted as a link to another file (the fuzz's was
    /proc/modules): the write of `none` landed on that file, and the rollback put back its
    text as the scheduler's words."""
    root = build(tmp_path / "h", SmallHost(modules=["nvidia"]))
    queue = root / "sys/block/sdx/queue"
    queue.mkdir(parents=True)
    (queue / "scheduler").symlink_to("../../../../proc/sys/kernel/hostname")
    profile = write_profile(
        tmp_path / "p.yaml", {"sysfs": {"/sys/block/*/queue/scheduler": "none"}}
    )
    before = tree(root)
    with pytest.raises(ApplyFailed, match="a symbolic link, which no kernel attribute is"):
        engine.apply(root, profile, with_persistence=False)
    assert tree(root) == before
