"""The record a reboot-phase apply leaves on the target for the boot to be judged by:
`/var/lib/tune/pending.json`, with what each kind declared must hold after the boot. The apply
writes it; `tune verify` (`reconciler.boot.verify`) reads it after the reboot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.changes import JsonValue, jsonable
from ..core.errors import HostError
from ..hosts.base import ReadableHost
from ..kinds import named
from ..steps.ops import Step
from ..steps.records import conforms
from ..steps.state import STATE

PENDING = f"{STATE}/pending.json"


@dataclass(frozen=True)
class PendingBoot:
    run_id: str
    boot_id: str | None
    cmdline: dict[str, JsonValue]  # a value, every occurrence's value, or None: absent
    majors: dict[str, list[int]]  # container config -> NVIDIA majors it allows
    # A one-time boot (`reconciler.apply.tryonce`): its mechanism, and the steps that make the new
    # configuration the default once the boot is verified.
    try_once: str | None = None
    promote: tuple[Step, ...] = ()
    containers: list[str] = field(default_factory=list)  # the profile's container configs
    restart_containers: bool = False  # restart them after the boot is verified
    # The NVIDIA driver's parameters, as /proc/driver/nvidia/params prints name and value.
    nvidia_params: dict[str, str] = field(default_factory=dict)
    # The ECC mode each GPU (by its PCI bus id) must run with, as nvidia-smi prints it.
    ecc: dict[str, str] = field(default_factory=dict)
    # The boot id the reboot was asked from, written (fsynced) by the request itself just
    # before it asks: a resume that finds the same boot id and no such mark knows the reboot
    # was never asked (`Engine.reboot`).
    reboot_asked_in: str | None = None

    def to_json(self) -> str:
        data = {
            "run_id": self.run_id,
            "boot_id": self.boot_id,
            "cmdline": self.cmdline,
            "majors": self.majors,
            "try_once": self.try_once,
            "promote": [step.to_json() for step in self.promote],
            "containers": self.containers,
            "restart_containers": self.restart_containers,
            "nvidia_params": self.nvidia_params,
            "ecc": self.ecc,
        }
        if self.reboot_asked_in is not None:
            data["reboot_asked_in"] = self.reboot_asked_in
        return json.dumps(data, indent=2) + "\n"

    def reboot_asked(self) -> PendingBoot:
        """This record marked: the reboot asked from the boot it was written in."""
        return replace(self, reboot_asked_in=self.boot_id)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PendingBoot:
        return cls(
            data["run_id"],
            data.get("boot_id"),
            data["cmdline"],
            data["majors"],
            data.get("try_once"),
            tuple(Step.from_json(step) for step in data.get("promote", ())),
            list(data.get("containers", data["majors"])),
            bool(data.get("restart_containers", False)),
            dict(data.get("nvidia_params", {})),
            dict(data.get("ecc", {})),
            data.get("reboot_asked_in"),
        )


def pending_of(
    run_id: str,
    boot_id: str | None,
    steps: tuple[Step, ...],
    containers: Sequence[str] = (),
    restart_containers: bool = False,
) -> PendingBoot | None:
    """What the boot must bring, from the reboot-phase steps of a run; None when there is none."""
    cmdline: dict[str, JsonValue] = {}
    majors: dict[str, list[int]] = {}
    nvidia: dict[str, str] = {}
    ecc: dict[str, str] = {}
    for step in steps:
        kind = named(step.kind)
        expected = kind.after_boot(step) if kind is not None else None
        if expected is not None:
            cmdline.update({name: jsonable(v) for name, v in expected.cmdline.items()})
            majors.update(expected.majors)
            nvidia.update(expected.nvidia_params)
            ecc.update(expected.ecc)
    if not (cmdline or majors or nvidia or ecc) and not (restart_containers and containers):
        return None
    return PendingBoot(
        run_id,
        boot_id,
        cmdline,
        majors,
        containers=list(containers),
        restart_containers=restart_containers,
        nvidia_params=nvidia,
        ecc=ecc,
    )


def read_pending(host: ReadableHost) -> PendingBoot | None:
    data = host.read_file(PENDING)
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
