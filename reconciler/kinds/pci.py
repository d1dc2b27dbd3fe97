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
from dataclasses import dataclass, field
from typing import Annotated, Any

from ..apply.persist import UDEV, Persisted
from ..apply.steps import Command, Need, Probe, Read, Require, Step
from ..errors import HostError
from ..facts import pcie
from ..hosts.files import Files, Request
from ..plan.model import Change, Note, Outcome, Phase
from ..profile.schema import After, Before, Constrain
from .base import Kind, Meta, Strict

DEVICES = "/sys/bus/pci/devices"
# Debian, Ubuntu and Proxmox install it here; udev's RUN needs an absolute path.
SETPCI = "/usr/bin/setpci"
ATTRS = ("vendor", "device", "class", "config")


def _hex_or_int(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return value
    return value


def _id(bits: int) -> Any:
    # Strict: YAML `true` is not vendor 1.
    return Annotated[int, Constrain(strict=True, ge=0, lt=1 << bits), Before(_hex_or_int)]


@dataclass(frozen=True, kw_only=True)
class Selector(Strict):
    vendor: _id(16) | None = None  # type: ignore[valid-type]
    device: _id(16) | None = None  # type: ignore[valid-type]
    class_: _id(16) | None = field(default=None, metadata={"alias": "class"})  # type: ignore[valid-type]
    class_prefix: _id(8) | None = None  # type: ignore[valid-type]

    def __post_init__(self) -> None:
        if all(v is None for v in (self.vendor, self.device, self.class_, self.class_prefix)):
            raise ValueError("select needs at least one of vendor, device, class, class_prefix")

    def matches(self, device: PciDevice) -> bool:
        return (
            (self.vendor is None or device.vendor == self.vendor)
            and (self.device is None or device.device == self.device)
            and (self.class_ is None or device.class_code >> 8 == self.class_)
            and (self.class_prefix is None or device.class_code >> 16 == self.class_prefix)
        )

    def udev_match(self) -> str:
        """The same selection as udev ATTR matches (sysfs prints ids as 0x%04x, class 0x%06x)."""
        parts = []
        if self.vendor is not None:
            parts.append(f'ATTR{{vendor}}=="0x{self.vendor:04x}"')
        if self.device is not None:
            parts.append(f'ATTR{{device}}=="0x{self.device:04x}"')
        if self.class_ is not None:
            parts.append(f'ATTR{{class}}=="0x{self.class_:04x}??"')
        if self.class_prefix is not None:
            parts.append(f'ATTR{{class}}=="0x{self.class_prefix:02x}????"')
        return ", ".join(parts)

    def describe(self) -> str:
        parts = [
            ("vendor", self.vendor, 4),
            ("device", self.device, 4),
            ("class", self.class_, 4),
            ("class_prefix", self.class_prefix, 2),
        ]
        return ",".join(f"{k}=0x{v:0{w}x}" for k, v, w in parts if v is not None)


def _mrrs(value: int) -> int:
    pcie.mrrs_field(value)  # raises ValueError unless 128..4096 and a power of two
    return value


@dataclass(frozen=True, kw_only=True)
class PciEntry(Meta):
    select: Selector
    max_read_request: Annotated[int, Constrain(strict=True), After(_mrrs)] | None = None


@dataclass(frozen=True)
class PciDevice:
    address: str  # 0000:41:00.0
    vendor: int
    device: int
    class_code: int  # 24 bits: base class, subclass, programming interface
    config: bytes

    @property
    def express(self) -> pcie.Express | None:
        return pcie.express(self.config)


def request_devices() -> Request:
    return Request.of(*(f"{DEVICES}/*/{a}" for a in ATTRS))


def pci_devices(files: Files) -> list[PciDevice]:
    devices = []
    for path in files.glob(f"{DEVICES}/*/vendor"):
        base = path.rsplit("/", 1)[0]
        try:
            vendor, device, class_code = (
                int(files.value(f"{base}/{a}") or "", 16) for a in ("vendor", "device", "class")
            )
        except ValueError:
            continue
        config = files.read(f"{base}/config") or b""
        devices.append(PciDevice(base.rsplit("/", 1)[1], vendor, device, class_code, config))
    return sorted(devices, key=lambda d: d.address)


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
                outcome.changes.append(self._change(device.address, current, desired, item))
                if cap is None:
                    outcome.notes.append(Note(_no_express(device), f"pci:{device.address}"))
            if not matched:
                target = item.select.describe()
                outcome.changes.append(self._change(target, None, desired, item))
                outcome.notes.append(Note(f"No PCI device matches {target}.", f"pci:{target}"))
        return outcome

    def _change(self, subject: str, current: str | None, desired: str, item: PciEntry) -> Change:
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
        raise HostError(f"{change.id} cannot be set: {_no_express(device)}")
    config = f"{DEVICES}/{address}/config"
    return Step.of(
        change,
        probe=Probe(config, Read.MRRS, str(cap.offset + pcie.DEVCTL)),
        expect=str(change.desired),
        restored=str(change.current),
        do=(Command(("setpci", "-s", address, masked_write(int(str(change.desired))))),),
        undo=(Command(("setpci", "-s", address, masked_write(int(str(change.current))))),),
        requires=(Require(Need.COMMAND, "setpci"),),
    )


def _no_express(device: PciDevice) -> str:
    if len(device.config) <= pcie.HEADER_BYTES:
        return (
            f"{device.address}: only the {len(device.config)}-byte config header is readable; "
            "reading PCI Express registers needs root."
        )
    return f"{device.address} has no PCI Express capability."


KIND = Pci()
