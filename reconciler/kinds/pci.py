"""PCI Express device settings, on every function a selector matches.

```yaml
pci:
  - select: {vendor: 0x10de, class: 0x0302}     # also device:, class_prefix: 0x03
    max_read_request: 4096                      # bytes, 128..4096, a power of two
    relaxed_ordering: true                      # Device Control bit 4
    priority: P0
    reason: "512-byte reads halve host-to-GPU bandwidth"
```
`class` is the top 16 bits of the 24-bit class code (0x0302: 3D controller), `class_prefix`
the top byte (0x03: any display controller). Each setting is a masked setpci write of Device
Control (`CAP_EXP+8.w=VALUE:MASK`) that leaves its other bits as they are.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, NamedTuple

from ..core.changes import Change, Note, Outcome, Phase
from ..core.errors import HostError
from ..core.files import Files, Request
from ..core.schema import After, Constrain
from ..facts import pcie
from ..facts.pci import DEVICES, PciDevice, Selector, pci_devices, request_devices
from ..steps.ops import Command, Need, Probe, Read, Require, Step
from ..steps.persist import UDEV, Persisted
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
    relaxed_ordering: Annotated[bool, Constrain(strict=True)] | None = None


class DevCtlField(NamedTuple):
    """One setting of the Device Control register: how the plan shows it, which bits carry it,
    and how a probe reads it back."""

    name: str  # the profile key, and the last part of the change's target
    mask: int
    read: Read
    shown: Callable[[int], str]  # Device Control -> the plan's value
    bits: Callable[[str], int]  # the plan's value -> the bits under `mask`
    wanted: Callable[[PciEntry], str | None]  # the entry's desired plan value, if it sets one

    def probe(self, config: str, at: int) -> Probe:
        if self.read is Read.MRRS:
            return Probe(config, Read.MRRS, str(at))
        return Probe(config, Read.BITS, f"{at}:{self.mask:04x}")

    def reading(self, value: str) -> str:
        """What `probe` reads once Device Control holds `value`."""
        return value if self.read is Read.MRRS else f"{self.bits(value):04x}"


def _on(flag: bool | None) -> str | None:
    return None if flag is None else "on" if flag else "off"


FIELDS = (
    DevCtlField(
        "max_read_request",
        pcie.MRRS_MASK,
        Read.MRRS,
        lambda control: str(pcie.max_read_request(control)),
        lambda value: pcie.mrrs_field(int(value)) << pcie.MRRS_SHIFT,
        lambda item: None if item.max_read_request is None else str(item.max_read_request),
    ),
    DevCtlField(
        "relaxed_ordering",
        pcie.RELAXED_ORDERING,
        Read.BITS,
        lambda control: "on" if control & pcie.RELAXED_ORDERING else "off",
        lambda value: pcie.RELAXED_ORDERING if value == "on" else 0,
        lambda item: _on(item.relaxed_ordering),
    ),
)
BY_NAME = {f.name: f for f in FIELDS}
DEVCTL_REGISTER = f"CAP_EXP+{pcie.DEVCTL:x}"


class Pci(Kind[list[PciEntry]]):
    section = "pci"
    spec_type = list[PciEntry]
    kind = "pci"
    phase = Phase.RUNTIME
    reads = "`/sys/bus/pci/devices/*/{vendor,device,class,config}`"
    compared = (
        "Device Control bits 14:12 (MaxReadReq) and bit 4 (Relaxed Ordering) from the binary "
        "config space"
    )
    noun = "devices"

    def request(self, spec: list[PciEntry]) -> Request:
        return request_devices()

    def compare(self, spec: list[PciEntry], files: Files) -> Outcome:
        outcome = Outcome()
        devices = pci_devices(files)
        for item in spec:
            wanted = settings(item)
            if not wanted:
                continue
            matched = [d for d in devices if item.select.matches(d)]
            for device in matched:
                cap = device.express
                # Read whole without the capability: conventional PCI has no such register.
                missing = cap is None and not device.header_only
                for field, desired in wanted:
                    current = None if cap is None else field.shown(cap.device_control)
                    outcome.changes.append(
                        self._change(device.address, field, current, desired, item, missing)
                    )
                if cap is None:
                    said = missing_note(device.no_express, item) if missing else device.no_express
                    outcome.notes.append(Note(said, f"pci:{device.address}"))
            if not matched:
                target = item.select.describe()
                for field, desired in wanted:
                    outcome.changes.append(
                        self._change(target, field, None, desired, item, missing=True)
                    )
                outcome.notes.append(no_match_note(self.kind, item.select, item))
        return outcome

    def _change(
        self,
        subject: str,
        field: DevCtlField,
        current: str | None,
        desired: str,
        item: PciEntry,
        missing: bool,
    ) -> Change:
        return self.change(
            f"{subject}:{field.name}",
            current,
            desired,
            item,
            setting=field.name,
            subject=subject,
            # The address is a directory name of the host's: quoted, so a name made to be
            # a shell command is one word of the command the reader copies.
            fix=f"setpci -s {shlex.quote(subject)} {masked_write([(field, desired)])}",
            missing=missing,
        )

    def step(self, spec: list[PciEntry], change: Change, files: Files) -> Step:
        return _step(change, files)

    def persist(self, spec: list[PciEntry], files: Files) -> list[Persisted]:
        return [
            Persisted(
                UDEV,
                f'ACTION=="add|bind", SUBSYSTEM=="pci", {item.select.udev_match()}, '
                f'RUN+="{SETPCI} -s $kernel {masked_write(wanted)}"',
            )
            for item in spec
            if (wanted := settings(item))
        ]


def settings(item: PciEntry) -> list[tuple[DevCtlField, str]]:
    """The Device Control settings `item` sets, each with its desired plan value."""
    return [(f, d) for f in FIELDS if (d := f.wanted(item)) is not None]


def no_match(target: str) -> str:
    return f"No PCI device matches {target}."


def no_match_note(kind: str, select: Selector, meta: Meta) -> Note:
    """What the plan says of an entry whose selector matches no function on the host."""
    target = select.describe()
    return Note(missing_note(no_match(target), meta), f"{kind}:{target}")


def device_at(files: Files, address: str) -> PciDevice:
    """The function at `address` in the observation a step is made from; HostError when the
    host no longer has it."""
    device = next((d for d in pci_devices(files) if d.address == address), None)
    if device is None:
        raise HostError(no_match(address))
    return device


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
        return Command(("setpci", "-s", address, setpci_word(register, value, mask)))

    return Step.of(
        change,
        probe=probe,
        expect=readings[0],
        restored=readings[1],
        do=(write(values[0]),),
        undo=(write(values[1]),),
        requires=(Require(Need.COMMAND, "setpci"),),
    )


def setpci_word(register: str, value: int, mask: int) -> str:
    """`REGISTER.w=VALUE:MASK`: setpci writes only the bits under `mask` of the 16-bit word."""
    return f"{register}.w={value:04x}:{mask:04x}"


def masked_write(wanted: list[tuple[DevCtlField, str]]) -> str:
    """`CAP_EXP+8.w=V:M`: only the bits of the given settings change in Device Control."""
    value = sum(field.bits(desired) for field, desired in wanted)
    mask = sum(field.mask for field, _ in wanted)
    return setpci_word(DEVCTL_REGISTER, value, mask)


def _step(change: Change, files: Files) -> Step:
    address, name = change.target.rsplit(":", 1)
    field = BY_NAME[name]
    device = device_at(files, address)
    cap = device.express
    if cap is None or change.current is None:
        raise HostError(f"{change.id} cannot be set: {device.no_express}")
    desired, prior = str(change.desired), str(change.current)
    return setpci_step(
        change,
        address,
        DEVCTL_REGISTER,
        field.mask,
        (field.bits(desired), field.bits(prior)),
        field.probe(f"{DEVICES}/{address}/config", cap.offset + pcie.DEVCTL),
        (field.reading(desired), field.reading(prior)),
    )


KIND = Pci()
