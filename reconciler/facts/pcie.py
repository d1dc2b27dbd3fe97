"""PCI configuration space, read from the binary `config` file sysfs exposes.

Only what tune needs: the capability list, the PCI Express capability's type, Device Control
(Max_Read_Request_Size, Relaxed Ordering), Link Capabilities and Link Status; the extended
capability list and its Access Control Services capability. Offsets are from the PCI Express
Base Specification, sections 7.5.3 and 7.7.8; `lspci -vvv` prints the same fields.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

STATUS = 0x06
STATUS_CAP_LIST = 0x10
CAP_POINTER = 0x34
CAP_ID_EXP = 0x10
# Unprivileged reads of sysfs `config` stop after the 64-byte header.
HEADER_BYTES = 64
# The conventional space; the extended space (PCI Express only) runs from here to 4096. sysfs
# gives root all 4096 bytes where the kernel can reach them (ECAM), else only these 256.
CONVENTIONAL_BYTES = 0x100

EXP_FLAGS = 0x02
DEVCAP = 0x04
DEVCTL = 0x08
LNKCAP = 0x0C
LNKSTA = 0x12
MRRS_SHIFT = 12
MRRS_MASK = 0x7000
RELAXED_ORDERING = 0x0010  # Device Control bit 4, "RlxdOrd" in lspci

# Access Control Services (PCIe Base 7.7.8): the capability register at +4, control at +6.
ECAP_ID_ACS = 0x000D
ACS_CAPABILITY = 0x04
ACS_CONTROL = 0x06
# Control bits in lspci's order (ls-ecaps.c, cap_acs).
ACS_BITS = (
    "SrcValid",
    "TransBlk",
    "ReqRedir",
    "CmpltRedir",
    "UpstreamFwd",
    "EgressCtrl",
    "DirectTrans",
)
# The bits that send peer-to-peer traffic up to the root complex instead of across the switch or
# root port: P2P Request Redirect (2), P2P Completion Redirect (3) and P2P Egress Control (5),
# which are what the kernel clears for `pci=disable_acs_redir=` (drivers/pci/pci.c,
# pci_disable_acs_redir). Source Validation and Translation Blocking redirect nothing; Upstream
# Forwarding only forwards what a port below redirected, and with these clear nothing is.
ACS_REDIRECT = 0x0004 | 0x0008 | 0x0020

# Device/Port Type (PCI Express Capabilities, bits 7:4) of the functions that sit inside the root
# complex and have no link: their link registers are reserved, and lspci prints no LnkCap or
# LnkSta for them (ls-caps.c, cap_express).
ROOT_COMPLEX_INTEGRATED_ENDPOINT = 0x9
ROOT_COMPLEX_EVENT_COLLECTOR = 0xA
NO_LINK = {
    ROOT_COMPLEX_INTEGRATED_ENDPOINT: "a root-complex integrated endpoint",
    ROOT_COMPLEX_EVENT_COLLECTOR: "a root-complex event collector",
}

SPEEDS = {1: "2.5GT/s", 2: "5GT/s", 3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}


def gts(speed: str | None) -> float:
    """A link speed as a number to compare (`16GT/s` -> 16.0); 0 when unknown."""
    return float(speed.removesuffix("GT/s")) if speed else 0.0


def u8(data: bytes, offset: int) -> int:
    return data[offset]


def u16(data: bytes, offset: int) -> int:
    return int(struct.unpack_from("<H", data, offset)[0])


def u32(data: bytes, offset: int) -> int:
    return int(struct.unpack_from("<I", data, offset)[0])


def capabilities(config: bytes) -> dict[int, int]:
    """Capability id -> offset, walking the standard list (first occurrence of each id).

    The walk stops at a pointer outside the 256-byte space, a pointer into the header, or a
    repeat: broken or hostile chains must not loop or crash.
    """
    found: dict[int, int] = {}
    if len(config) < HEADER_BYTES or not u16(config, STATUS) & STATUS_CAP_LIST:
        return found
    seen: set[int] = set()
    pointer = u8(config, CAP_POINTER) & 0xFC
    while pointer >= HEADER_BYTES and pointer + 2 <= min(len(config), 256) and pointer not in seen:
        seen.add(pointer)
        found.setdefault(u8(config, pointer), pointer)
        pointer = u8(config, pointer + 1) & 0xFC
    return found


def extended_capabilities(config: bytes) -> dict[int, int]:
    """Extended capability id -> offset, walking the list from 0x100 (first of each id).

    Each header is `id (16 bits) | version (4) | next (12)`; the list ends at a next of 0. A
    header of all zeros or all ones (nothing there) ends it too, and so do a pointer back into
    the conventional space, past what was read, or to an offset already seen: a broken or
    hostile snapshot must not loop or crash. Only PCI Express functions have this space (lspci
    walks it for them alone): a conventional function's bytes there alias the header.
    """
    found: dict[int, int] = {}
    if CAP_ID_EXP not in capabilities(config):
        return found
    seen: set[int] = set()
    pointer = CONVENTIONAL_BYTES
    while pointer >= CONVENTIONAL_BYTES and pointer + 4 <= len(config) and pointer not in seen:
        seen.add(pointer)
        header = u32(config, pointer)
        if header in (0, 0xFFFFFFFF):
            break
        found.setdefault(header & 0xFFFF, pointer)
        pointer = (header >> 20) & 0xFFC
    return found


def extended_readable(config: bytes) -> bool:
    """Whether the read reached the extended space: 4096 bytes for root where the kernel can
    reach it; 256 (no ECAM, or a conventional function) or 64 (not root) say nothing of it."""
    return len(config) > CONVENTIONAL_BYTES


class AcsCapability(NamedTuple):
    """The Access Control Services capability of one port."""

    offset: int
    capability: int
    control: int

    @property
    def redirecting(self) -> int:
        """The redirect bits that are set."""
        return self.control & ACS_REDIRECT


def acs(config: bytes) -> AcsCapability | None:
    """The ACS capability, or None (no such capability, or the extended space was not read)."""
    offset = extended_capabilities(config).get(ECAP_ID_ACS)
    if offset is None or offset + ACS_CONTROL + 2 > len(config):
        return None
    return AcsCapability(
        offset, u16(config, offset + ACS_CAPABILITY), u16(config, offset + ACS_CONTROL)
    )


def acs_redirect_flags(control: int) -> str:
    """The redirect bits of an ACS control word as lspci names them: `ReqRedir+ CmpltRedir+
    EgressCtrl-`."""
    return " ".join(
        f"{ACS_BITS[i]}{'+' if control >> i & 1 else '-'}"
        for i in range(len(ACS_BITS))
        if ACS_REDIRECT >> i & 1
    )


def acs_flags(bits: int) -> str:
    """Bits as lspci prints them: `SrcValid+ TransBlk- ...`."""
    return " ".join(f"{name}{'+' if bits >> i & 1 else '-'}" for i, name in enumerate(ACS_BITS))


def max_read_request(device_control: int) -> int:
    """Max_Read_Request_Size in bytes, from a Device Control word."""
    return 128 << ((device_control & MRRS_MASK) >> MRRS_SHIFT)


def mrrs_field(size: int) -> int:
    if size < 128 or size > 4096 or size & (size - 1):
        raise ValueError(f"Max_Read_Request_Size must be a power of two in 128..4096, not {size}")
    return size.bit_length() - 8


class Express(NamedTuple):
    """The PCI Express capability of one function."""

    offset: int
    flags: int
    device_capabilities: int
    device_control: int
    link_capabilities: int
    link_status: int

    @property
    def port_type(self) -> int:
        return (self.flags >> 4) & 0xF

    @property
    def has_link(self) -> bool:
        return self.port_type not in NO_LINK

    @property
    def max_read_request(self) -> int:
        return max_read_request(self.device_control)

    @property
    def relaxed_ordering(self) -> bool:
        return bool(self.device_control & RELAXED_ORDERING)

    @property
    def max_payload(self) -> int:
        return 128 << ((self.device_control >> 5) & 0x7)

    @property
    def max_payload_supported(self) -> int:
        return 128 << (self.device_capabilities & 0x7)

    @property
    def link_speed_max(self) -> str | None:
        return SPEEDS.get(self.link_capabilities & 0xF)

    @property
    def link_width_max(self) -> int:
        return (self.link_capabilities >> 4) & 0x3F

    @property
    def link_speed(self) -> str | None:
        return SPEEDS.get(self.link_status & 0xF)

    @property
    def link_width(self) -> int:
        return (self.link_status >> 4) & 0x3F


def express(config: bytes) -> Express | None:
    """The PCI Express capability, or None (conventional PCI, or a header-only read)."""
    offset = capabilities(config).get(CAP_ID_EXP)
    if offset is None or offset + LNKSTA + 2 > len(config):
        return None
    return Express(
        offset=offset,
        flags=u16(config, offset + EXP_FLAGS),
        device_capabilities=u32(config, offset + DEVCAP),
        device_control=u16(config, offset + DEVCTL),
        link_capabilities=u32(config, offset + LNKCAP),
        link_status=u16(config, offset + LNKSTA),
    )


def with_max_read_request(config: bytes, size: int) -> bytes:
    """The config bytes after the masked write `setpci CAP_EXP+8.w=V:7000` would make."""
    cap = express(config)
    if cap is None:
        raise ValueError("no PCI Express capability")
    value = (cap.device_control & ~MRRS_MASK) | (mrrs_field(size) << MRRS_SHIFT)
    at = cap.offset + DEVCTL
    return config[:at] + struct.pack("<H", value) + config[at + 2 :]
