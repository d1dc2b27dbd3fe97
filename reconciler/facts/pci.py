"""PCI devices as sysfs lists them, and the selectors a profile picks them with.

Each function under /sys/bus/pci/devices has its ids as text (`vendor`, `device`, `class`) and its
configuration space as binary `config` (parsed by `pcie`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, NamedTuple

from ..core.files import Files, Request
from ..core.schema import Before, Constrain, Strict
from . import pcie

DEVICES = "/sys/bus/pci/devices"
ATTRS = ("vendor", "device", "class", "config")
# -1 where the firmware did not say which node a device hangs off.
NUMA_NODE = DEVICES + "/*/numa_node"

# Where each function sits: /sys/bus/pci/devices/ADDR links to /sys/devices/pciDDDD:BB/... with
# one directory per bridge on the way down (root port, switch ports), the function's last. Read
# as plain file paths, the tree's own `vendor` files, level by level: every host type (local,
# SSH, snapshot directory, archive) answers globs already, and a snapshot keeps plain files.
TREE = "/sys/devices"
ADDRESS = re.compile(r"[0-9a-f]{4,5}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
# Root port, then switch upstream and downstream ports, two levels of switches and the device:
# eight levels reach further than PCI Express hierarchies go in practice.
MAX_DEPTH = 8
TREE_PATTERNS = tuple(
    f"{TREE}/pci*/{'/'.join(['*:??:??.?'] * depth)}/vendor" for depth in range(1, MAX_DEPTH + 1)
)
# Functions bound to vfio-pci (the driver's directory links each by its address), and every
# function of each IOMMU group.
VFIO = "/sys/bus/pci/drivers/vfio-pci"
IOMMU_GROUPS = "/sys/kernel/iommu_groups"


class PciDevice(NamedTuple):
    address: str  # 0000:41:00.0
    vendor: int
    device: int
    class_code: int  # 24 bits: base class, subclass, programming interface
    config: bytes

    @property
    def express(self) -> pcie.Express | None:
        return pcie.express(self.config)

    @property
    def header_only(self) -> bool:
        """Read without root: sysfs stops at the header, before any capability."""
        return len(self.config) <= pcie.HEADER_BYTES

    @property
    def no_express(self) -> str:
        """Why `express` is None."""
        if self.header_only:
            return (
                f"{self.address}: only the {len(self.config)}-byte config header is readable; "
                "reading PCI Express registers needs root."
            )
        return f"{self.address} has no PCI Express capability (a conventional PCI function)."

    @property
    def acs(self) -> pcie.AcsCapability | None:
        return pcie.acs(self.config)

    def no_extended(self) -> str | None:
        """Why the extended space (where ACS lives) was not read, if it was not."""
        if self.header_only:
            return (
                f"{self.address}: only the {len(self.config)}-byte config header is readable; "
                "reading its extended capabilities needs root."
            )
        if not pcie.extended_readable(self.config):
            return (
                f"{self.address}: sysfs holds only {len(self.config)} bytes of its config space, "
                "so the kernel has no access to its extended space (no ECAM/MMCONFIG) and "
                "tune cannot tell whether it has ACS."
            )
        return None

    def no_link(self) -> str | None:
        """Why the function has no PCI Express link to read, if it has none: no capability, or
        one of a function inside the root complex; None when it has one."""
        cap = self.express
        if cap is None:
            return self.no_express
        if not cap.has_link:
            return (
                f"{self.address} is {pcie.NO_LINK[cap.port_type]}: it has no PCI Express link "
                "(lspci shows no LnkCap or LnkSta for it)."
            )
        return None


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


def request_tree() -> Request:
    return Request.of(*TREE_PATTERNS)


def upstream(files: Files) -> dict[str, tuple[str, ...]]:
    """Each function's bridges, from the root port down, by address; a function is absent when
    its place in /sys/devices was not read."""
    found: dict[str, tuple[str, ...]] = {}
    for pattern in TREE_PATTERNS:
        for path in files.glob(pattern):
            chain = path.split("/")[4:-1]  # "", sys, devices, pciDDDD:BB, ..., vendor
            if chain and all(ADDRESS.fullmatch(a) for a in chain):
                found.setdefault(chain[-1], tuple(chain[:-1]))
    return found


def path_id(address: str, above: tuple[str, ...]) -> str:
    """The kernel's path form of a device for `pci=` options, `0000:00:01.1/00.0/08.0`: the
    first function on the root bus, then device.function of each below it down to `address`.
    Bus numbers below the root are handed out at enumeration and move when a card is added;
    the path stays (kernel-parameters.txt: "more robust against renumbering issues")."""
    top, *below = (*above, address)
    return "/".join([top, *(a.rsplit(":", 1)[1] for a in below)])


def request_vfio() -> Request:
    return Request.of(f"{VFIO}/*:*/vendor", f"{IOMMU_GROUPS}/*/devices/*:*/vendor")


def vfio_bound(files: Files) -> dict[str, str | None]:
    """The functions bound to vfio-pci, each with its IOMMU group (None when not read)."""
    groups = {}
    for path in files.glob(f"{IOMMU_GROUPS}/*/devices/*:*/vendor"):
        parts = path.split("/")  # "", sys, kernel, iommu_groups, N, devices, ADDR, vendor
        groups[parts[6]] = parts[4]
    bound = (path.split("/")[-2] for path in files.glob(f"{VFIO}/*:*/vendor"))
    return {address: groups.get(address) for address in sorted(bound) if ADDRESS.fullmatch(address)}


def numa_node(files: Files, device: PciDevice) -> int | None:
    """The NUMA node `device` is attached to; None when unread or not known to the firmware."""
    raw = files.value(f"{DEVICES}/{device.address}/numa_node")
    try:
        node = int(raw or "")
    except ValueError:
        return None
    return node if node >= 0 else None


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
    """Which PCI functions a profile entry means: every one whose ids match all that is given."""

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
