"""ECC (kind `ecc`, the `ecc` of `gpus` entries) through both engines: a reboot-phase change,
left alone by `--runtime-only`, written with `nvidia-smi -e` by `--reboot-phase` and read back
from `ecc.mode.pending`; the plan is then pending a reboot, a second apply changes nothing, and
rollback gives the prior pending mode back, byte for byte."""

from __future__ import annotations

from pathlib import Path

from conftest import profile, write
from small_host import GPU_HEADER, gpu_line, tree

from reconciler.facts import nvidia_smi
from reconciler.hosts import recorded
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile

from .drive import Engine

REBOOT = {"runtime_only": False, "reboot_phase": True}
PROFILE = "name: ecc\ngpus:\n  all: {ecc: false}\n"
BUSES = ("00000000:17:00.0", "00000000:3D:00.0")


def ecc_host(root: Path, current: str = "Enabled", pending: str = "Enabled") -> Path:
    """Two GPUs whose ECC is `current` now and `pending` after the next boot."""
    lines = [
        gpu_line(bus, "Enabled").replace("Enabled, Enabled\n", f"{current}, {pending}\n")
        for bus in BUSES
    ]
    answer = recorded.where(nvidia_smi.QUERY)
    write(root, f"{answer}/status", "0\n")
    write(root, f"{answer}/stdout", GPU_HEADER + "".join(lines))
    return root


def ecc_of(root: Path) -> list[tuple[str | None, str | None]]:
    """Each GPU's ECC now and after the next boot, as the snapshot's query holds them."""
    text = (root / recorded.where(nvidia_smi.QUERY).lstrip("/") / "stdout").read_text()
    return [
        (g.get(nvidia_smi.ECC_CURRENT), g.get(nvidia_smi.ECC_PENDING))
        for g in nvidia_smi.parse(text)
    ]


def test_runtime_only_leaves_ecc_and_the_reboot_phase_sets_it_for_the_next_boot(
    engine: Engine, tmp_path: Path
) -> None:
    root = ecc_host(tmp_path / "host")
    before = tree(root)
    text = profile(tmp_path, PROFILE)
    assert engine.apply(root, text, runtime_only=True) is None
    assert tree(root) == before
    run_id = engine.apply(root, text, phase="reboot", **REBOOT)
    assert run_id is not None
    assert ecc_of(root) == [("Enabled", "Disabled")] * 2
    loaded = load_profile(text)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, True), True)
    assert [c.id for c in plan.changes] == []
    assert [(p.id, p.running, p.configured) for p in plan.pending] == [
        (f"ecc:{bus}", "Enabled", "Disabled") for bus in BUSES
    ]
    assert engine.apply(root, text, phase="reboot", **REBOOT) is None
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == before


def test_another_pending_mode_is_set_back_to_the_profiles(engine: Engine, tmp_path: Path) -> None:
    """Someone else's `-e 0` waits for the reboot; the profile wants ECC on: the write puts
    pending back, and rollback restores the other's pending mode."""
    root = ecc_host(tmp_path / "host", current="Enabled", pending="Disabled")
    before = tree(root)
    text = profile(tmp_path, PROFILE.replace("ecc: false", "ecc: true"))
    assert engine.apply(root, text, phase="reboot", **REBOOT) is not None
    assert ecc_of(root) == [("Enabled", "Enabled")] * 2
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == before
