"""IRQ affinity through both engines, on a host shaped like the bundled one (a ConnectX-7 with
64 MSI-X vectors on node 1, a GPU on node 0): apply, the plan is then empty and a second
apply changes nothing, rollback gives back every byte; a managed IRQ the kernel refuses (EIO)
is skipped and said, and the rest applies."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from irq_host import CONNECTX, GPU, IrqHost, build
from small_host import tree, write_profile

from reconciler.facts.irqbalance import DROPIN, POLICY, policy_script

from .drive import Engine, journals
from .test_apply import runtime_changes
from .test_faults import outcome

LOCAL = {
    "irq_affinity": [
        {"select": {"vendor": 0x15B3, "class": 0x0200}, "cpus": "local"},
        {"select": {"vendor": 0x10DE, "class": 0x0302}, "cpus": "local"},
    ]
}


def affinity(root: Path, irq: int) -> str:
    return (root / f"proc/irq/{irq}/smp_affinity_list").read_text()


def test_irqs_go_to_their_local_node_and_roll_back(engine: Engine, tmp_path: Path) -> None:
    root = build(tmp_path / "h", IrqHost())
    profile = write_profile(tmp_path / "p.yaml", LOCAL)
    before = tree(root)

    assert engine.apply(root, profile) is not None

    assert {affinity(root, n) for n in CONNECTX.irqs} == {"32-63,96-127\n"}
    assert affinity(root, 90) == "0-31,64-95\n"
    assert runtime_changes(root, profile) == []
    assert engine.apply(root, profile) is None
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == before


def test_a_managed_irq_is_skipped_and_the_rest_applies(engine: Engine, tmp_path: Path) -> None:
    nic = replace(CONNECTX, managed=frozenset({121}))
    root = build(tmp_path / "h", IrqHost(devices=[nic, GPU]))
    profile = write_profile(tmp_path / "p.yaml", LOCAL)
    before = tree(root)

    assert engine.apply(root, profile) is not None

    assert affinity(root, 121) == "0-127\n"
    assert affinity(root, 120) == affinity(root, 122) == "32-63,96-127\n"
    (records,) = journals(root)
    steps = {r["seq"]: r["id"] for r in records if r["type"] == "step"}
    (skipped,) = [r for r in records if r["type"] == "unsupported"]
    assert steps[skipped["seq"]] == "irq_affinity:0000:c2:00.0:irq121"
    assert "(Input/output error)" in skipped["error"]
    assert records[-1]["outcome"] == "applied"
    assert runtime_changes(root, profile) == ["irq_affinity:0000:c2:00.0:irq121"]
    engine.rollback(root)
    assert tree(root) == before


BAN = {
    "irq_affinity": [
        {"select": {"vendor": 0x15B3, "class": 0x0200}, "cpus": "local", "irqbalance": "ban"},
        {"select": {"vendor": 0x10DE, "class": 0x0302}, "cpus": "local"},
    ]
}


def test_banned_irqs_get_a_policy_script_and_irqbalance_a_drop_in(
    engine: Engine, tmp_path: Path
) -> None:
    root = build(tmp_path / "h", IrqHost(irqbalance=True, irqbalance_unit=True))
    profile = write_profile(tmp_path / "p.yaml", BAN)
    before = tree(root)

    assert engine.apply(root, profile) is not None

    script = root / POLICY.lstrip("/")
    assert script.read_text() == policy_script([CONNECTX.address])
    assert script.stat().st_mode & 0o777 == 0o755
    dropin = (root / DROPIN.lstrip("/")).read_text()
    assert "ExecStart=\nExecStart=/usr/sbin/irqbalance --foreground $IRQBALANCE_ARGS " in dropin
    assert dropin.endswith(f" --policyscript={POLICY}\n")
    (records,) = journals(root)
    ops = {r["id"]: r["operations"] for r in records if r["type"] == "step"}
    assert ops[f"irq_affinity:{DROPIN}"][1:] == [
        "run systemctl daemon-reload",
        "run systemctl try-restart irqbalance.service",
    ]
    # The script is written before the drop-in that makes irqbalance run it, and both before
    # the IRQs move: irqbalance restarts once, already leaving them alone.
    assert list(ops)[:2] == [f"irq_affinity:{POLICY}", f"irq_affinity:{DROPIN}"]
    assert len(ops[f"irq_affinity:{POLICY}"]) == 1
    assert runtime_changes(root, profile) == []
    assert engine.apply(root, profile) is None
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == before


def test_without_irqbalance_installed_a_ban_writes_nothing_of_its_own(
    engine: Engine, tmp_path: Path
) -> None:
    root = build(tmp_path / "h", IrqHost())
    profile = write_profile(tmp_path / "p.yaml", BAN)

    assert engine.apply(root, profile) is not None

    assert not (root / POLICY.lstrip("/")).exists()
    assert not (root / DROPIN.lstrip("/")).exists()
    assert runtime_changes(root, profile) == []


def test_a_ban_no_longer_asked_removes_tunes_files_and_a_rollback_gives_them_back(
    engine: Engine, tmp_path: Path
) -> None:
    root = build(tmp_path / "h", IrqHost(irqbalance=True, irqbalance_unit=True))
    assert engine.apply(root, write_profile(tmp_path / "ban.yaml", BAN)) is not None
    banned = tree(root)

    assert engine.apply(root, write_profile(tmp_path / "p.yaml", LOCAL)) is not None

    assert not (root / POLICY.lstrip("/")).exists()
    assert not (root / DROPIN.lstrip("/")).exists()
    (done, *_) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == banned
    assert (root / POLICY.lstrip("/")).stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize("fault_at", range(5))
def test_a_fault_while_banning_leaves_the_host_as_it_was(
    engine: Engine, tmp_path: Path, fault_at: int
) -> None:
    # The first operations: the policy script, the drop-in, daemon-reload, try-restart, IRQ 120.
    root = build(tmp_path / "h", IrqHost(irqbalance=True, irqbalance_unit=True))
    profile = write_profile(tmp_path / "p.yaml", BAN)

    happened = outcome(engine, root, profile, False, f"{fault_at} fail")

    assert happened == "rolled back"


def test_a_new_device_to_ban_rewrites_the_script_and_restarts_irqbalance_once(
    engine: Engine, tmp_path: Path
) -> None:
    root = build(tmp_path / "h", IrqHost(irqbalance=True, irqbalance_unit=True))
    assert engine.apply(root, write_profile(tmp_path / "nic.yaml", BAN)) is not None
    both = {"irq_affinity": [{**e, "irqbalance": "ban"} for e in BAN["irq_affinity"]]}

    assert engine.apply(root, write_profile(tmp_path / "both.yaml", both)) is not None

    script = (root / POLICY.lstrip("/")).read_text()
    assert script == policy_script([CONNECTX.address, GPU.address])
    second = journals(root)[-1]
    ops = {r["id"]: r["operations"] for r in second if r["type"] == "step"}
    # The drop-in is unchanged: the script's own step restarts irqbalance to read it.
    assert f"irq_affinity:{DROPIN}" not in ops
    assert ops[f"irq_affinity:{POLICY}"][1:] == ["run systemctl try-restart irqbalance.service"]
