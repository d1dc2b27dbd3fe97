"""Helpers for the audit tests: run the audit on a snapshot, edit PCI config space and CPU
files inside a snapshot, and check that the suggested profile closes the loop."""

from __future__ import annotations

import struct
from pathlib import Path

from conftest import write

from reconciler.audit.engine import audit
from reconciler.audit.model import Finding, Report
from reconciler.audit.suggest import suggested_profile
from reconciler.audit.thresholds import Thresholds
from reconciler.facts import pcie
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile
from reconciler.render.folding import fold

N_CPUS = 128
SPEED_CODES = {v: k for k, v in pcie.SPEEDS.items()}


def run_audit(root: Path, **limits: str) -> Report:
    return audit(SnapshotHost(root), Thresholds(**limits))  # type: ignore[arg-type]


def findings(report: Report) -> dict[str, Finding]:
    by_id = {f.id: f for f in report.findings}
    assert len(by_id) == len(report.findings), "a rule reports at most one finding"
    return by_id


def only(report: Report, rule_id: str) -> Finding:
    """The host differs from a tuned one in one respect: exactly that rule fires."""
    assert [f.id for f in report.findings] == [rule_id]
    return report.findings[0]


def remarks(report: Report, rule_id: str) -> tuple[list[str], list[str]]:
    good = [r.observed for r in report.good if r.id == rule_id]
    not_issues = [r.observed for r in report.not_issues if r.id == rule_id]
    return good, not_issues


def closes_loop(root: Path, report: Report, tmp_path: Path) -> None:
    """`tune plan --no-persist` of the suggested profile on the same host lists exactly the
    actionable findings: the same change ids, each folded group within one finding (a finding
    may fix more than one setting: a container's allow and mount lines)."""
    target = tmp_path / "suggested.yaml"
    target.write_text(suggested_profile(report))
    loaded = load_profile(target)
    persisted = make_plan(loaded, observe(SnapshotHost(root), loaded.profile))
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, False), False)
    assert {c.id for c in persisted.changes} - {c.id for c in plan.changes} == {
        c.id for c in persisted.changes if c.kind == "file"
    }, "persistence adds tune's boot-time files and nothing else"
    owner = {c.id: f.id for f in report.actionable for c in f.changes}
    assert sum(len(f.changes) for f in report.actionable) == len(owner), "no change in two"
    assert {c.id for c in plan.changes} == set(owner)
    groups = fold(plan.changes)
    assert {owner[g.first.id] for g in groups} == {f.id for f in report.actionable}
    assert all(len({owner[c.id] for c in g.changes}) == 1 for g in groups)


# --- editing a snapshot ----------------------------------------------------------------------


def device_dir(root: Path, address: str) -> Path:
    return root / "sys/bus/pci/devices" / address


def edit_express(root: Path, address: str, register: int, mask: int, value: int) -> None:
    """Set the bits `mask` of a 16-bit PCI Express capability register to `value`."""
    path = device_dir(root, address) / "config"
    config = bytearray(path.read_bytes())
    cap = pcie.express(bytes(config))
    assert cap is not None
    at = cap.offset + register
    old = struct.unpack_from("<H", config, at)[0]
    struct.pack_into("<H", config, at, (old & ~mask) | (value & mask))
    path.write_bytes(bytes(config))


def set_link(root: Path, address: str, speed: str | None = None, width: int | None = None) -> None:
    if speed is not None:
        edit_express(root, address, pcie.LNKSTA, 0xF, SPEED_CODES[speed])
    if width is not None:
        edit_express(root, address, pcie.LNKSTA, 0x3F << 4, width << 4)


def set_mrrs(root: Path, address: str, size: int) -> None:
    path = device_dir(root, address) / "config"
    path.write_bytes(pcie.with_max_read_request(path.read_bytes(), size))


def set_vendor(root: Path, address: str, vendor: int) -> None:
    (device_dir(root, address) / "vendor").write_text(f"0x{vendor:04x}\n")


def per_cpu(root: Path, relative: str, value: str) -> None:
    """Write `cpuN/<relative>` for every CPU of the example host."""
    for cpu in range(N_CPUS):
        write(root, f"/sys/devices/system/cpu/cpu{cpu}/{relative}", value + "\n")


def add_idle_state(root: Path, index: int, name: str, latency: int, disabled: bool) -> None:
    per_cpu(root, f"cpuidle/state{index}/name", name)
    per_cpu(root, f"cpuidle/state{index}/latency", str(latency))
    per_cpu(root, f"cpuidle/state{index}/disable", "1" if disabled else "0")


def sysctl(root: Path, key: str, value: str) -> None:
    write(root, "/proc/sys/" + key.replace(".", "/"), value + "\n")


def edit(root: Path, path: str, old: str, new: str) -> None:
    target = root / path.lstrip("/")
    text = target.read_text()
    assert old in text, f"{old!r} not in {path}"
    target.write_text(text.replace(old, new))
