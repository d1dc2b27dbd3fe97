"""Which CPUs the interrupts of selected PCI devices go to.

```yaml
irq_affinity:
  - select: {vendor: 0x15b3, class: 0x0200}     # as `pci` selects: ConnectX Ethernet
    cpus: local                                 # the CPUs of the device's NUMA node
    priority: P1
    reason: "completions handled on the NIC's own socket"
  - select: {vendor: 0x10de, class: 0x0302}
    cpus: 0-7                                   # or an explicit cpulist
```
Every IRQ of a matched function (its MSI/MSI-X vectors, else its legacy line) gets the list in
`/proc/irq/N/smp_affinity_list`, compared as a set of CPUs. `local` needs the firmware to say
where the device hangs off (`numa_node` -1 is a note, not a guess). A managed IRQ, whose CPUs
its driver chose (NVMe's), refuses the write with EIO: apply skips it and says so, as for any
IRQ the kernel does not let user space move. IRQ affinity does not survive a reboot or a driver
reload (the IRQs are numbered anew when the driver loads), so tune writes no boot-time file for
it: run `tune apply` again after either; `tune check` shows the IRQs that moved. irqbalance,
when it runs, moves them back: the plan says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..apply.steps import Read, Step
from ..errors import HostError
from ..facts import irq
from ..facts.numa import format_list, node_cpus, parse_list
from ..facts.pci import PciDevice, Selector, numa_node, pci_devices, request_devices
from ..hosts.files import Files, Request
from ..plan.model import Change, Note, Outcome, Phase
from .base import Kind, Meta, attribute_step, missing_note, safe_scalar
from .pci import no_match, no_match_note

LOCAL = "local"
CpusSpec = safe_scalar(
    rf"{LOCAL}|[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*",
    "CPU list (local, or a cpulist of numbers and ranges)",
    "local, or 0-23,48-71",
)

NOT_PERSISTED = (
    "IRQ affinity does not survive a reboot or a reload of the driver (its IRQs are numbered "
    "anew): run tune apply again after either; tune check shows IRQs that moved."
)
IRQBALANCE = (
    "irqbalance is active: it moves IRQs to CPUs of its choosing every 10 seconds and will undo "
    "this. Fix: systemctl disable --now irqbalance; or ban these IRQs from it (--banirq=N in "
    "IRQBALANCE_ARGS, /etc/default/irqbalance), which holds only until their numbers change "
    "at the next driver load."
)


@dataclass(frozen=True, kw_only=True)
class IrqEntry(Meta):
    select: Selector
    cpus: CpusSpec  # type: ignore[valid-type]

    def __post_init__(self) -> None:
        if self.cpus != LOCAL and not parse_list(self.cpus):
            raise ValueError(f"cpus {self.cpus!r} has a range that runs backwards")


class IrqAffinity(Kind[list[IrqEntry]]):
    section = "irq_affinity"
    spec_type = list[IrqEntry]
    kind = "irq_affinity"
    phase = Phase.RUNTIME
    reads = (
        "`/sys/bus/pci/devices/*/{msi_irqs/*,irq,numa_node}`, "
        "`/sys/devices/system/node/node*/cpulist`, `/proc/irq/*/smp_affinity_list`"
    )
    compared = (
        "per IRQ, as a set of CPUs (`0-3,8` and `8,0,1,2,3` alike); a managed IRQ the kernel "
        "refuses (EIO) is skipped; not persisted: IRQs are numbered anew at each driver load"
    )
    noun = "IRQs"

    def request(self, spec: list[IrqEntry]) -> Request:
        return request_devices() | irq.request()

    def compare(self, spec: list[IrqEntry], files: Files) -> Outcome:
        outcome = Outcome()
        devices = pci_devices(files)
        online = irq.online_cpus(files)
        nodes = node_cpus(files)
        planned: dict[int, str] = {}  # IRQ -> the device whose entry planned it first
        for item in spec:
            about = f"irq_affinity:{item.select.describe()}"
            matched = [d for d in devices if item.select.matches(d)]
            if not matched:
                target = item.select.describe()
                outcome.changes.append(
                    self._change(target, None, item.cpus, item, subject="", missing=True)
                )
                outcome.notes.append(no_match_note(self.kind, item.select, item))
                continue
            before = len(planned)
            for device in matched:
                desired, why_not = self._cpus(item, device, files, nodes, online)
                if desired is None:
                    outcome.notes.append(Note(why_not, f"irq_affinity:{device.address}"))
                    continue
                self._device(item, device, desired, files, planned, outcome)
            if len(planned) == before:
                continue  # no IRQ of this entry's: nothing to persist or to keep irqbalance off
            outcome.notes.append(Note(NOT_PERSISTED, about))
            if irq.irqbalance_active(files):
                outcome.notes.append(Note(IRQBALANCE, about))
        return outcome

    def _cpus(
        self,
        item: IrqEntry,
        device: PciDevice,
        files: Files,
        nodes: dict[int, frozenset[int]],
        online: frozenset[int] | None,
    ) -> tuple[str | None, str]:
        """The cpulist `device`'s IRQs should get, or None and why there is none."""
        if item.cpus == LOCAL:
            node = numa_node(files, device)
            if node is None:
                return None, (
                    f"{device.address}: the firmware does not say which NUMA node it is attached "
                    "to (numa_node -1), so cpus: local has no CPUs; tune does not guess. Give "
                    "an explicit cpulist for it."
                )
            cpus = nodes.get(node, frozenset())
            if not cpus:
                return None, f"{device.address}: NUMA node {node} lists no CPUs."
        else:
            cpus = frozenset(parse_list(item.cpus))
        if online is not None and not cpus <= online:
            return None, (
                f"{device.address}: CPUs {format_list(cpus - online)} of {item.cpus} are not "
                f"online on this host (online: {format_list(online)}); nothing is written."
            )
        return format_list(cpus), ""

    def _device(
        self,
        item: IrqEntry,
        device: PciDevice,
        desired: str,
        files: Files,
        planned: dict[int, str],
        outcome: Outcome,
    ) -> None:
        address = device.address
        numbers = irq.device_irqs(files, address)
        if not numbers:
            said = _no_irqs(address)
            outcome.changes.append(
                self._change(f"{address}:irqs", None, desired, item, subject="", missing=True)
            )
            outcome.notes.append(Note(missing_note(said, item), f"irq_affinity:{address}"))
            return
        for number in numbers:
            if number in planned:
                # A legacy line shared by two functions, or two entries selecting one device.
                said = (
                    f"IRQ {number} of {address} is also {planned[number]}'s; "
                    "the first entry that selects it sets it."
                )
                outcome.notes.append(Note(said, f"irq_affinity:{address}"))
                continue
            planned[number] = address
            path = irq.affinity_path(number)
            cpus = irq.affinity(files, number)
            current = None if cpus is None else format_list(cpus)
            missing = cpus is None and path not in files.errors
            outcome.changes.append(
                self._change(
                    f"{address}:irq{number}",
                    current,
                    desired,
                    item,
                    subject=f"irq{number}",
                    missing=missing,
                    fix=f"echo {desired} > {path}",
                )
            )
            if cpus is None:
                error = files.errors.get(path)
                what = "does not exist" if error is None else f"cannot be read ({error})"
                said = f"{path} {what} on this host."
                outcome.notes.append(
                    Note(missing_note(said, item) if missing else said, f"irq_affinity:{address}")
                )

    def _change(
        self,
        target: str,
        current: str | None,
        desired: str,
        item: IrqEntry,
        *,
        subject: str,
        missing: bool,
        fix: str = "",
    ) -> Change:
        # Always optional: the kernel refuses a managed IRQ (EIO) and that is this host's
        # driver's choice, not a failed run.
        return self.change(
            target,
            current,
            desired,
            replace(item, optional=True),
            setting=f"IRQs of {item.select.describe()}",
            subject=subject,
            fix=fix,
            missing=missing,
        )

    def step(self, spec: list[IrqEntry], change: Change, files: Files) -> Step:
        subject, _, name = change.target.rpartition(":")
        if not subject:
            raise HostError(f"{change.id} cannot be set: {no_match(change.target)}")
        if not name.removeprefix("irq").isdigit():
            raise HostError(f"{change.id} cannot be set: {_no_irqs(subject)}")
        number = int(name.removeprefix("irq"))
        return attribute_step(change, irq.affinity_path(number), files, Read.WORDS)


def _no_irqs(address: str) -> str:
    return f"{address} has no IRQs (no driver bound, or none requested one)."


KIND = IrqAffinity()
