"""PCI Express device settings, on every function a selector matches.

```yaml
pci:
  - select: {vendor: 0x10de, class: 0x0302}     # also device:, class_prefix: 0x03
    max_read_request: 4096                      # bytes, 128..4096, a power of two
    priority: P0
    reason: "512-byte reads halve host-to-GPU bandwidth"
```
`class` is the top 16 bits of the 24-bit class code (0x0302: 3D controller), `class_prefix`
the top byte (0x03: any display controller).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Annotated

from ..apply.persist import UDEV, Persisted
from ..apply.steps import Command, Need, Probe, Read, Require, Step
from ..errors import HostError
from ..facts import pcie
from ..facts.pci import DEVICES, Selector, pci_devices, request_devices
from ..hosts.files import Files, Request
from ..plan.model import Change, Note, Outcome, Phase
from ..profile.schema import After, Constrain
from .base import Kind, Meta, missing_note

# Debian, Ubuntu and Proxmox install it here; udev's RUN needs an absolute path.
SETPCI = "/usr/bin/setpci"


def _mrrs(value: int) -> int:
    pcie.mrrs_field(value)  # raises ValueError unless 128..4096 and a power of two
    return value


@dataclass(frozen=True, kw_only=True)
class PciEntry(Meta):
    select: Selector
    max_read_request: Annotated[int, Constrain(strict=True), After(_mrrs)] | None = None


class Pci(Kind[list[PciEntry]]):
    section = "pci"
    spec_type = list[PciEntry]
    kind = "pci"
    phase = Phase.RUNTIME
    reads = "`/sys/bus/pci/devices/*/{vendor,device,class,config}`"
    compared = "Device Control bits 14:12 from the binary config space"
    noun = "devices"

    def request(self, spec: list[PciEntry]) -> Request:
        return request_devices()

    def compare(self, spec: list[PciEntry], files: Files) -> Outcome:
        outcome = Outcome()
        devices = pci_devices(files)
        for item in spec:
            if item.max_read_request is None:
                continue
            matched = [d for d in devices if item.select.matches(d)]
            desired = str(item.max_read_request)
            for device in matched:
                cap = device.express
                current = None if cap is None else str(cap.max_read_request)
                # Read whole without the capability: conventional PCI has no such register.
                missing = cap is None and not device.header_only
                outcome.changes.append(
                    self._change(device.address, current, desired, item, missing=missing)
                )
                if cap is None:
                    said = missing_note(device.no_express, item) if missing else device.no_express
                    outcome.notes.append(Note(said, f"pci:{device.address}"))
            if not matched:
                target = item.select.describe()
                outcome.changes.append(self._change(target, None, desired, item, missing=True))
                outcome.notes.append(no_match_note(self.kind, item.select, item))
        return outcome

    def _change(
        self, subject: str, current: str | None, desired: str, item: PciEntry, missing: bool
    ) -> Change:
        field = pcie.mrrs_field(int(desired)) << pcie.MRRS_SHIFT
        return self.change(
            f"{subject}:max_read_request",
            current,
            desired,
            item,
            setting="max_read_request",
            subject=subject,
            # The address is a directory name of the host's: quoted, so a name made to be
            # a shell command is one word of the command the reader copies.
            fix=f"setpci -s {shlex.quote(subject)} CAP_EXP+8.w={field:04x}:{pcie.MRRS_MASK:04x}",
            missing=missing,
        )

    def step(self, spec: list[PciEntry], change: Change, files: Files) -> Step:
        return _step(change, files)

    def persist(self, spec: list[PciEntry], files: Files) -> list[Persisted]:
        return [
            Persisted(
                UDEV,
                f'ACTION=="add|bind", SUBSYSTEM=="pci", {item.select.udev_match()}, '
                f'RUN+="{SETPCI} -s $kernel {masked_write(item.max_read_request)}"',
            )
            for item in spec
            if item.max_read_request is not None
        ]


def no_match_note(kind: str, select: Selector, meta: Meta) -> Note:
    """What the plan says of an entry whose selector matches no function on the host."""
    target = select.describe()
    return Note(missing_note(f"No PCI device matches {target}.", meta), f"{kind}:{target}")


def setpci_step(
    change: Change,
    address: str,
    register: str,
    mask: int,
    values: tuple[int, int],
    probe: Probe,
    readings: tuple[str, str],
) -> Step:
    """A masked setpci write of `register` (`CAP_EXP+8`, `ECAP_ACS+6`) on `address`: `values`
    are the desired and the prior bits under `mask`, `readings` what `probe` reads after each.
    A masked write leaves the register's other bits as the device has them."""

    def write(value: int) -> Command:
        return Command(("setpci", "-s", address, f"{register}.w={value:04x}:{mask:04x}"))

    return Step.of(
        change,
        probe=probe,
        expect=readings[0],
        restored=readings[1],
        do=(write(values[0]),),
        undo=(write(values[1]),),
        requires=(Require(Need.COMMAND, "setpci"),),
    )


def masked_write(size: int) -> str:
    """`CAP_EXP+8.w=V:7000`: only Max_Read_Request_Size changes in Device Control."""
    field = pcie.mrrs_field(size) << pcie.MRRS_SHIFT
    return f"CAP_EXP+{pcie.DEVCTL:x}.w={field:04x}:{pcie.MRRS_MASK:04x}"


def _step(change: Change, files: Files) -> Step:
    address = change.target.rsplit(":", 1)[0]
    device = next((d for d in pci_devices(files) if d.address == address), None)
    if device is None:
        raise HostError(f"No PCI device matches {address}.")
    cap = device.express
    if cap is None or change.current is None:
        raise HostError(f"{change.id} cannot be set: {device.no_express}")
    desired, prior = int(str(change.desired)), int(str(change.current))
    return setpci_step(
        change,
        address,
        f"CAP_EXP+{pcie.DEVCTL:x}",
        pcie.MRRS_MASK,
        (pcie.mrrs_field(desired) << pcie.MRRS_SHIFT, pcie.mrrs_field(prior) << pcie.MRRS_SHIFT),
        Probe(f"{DEVICES}/{address}/config", Read.MRRS, str(cap.offset + pcie.DEVCTL)),
        (str(desired), str(prior)),
    )


KIND = Pci()
