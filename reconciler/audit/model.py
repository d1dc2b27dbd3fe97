"""The audit as data: what rules return, and the report renderers and the profile writer read."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..core.changes import Change, Phase, Priority


class Area(StrEnum):
    PCIE = "pcie"
    CPU = "cpu"
    MEMORY = "memory"
    KERNEL = "kernel"
    MODULES = "modules"
    CONTAINER = "container"
    BOOT = "boot"
    GPU = "gpu"


@dataclass(frozen=True)
class Fix:
    """One profile entry that fixes a problem: where it goes in the profile and its value.

    `path` is below the section (below the list item for `pci` and `lxc`, which `item` names by
    its identity keys). A scalar value gets the long form `{value, priority, reason}`; a mapping
    value (`idle_states`, a `pci` item's settings) takes priority and reason beside its keys.
    """

    section: str
    path: tuple[str, ...]
    value: Any
    item: dict[str, Any] | None = None


@dataclass(frozen=True)
class Problem:
    """What a rule returns when something is wrong. `fixes` is empty for what tune cannot
    change; `remedy` then says what can (BIOS, kernel package, driver, hardware)."""

    priority: Priority
    observed: str
    evidence: tuple[str, ...]
    reason: str
    fixes: tuple[Fix, ...] = ()
    remedy: str = ""


@dataclass(frozen=True)
class Good:
    """What a rule returns when what it checks holds."""

    observed: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class NotIssue:
    """Something that looks wrong and is not (a device limit, idle link power saving)."""

    observed: str
    evidence: tuple[str, ...]
    reason: str


Verdict = Problem | Good | NotIssue


@dataclass(frozen=True)
class Finding:
    """A problem with its rule's id and area, and what the plan engine says its fix does.

    Actionable: the fix changes something `tune plan` lists (`changes`); `phase` is when it
    takes effect. A fix already configured for the next boot is not actionable (`pending`);
    a problem tune cannot fix has phase None and the rule's remedy as its fix.
    """

    id: str
    area: Area
    priority: Priority
    observed: str
    evidence: tuple[str, ...]
    reason: str
    fix: str
    phase: Phase | None
    changes: tuple[Change, ...] = ()
    fixes: tuple[Fix, ...] = ()
    pending: bool = False

    @property
    def actionable(self) -> bool:
        return bool(self.changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "area": self.area.value,
            "priority": self.priority.value,
            "actionable": self.actionable,
            "phase": self.phase.value if self.phase else "none",
            "observed": self.observed,
            "evidence": list(self.evidence),
            "reason": self.reason,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Remark:
    """A confirmed-good or not-an-issue item, with the rule that made it."""

    id: str
    area: Area
    observed: str
    evidence: tuple[str, ...]
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "area": self.area.value,
            "observed": self.observed,
            "evidence": list(self.evidence),
        }
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class Device:
    address: str
    name: str  # "NVIDIA 10de:2bb5"
    numa_node: int | None
    link: str | None  # "2.5GT/s x16 (capable of 32GT/s x16)"
    max_read_request: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "name": self.name,
            "numa_node": self.numa_node,
            "link": self.link,
            "max_read_request": self.max_read_request,
        }


@dataclass(frozen=True)
class HostSummary:
    name: str
    source: str
    kernel: str | None
    boot_id: str | None
    cpu_model: str | None
    sockets: int | None
    cpus: int
    numa_nodes: int | None
    cpufreq_driver: str | None
    governor: str | None
    nvidia_driver: str | None
    tune_files: tuple[str, ...] = ()  # boot-time files an earlier `tune apply` wrote
    gpus: tuple[Device, ...] = ()
    nics: tuple[Device, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in self.__dict__.items() if k not in ("gpus", "nics")}
        return out | {
            "gpus": [g.to_json() for g in self.gpus],
            "nics": [n.to_json() for n in self.nics],
        }


@dataclass(frozen=True)
class Report:
    host: HostSummary
    findings: tuple[Finding, ...]
    good: tuple[Remark, ...] = ()
    not_issues: tuple[Remark, ...] = field(default_factory=tuple)

    @property
    def actionable(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.actionable)

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host.to_json(),
            "findings": [f.to_json() for f in self.findings],
            "good": [g.to_json() for g in self.good],
            "not_issues": [n.to_json() for n in self.not_issues],
        }


WHEN = {Phase.RUNTIME: "runtime", Phase.REBOOT: "reboot"}


def phase_label(finding: Finding) -> str:
    if finding.pending:
        return "configured, reboot to apply"
    if finding.phase is None:
        return "not fixable by tune"
    return WHEN[finding.phase]
