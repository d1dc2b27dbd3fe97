"""The record a reboot-phase apply leaves on the target for the boot to be judged by:
`/var/lib/tune/pending.json`, with what each kind declared must hold after the boot. The apply
writes it; `tune verify` (`reconciler.boot.verify`) reads it after the reboot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.errors import HostError
from ..hosts.base import ReadableHost
from ..kinds import every, named
from ..steps.ops import Step
from ..steps.records import conforms, of_type
from ..steps.state import STATE

PENDING = f"{STATE}/pending.json"


@dataclass(frozen=True)
class PendingBoot:
    run_id: str
    boot_id: str | None
    # Per kind (its name in the registry), what its steps expect of the next boot, by target,
    # as JSON data the kind wrote (`Kind.after_boot`) and checks (`Kind.verify_after_boot`).
    expected: dict[str, dict[str, Any]] = field(default_factory=dict)
    # A one-time boot (`reconciler.apply.tryonce`): its mechanism, and the steps that make the new
    # configuration the default once the boot is verified.
    try_once: str | None = None
    promote: tuple[Step, ...] = ()
    containers: list[str] = field(default_factory=list)  # the profile's container configs
    restart_containers: bool = False  # restart them after the boot is verified
    # The boot id the reboot was asked from, written (fsynced) by the request itself just
    # before it asks: a resume that finds the same boot id and no such mark knows the reboot
    # was never asked (`Engine.reboot`).
    reboot_asked_in: str | None = None
    # `tune apply --arm`: the boot was arranged (try-once where the boot loader allows) and left
    # to whoever reboots the host (an engine, the operator); tune does not reboot it.
    armed: bool = False

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "run_id": self.run_id,
            "boot_id": self.boot_id,
            "expected": self.expected,
            "try_once": self.try_once,
            "promote": [step.to_json() for step in self.promote],
            "containers": self.containers,
            "restart_containers": self.restart_containers,
        }
        if self.reboot_asked_in is not None:
            data["reboot_asked_in"] = self.reboot_asked_in
        if self.armed:
            data["armed"] = True
        return json.dumps(data, indent=2) + "\n"

    def reboot_asked(self) -> PendingBoot:
        """This record marked: the reboot asked from the boot it was written in."""
        return replace(self, reboot_asked_in=self.boot_id)

    @classmethod
    def from_json(cls, data: Any) -> PendingBoot:
        """The record, from what this tune writes or what one before the registry wrote (a
        field per kind: `Kind.pending_field`), each kind's expectations checked as it
        declares them (`Kind.after_boot_value`)."""
        if not isinstance(data, dict):
            raise TypeError(f"pending is {type(data).__name__}, not an object")
        expected = data["expected"] if "expected" in data else _by_field(data)
        if not isinstance(expected, dict):
            raise TypeError(f"pending.expected is {type(expected).__name__}, not an object")
        # The first records had no `containers`: the configs of their `majors` were those.
        containers = data["containers"] if "containers" in data else data.get("majors", ())
        return cls(
            data["run_id"],
            data.get("boot_id"),
            {name: _checked(name, part) for name, part in expected.items()},
            data.get("try_once"),
            tuple(Step.from_json(step) for step in data.get("promote", ())),
            list(containers),
            bool(data.get("restart_containers", False)),
            data.get("reboot_asked_in"),
            data.get("armed", False),
        )


def _by_field(data: dict[str, Any]) -> dict[str, Any]:
    """The expectations of a record written before the registry kept them per kind: a field
    of its own for each kind that had any (`Kind.pending_field`)."""
    # In the record's order: the order that version checked them in.
    fields = {kind.pending_field: kind.kind for kind in every() if kind.pending_field}
    return {fields[name]: value for name, value in data.items() if name in fields}


def _checked(name: str, part: Any) -> dict[str, Any]:
    """One kind's expectations: a kind this tune knows, every value of the type it declares."""
    kind = named(name)
    if kind is None:
        raise ValueError(f"pending.expected names {name!r}, a kind this tune does not know")
    if not isinstance(part, dict):
        raise TypeError(f"pending.expected.{name} is {type(part).__name__}, not an object")
    return {
        target: of_type(value, kind.after_boot_value, f"pending.expected.{name}[{target!r}]")
        for target, value in part.items()
    }


def pending_of(
    run_id: str,
    boot_id: str | None,
    steps: Sequence[Step],
    containers: Sequence[str] = (),
    restart_containers: bool = False,
) -> PendingBoot | None:
    """What the boot must bring, from the reboot-phase steps of a run, as each step's kind
    declares it (`Kind.after_boot`); None when there is nothing."""
    expected: dict[str, dict[str, Any]] = {}
    for step in steps:
        kind = named(step.kind)
        after = kind.after_boot(step) if kind is not None else {}
        if after:
            expected.setdefault(step.kind, {}).update(after)
    if not expected and not (restart_containers and containers):
        return None
    return PendingBoot(
        run_id,
        boot_id,
        expected,
        containers=list(containers),
        restart_containers=restart_containers,
    )


def read_pending(host: ReadableHost) -> PendingBoot | None:
    return pending_from(host.read_file(PENDING))


def pending_from(data: bytes | None) -> PendingBoot | None:
    """The record `data` (pending.json's bytes, None when absent) holds; `HostError` for one
    that is not a record tune wrote."""
    if data is None:
        return None
    try:
        pending = PendingBoot.from_json(json.loads(data))
        # Every field of its declared type, as a journal record is read: a damaged file is
        # this message, not an AttributeError deep in `verify`.
        conforms(pending, "pending")
    except (ValueError, KeyError, TypeError) as exc:
        raise HostError(f"{PENDING} is not a pending record tune wrote ({exc}).") from None
    return pending
