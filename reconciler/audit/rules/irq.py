"""Audit rules: interrupts: which CPUs serve the network cards' IRQs."""

from __future__ import annotations

from dataclasses import dataclass

from ...facts import irq, irqbalance
from ...facts.numa import format_list, node_cpus
from ...facts.pci import PciDevice, numa_node
from ..facts import Facts
from ..model import Area, Fix, Good, Problem, Verdict
from ..thresholds import Thresholds
from .base import P1, rule


@dataclass(frozen=True)
class Placement:
    """Where one NIC's IRQs may go: its node's CPUs, and each IRQ's smp_affinity_list."""

    nic: PciDevice
    node: int
    local: frozenset[int]
    irqs: dict[int, frozenset[int]]

    @property
    def far(self) -> list[int]:
        """The IRQs that may go to a CPU of another node."""
        return [n for n, cpus in self.irqs.items() if not cpus <= self.local]

    def evidence(self) -> list[str]:
        """The IRQs grouped by what their list reads: 64 vectors on all CPUs are one line."""
        by_list: dict[str, list[int]] = {}
        for number, cpus in self.irqs.items():
            by_list.setdefault(format_list(cpus), []).append(number)
        return [
            f"{self.nic.address} (node {self.node}, CPUs {format_list(self.local)}): "
            f"/proc/irq/N/smp_affinity_list of IRQs {format_list(numbers)}: {cpus}"
            for cpus, numbers in by_list.items()
        ]


def placement(facts: Facts, nodes: dict[int, frozenset[int]], nic: PciDevice) -> Placement | None:
    """Where `nic`'s IRQs may go, `nodes` being each node's CPUs; None when the firmware does
    not say the NIC's node, the node lists no CPUs, or no IRQ of the NIC's can be read."""
    node = numa_node(facts.files, nic)
    local = nodes.get(node) if node is not None else None
    if node is None or not local:
        return None
    read = {n: irq.affinity(facts.files, n) for n in irq.device_irqs(facts.files, nic.address)}
    irqs = {n: cpus for n, cpus in read.items() if cpus is not None}
    return Placement(nic, node, local, irqs) if irqs else None


# Its fix is an irq_affinity entry, whose comparison also reads irqbalance's unit and tune's
# policy script (which it removes when no entry bans any more).
@rule("irq-remote-node", Area.CPU, irq.request() | irqbalance.request())
def irq_remote_node(facts: Facts, limits: Thresholds) -> list[Verdict]:
    nodes = node_cpus(facts.files)
    placed = [p for nic in facts.nics if (p := placement(facts, nodes, nic)) is not None]
    if not placed:
        return []
    far = [p for p in placed if p.far]
    if not far:
        evidence = tuple(line for p in placed for line in p.evidence())
        return [Good(f"IRQs of {len(placed)} NICs on their own NUMA node", evidence)]
    selectors = sorted({(p.nic.vendor, p.nic.class_code >> 8) for p in far})
    return [
        Problem(
            P1,
            ", ".join(
                f"{len(p.far)} of {len(p.irqs)} IRQs of NIC {p.nic.address} (node {p.node}) "
                "may go to CPUs of another node"
                for p in far
            ),
            tuple(line for p in far for line in p.evidence()),
            "an interrupt served on the far socket sends every completion across the "
            "inter-socket link and runs it where none of the NIC's buffers are cached",
            tuple(_local(vendor, cls) for vendor, cls in selectors),
        )
    ]


def _local(vendor: int, cls: int) -> Fix:
    """The profile entry that pins the IRQs of every NIC of this vendor and class locally."""
    select = {"vendor": vendor, "class": cls}
    return Fix("irq_affinity", (), {"cpus": "local"}, item={"select": select})
