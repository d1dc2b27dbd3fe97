"""The plan as data. Renderers, `apply` and `check` all consume these; nothing here reads a host."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

# A knob's value as compared: a normalised string, a sorted list of lines (LXC allow lines),
# or None when the host does not have the knob at all. None never equals "0".
Value = str | tuple[str, ...] | None


class Phase(StrEnum):
    RUNTIME = "runtime"  # takes effect when written
    REBOOT = "reboot"  # takes effect at the next boot or container restart

    @property
    def how(self) -> str:
        """When the phase's changes take effect and the command that applies that phase alone,
        as the text plan heads the phase."""
        return _HOW[self]

    @property
    def takes_effect(self) -> str:
        """When the phase's changes take effect, as a report says it."""
        return _TAKES_EFFECT[self]


_HOW = {
    Phase.RUNTIME: "live: tune apply --runtime-only",
    Phase.REBOOT: "at boot or container restart: tune apply --reboot-phase",
}
_TAKES_EFFECT = {
    Phase.RUNTIME: "live (runtime)",
    Phase.REBOOT: "at next boot or container restart",
}


class Priority(StrEnum):
    P0 = "P0"
    P1 = "P1"
    P2 = "P2"


class Knob:
    """Something about one knob target; its id is `kind:target`, as plan JSON names it."""

    kind: str
    target: str

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.target}"


@dataclass(frozen=True)
class Change(Knob):
    """One concrete target's current and desired value. In sync when they are equal."""

    kind: str
    target: str
    current: Value
    desired: Value
    phase: Phase
    priority: Priority = Priority.P1
    reason: str = ""
    # Changes that differ only in their subject (cpu3, 0000:41:00.0) fold into one text line:
    # `setting` is what they share ("idle C2"), `subject` what differs.
    setting: str = ""
    subject: str = ""
    # The exact command an operator would type to make this change by hand (reports only).
    fix: str = ""
    # The profile entry says `optional: true`: a kernel that refuses the write skips it.
    optional: bool = False
    # The knob does not exist on this host (no cpufreq in a VM, no such sysctl, no device): not a
    # change, so apply skips it and check does not count it; never set for a `required` entry.
    missing: bool = False

    @property
    def in_sync(self) -> bool:
        """Nothing to do: the value is the desired one, or the host has no such knob."""
        return self.current == self.desired or self.missing

    def to_json(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "current": jsonable(self.current),
            "desired": jsonable(self.desired),
            "phase": self.phase.value,
            "priority": self.priority.value,
            "reason": self.reason,
        }
        return out | {"optional": True} if self.optional else out


@dataclass(frozen=True)
class Pending(Knob):
    """Configured but not yet running: reboot to apply, or (`restart`) restart that service,
    which keeps what it started with until then."""

    kind: str
    target: str
    running: Value
    configured: Value
    restart: str = ""  # the systemd unit whose restart applies it; "": the next boot

    @property
    def action(self) -> str:
        return f"restart {self.restart} to apply" if self.restart else "reboot to apply"

    @property
    def until(self) -> str:
        """What the configured value waits for, as "running X, <until> Y" says it."""
        return "after restart" if self.restart else "next boot"

    def to_json(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "running": jsonable(self.running),
            "configured": jsonable(self.configured),
            "action": self.action,
        }
        return out | {"restart": self.restart} if self.restart else out


def pending_counts(pending: tuple[Pending, ...] | list[Pending]) -> str:
    """`1 pending reboot`, and the restarts where there are any: a summary's last words."""
    restarts = sum(bool(p.restart) for p in pending)
    said = f"{len(pending) - restarts} pending reboot"
    return said + (f", {restarts} pending restart" if restarts else "")


@dataclass(frozen=True)
class CheckResult:
    """An audit-only expectation: tune reports it and never changes it."""

    name: str
    ok: bool
    observed: str | None
    expected: str
    remedy: str
    subject: str = ""

    @property
    def id(self) -> str:
        return f"check:{self.name}" + (f":{self.subject}" if self.subject else "")

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"id": self.id}


@dataclass(frozen=True)
class Note:
    """Something the operator should know that is neither a change nor a failed check."""

    message: str
    about: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"about": self.about, "message": self.message}


@dataclass
class Outcome:
    """What one knob kind or check found: comparisons, pending reboots, notes."""

    changes: list[Change] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    def extend(self, other: Outcome) -> None:
        self.changes.extend(other.changes)
        self.pending.extend(other.pending)
        self.checks.extend(other.checks)
        self.notes.extend(other.notes)


@dataclass(frozen=True)
class HostFacts:
    name: str
    source: str
    kernel: str | None
    boot_id: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    profile: str
    host: HostFacts
    compared: tuple[Change, ...]
    pending: tuple[Pending, ...]
    checks: tuple[CheckResult, ...]
    notes: tuple[Note, ...]

    @property
    def changes(self) -> tuple[Change, ...]:
        return tuple(c for c in self.compared if not c.in_sync)

    @property
    def in_sync(self) -> tuple[Change, ...]:
        return tuple(c for c in self.compared if c.in_sync and not c.missing)

    @property
    def missing(self) -> tuple[Change, ...]:
        """Knobs this host does not have: neither a change nor in sync."""
        return tuple(c for c in self.compared if c.missing)

    @property
    def failed_checks(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if not c.ok)

    @property
    def is_clean(self) -> bool:
        """No change to make and every check passes; pending reboots alone keep a host clean."""
        return not self.changes and not self.failed_checks

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "host": self.host.to_json(),
            "changes": [c.to_json() for c in self.changes],
            "pending": [p.to_json() for p in self.pending],
            "checks": [c.to_json() for c in self.checks],
            "notes": [n.to_json() for n in self.notes],
        }


# A value as JSON writes it: a string, a list of lines, or null for absent.
JsonValue = str | list[str] | None


def jsonable(value: Value) -> JsonValue:
    """A value as plan JSON, journals and reports write it (a tuple of lines as a list)."""
    return list(value) if isinstance(value, tuple) else value
