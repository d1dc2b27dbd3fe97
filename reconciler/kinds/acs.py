"""PCIe ACS: peer-to-peer redirect off on the bridges above selected devices (opt-in).

```yaml
acs:
  - select: {vendor: 0x10de, class: 0x0302}     # as pci selects
    priority: P1
    reason: "ACS redirect sends GPU peer traffic through the root complex"
    persist: cmdline                             # default udev
```
For every function the selector matches, every bridge above it (root port, switch ports) that
has the Access Control Services capability gets P2P Request Redirect, P2P Completion Redirect
and P2P Egress Control cleared (ACS Control bits 2, 3 and 5, what the kernel's
`pci=disable_acs_redir=` clears), with a masked `setpci ECAP_ACS+6.w=0000:002c` that keeps the
other bits. NCCL's troubleshooting guide: ACS "can interfere with GPU Direct by redirecting all
PCI point-to-point traffic to the CPU root complex, causing a significant performance reduction
or even a hang". A udev rule repeats the write when the bridge is added at boot
(`persist: udev`, the default). `persist: cmdline` makes it a kernel boot argument instead,
planned with the `cmdline` kind's parameters as one reboot-phase change, which holds from
before any driver binds and through every reset: `pci=config_acs=0x00xx@<bridge>;...` on a
kernel from 6.11 on (the observed release), `pci=disable_acs_redir=<bridge>;...` before,
merged into a `pci=` word already on the command line. Bridges are named by their path from
the root bus (`0000:00:01.1/00.0`), which survives bus renumbering when a card is added.

tune refuses to apply it on a host where any function is bound to `vfio-pci`: ACS isolation is
what makes IOMMU groups safe to pass through to a guest.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Literal, NamedTuple

from ..core.changes import Change, Note, Outcome, Phase, Priority
from ..core.errors import HostError
from ..core.files import Files, Request
from ..facts import pcie
from ..facts.cmdline import Edit, Mode
from ..facts.kernel import OSRELEASE, version
from ..facts.pci import (
    DEVICES,
    MAX_DEPTH,
    TREE,
    PciDevice,
    Selector,
    path_id,
    pci_devices,
    request_devices,
    request_tree,
    request_vfio,
    upstream,
    vfio_bound,
)
from ..steps.ops import Probe, Read, Step
from ..steps.persist import UDEV, Persisted
from .base import Kind, Meta, missing_note
from .pci import SETPCI, device_at, no_match_note, setpci_step, setpci_word

REGISTER = f"ECAP_ACS+{pcie.ACS_CONTROL:x}"
CLEARED = pcie.acs_redirect_flags(0)
# pci=config_acs= (Linux 6.11) sets ACS Control bit by bit, bit 0 rightmost: `0` clears, `x`
# keeps. Egress Control (5), Completion (3) and Request Redirect (2) off, as
# disable_acs_redir= does; Source Validation, Translation Blocking, Upstream Forwarding kept.
CONFIG_ACS_SINCE = (6, 11)
CONFIG_ACS_FLAGS = "0x00xx"


@dataclass(frozen=True, kw_only=True)
class AcsEntry(Meta):
    select: Selector
    persist: Literal["udev", "cmdline"] = "udev"


class Bridge(NamedTuple):
    """A bridge above a selected function, with the entry that selected it first."""

    device: PciDevice
    entry: AcsEntry


@dataclass
class BridgesAbove:
    """The bridges above the functions a spec selects, each once, and what tune cannot judge:
    entries that select nothing, functions whose place in the tree was not read."""

    bridges: list[Bridge]
    unmatched: list[AcsEntry]
    unplaced: list[tuple[PciDevice, AcsEntry]]


def bridges_above(spec: list[AcsEntry], files: Files) -> BridgesAbove:
    devices = {d.address: d for d in pci_devices(files)}
    tree = upstream(files)
    found: dict[str, Bridge] = {}
    result = BridgesAbove([], [], [])
    for item in spec:
        matched = [d for d in devices.values() if item.select.matches(d)]
        if not matched:
            result.unmatched.append(item)
        for device in matched:
            chain = tree.get(device.address)
            if chain is None:
                result.unplaced.append((device, item))
                continue
            for address in chain:
                bridge = devices.get(address)
                if bridge is not None and address not in found:
                    found[address] = Bridge(bridge, item)
    result.bridges = sorted(found.values(), key=lambda b: b.device.address)
    return result


class Acs(Kind[list[AcsEntry]]):
    section = "acs"
    spec_type = list[AcsEntry]
    kind = "acs"
    phase = Phase.RUNTIME
    reads = (
        "`/sys/devices/pci*/…` (the bridges above each selected function), "
        "`/sys/bus/pci/devices/*/config`, `/sys/bus/pci/drivers/vfio-pci/*`, "
        "`/sys/kernel/iommu_groups/*/devices/*`; `/proc/sys/kernel/osrelease` for "
        "`persist: cmdline`"
    )
    compared = (
        "ACS Control bits 2, 3 and 5 (P2P Request and Completion Redirect, Egress Control) of "
        "each bridge with ACS, from the extended config space (a 256-byte `config` has none: "
        "a note); a function bound to vfio-pci refuses the apply; `persist: cmdline` puts the "
        "bridges in a `pci=` option of the `cmdline` change (`config_acs=` from kernel 6.11, "
        "`disable_acs_redir=` before), joined to a `pci=` word already configured"
    )
    noun = "bridges"

    def request(self, spec: list[AcsEntry]) -> Request:
        return request_devices() | request_tree() | request_vfio() | Request.of(OSRELEASE)

    def compare(self, spec: list[AcsEntry], files: Files) -> Outcome:
        outcome = Outcome()
        found = bridges_above(spec, files)
        for item in found.unmatched:
            target = item.select.describe()
            outcome.changes.append(self._change(target, None, item, missing=True))
            outcome.notes.append(no_match_note(self.kind, item.select, item))
        for item in spec:
            # One note per entry: a snapshot taken without the tree lacks it for every device.
            unplaced = [d.address for d, entry in found.unplaced if entry is item]
            for address in unplaced:
                outcome.changes.append(self._change(address, None, item, missing=True))
            if unplaced:
                why = (
                    f"{', '.join(unplaced)} {'is' if len(unplaced) == 1 else 'are'} not found "
                    f"under {TREE} within {MAX_DEPTH} levels, so the bridges above "
                    f"{'it are' if len(unplaced) == 1 else 'them are'} not known."
                )
                outcome.notes.append(Note(missing_note(why, item), f"acs:{unplaced[0]}"))
        for bridge in found.bridges:
            device = bridge.device
            unread = device.no_extended()
            acs = device.acs
            if unread is None and acs is None:
                continue  # no ACS capability: nothing on this bridge redirects
            current = None if acs is None else pcie.acs_redirect_flags(acs.control)
            outcome.changes.append(self._change(device.address, current, bridge.entry))
            if unread is not None:
                outcome.notes.append(Note(unread, f"acs:{device.address}"))
        vfio = refusal(files)
        if vfio and any(not c.in_sync for c in outcome.changes):
            outcome.notes.append(Note(vfio, "acs"))
        return outcome

    def _change(
        self, address: str, current: str | None, entry: AcsEntry, missing: bool = False
    ) -> Change:
        return self.change(
            f"{address}:acs_redirect",
            current,
            CLEARED,
            entry,
            setting="acs_redirect",
            subject=address,
            # The address is a directory name of the host's: quoted, as pci quotes it.
            fix=f"setpci -s {shlex.quote(address)} {write(0)}",
            missing=missing,
        )

    def step(self, spec: list[AcsEntry], change: Change, files: Files) -> Step:
        vfio = refusal(files)
        if vfio:
            raise HostError(vfio)
        address = change.target.rsplit(":", 1)[0]
        device = device_at(files, address)
        acs = device.acs
        if acs is None or change.current is None:
            why = device.no_extended() or f"{address} has no ACS capability."
            raise HostError(f"{change.id} cannot be set: {why}")
        prior = acs.control & pcie.ACS_REDIRECT
        at = acs.offset + pcie.ACS_CONTROL
        probe = Probe(f"{DEVICES}/{address}/config", Read.BITS, f"{at}:{pcie.ACS_REDIRECT:04x}")
        readings = ("0000", f"{prior:04x}")
        return setpci_step(
            change, address, REGISTER, pcie.ACS_REDIRECT, (0, prior), probe, readings
        )

    def persist(self, spec: list[AcsEntry], files: Files) -> list[Persisted]:
        return [
            Persisted(
                UDEV,
                f'ACTION=="add|bind", SUBSYSTEM=="pci", KERNEL=="{b.device.address}", '
                f'RUN+="{SETPCI} -s $kernel {write(0)}"',
                knob=f"acs:{b.device.address}:acs_redirect",
            )
            for b in bridges_above(spec, files).bridges
            if b.device.acs is not None and b.entry.persist == "udev"
        ]

    def asks_kernel_options(self, spec: list[AcsEntry]) -> bool:
        return any(item.persist == "cmdline" for item in spec)

    def kernel_options(self, spec: list[AcsEntry], files: Files) -> list[tuple[Edit, Meta]]:
        tree = upstream(files)
        bridges = [
            b
            for b in bridges_above(spec, files).bridges
            if b.device.acs is not None and b.entry.persist == "cmdline"
        ]
        if not bridges:
            return []
        paths = [path_id(b.device.address, tree.get(b.device.address, ())) for b in bridges]
        release = files.value(OSRELEASE)
        if release is not None and version(release) >= CONFIG_ACS_SINCE:
            value = "config_acs=" + ";".join(f"{CONFIG_ACS_FLAGS}@{p}" for p in paths)
        else:
            value = "disable_acs_redir=" + ";".join(paths)
        # One option for every entry: it stands for the most urgent of them.
        entry = min((b.entry for b in bridges), key=lambda e: list(Priority).index(e.priority))
        return [(Edit("pci", Mode.OPTION, (value,)), entry)]


def write(bits: int) -> str:
    """`ECAP_ACS+6.w=0000:002c`: only the redirect bits change in ACS Control."""
    return setpci_word(REGISTER, bits, pcie.ACS_REDIRECT)


def refusal(files: Files) -> str | None:
    """Why ACS must stay as it is on this host, if a function is bound to vfio-pci."""
    bound = vfio_bound(files)
    if not bound:
        return None
    address, group = next(iter(bound.items()))
    where = f" (IOMMU group {group})" if group is not None else ""
    return (
        f"{address} is bound to vfio-pci{where}: ACS isolation is what makes IOMMU groups "
        "safe to pass through to a guest, so tune does not clear ACS redirects on this host."
    )


KIND = Acs()
