"""A /proc/modules line that is not UTF-8, through a load and its rollback by both engines:
the emulated modprobe rewrote the file decoded with replacement, and the rollback left U+FFFD
where the snapshot had its own bytes (found by tests/security/test_snapshot_fuzz.py)."""

from __future__ import annotations

from pathlib import Path

from small_host import SmallHost, build, tree, write_profile

from .drive import Engine


def test_a_load_and_its_rollback_keep_the_other_lines_of_proc_modules(
    engine: Engine, tmp_path: Path
) -> None:
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
