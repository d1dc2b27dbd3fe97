"""Snapshot hosts with PCI devices, their IRQs and NUMA nodes, laid out as Linux lays them out:
`/sys/bus/pci/devices/ADDR/{vendor,device,class,config,numa_node,irq,msi_irqs/N}`,
`/sys/devices/system/node/nodeN/cpulist`, `/sys/devices/system/cpu/{online,possible}` and
`/proc/irq/N/{smp_affinity,smp_affinity_list,effective_affinity_list,node}`.

The default is the shape of the bundled Blackwell host: two sockets of 32 CPUs with SMT
(node 0: 0-31,64-95; node 1: 32-63,96-127), a ConnectX-7 with 64 MSI-X vectors on node 1, and
a GPU with one MSI vector on node 0; every IRQ starts on all CPUs, as the kernel leaves them.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path

from conftest import write
from small_host import config_space

from reconciler.facts.numa import format_list, parse_list
from reconciler.hosts.emulate import REFUSES

DEBIAN_UNIT = Path(__file__).parent / "corpus/irqbalance/debian-bookworm/irqbalance.service"
NODE_CPUS = {0: "0-31,64-95", 1: "32-63,96-127"}
ALL_CPUS = "0-127"


@dataclass
class IrqDevice:
    address: str
    vendor: int
    device: int
    class_code: int
    node: int
    irqs: list[int]
    msi: bool = True  # the IRQs are MSI(-X) vectors; otherwise `irqs` is the legacy line
    affinity: dict[int, str] = field(default_factory=dict)  # IRQ -> its list, else all CPUs
    managed: frozenset[int] = frozenset()  # IRQs whose affinity the kernel refuses (EIO)


CONNECTX = IrqDevice("0000:c2:00.0", 0x15B3, 0x1021, 0x020000, 1, list(range(120, 184)))
GPU = IrqDevice("0000:01:00.0", 0x10DE, 0x2BB5, 0x030200, 0, [90])


@dataclass
class IrqHost:
    devices: list[IrqDevice] = field(default_factory=lambda: [CONNECTX, GPU])
    nodes: dict[int, str] = field(default_factory=lambda: dict(NODE_CPUS))
    online: str = ALL_CPUS
    irqbalance: bool = False  # running (its unit's cgroup lists a process)
    # Installed, with Debian 12's unit (tests/corpus/irqbalance).
    irqbalance_unit: bool = False


def mask(cpulist: str, cpus: int) -> str:
    """The hex mask `smp_affinity` prints: 32-bit groups, highest first, comma separated."""
    bits = sum(1 << n for n in parse_list(cpulist))
    groups = max(1, (cpus + 31) // 32)
    return ",".join(f"{(bits >> (32 * g)) & 0xFFFFFFFF:08x}" for g in reversed(range(groups)))


def build(root: Path, host: IrqHost) -> Path:
    cpus = max(parse_list(host.online)) + 1
    files: dict[str, str | bytes] = {
        "proc/sys/kernel/hostname": "irq\n",
        "proc/sys/kernel/osrelease": "6.14.8-2-pve\n",
        "proc/sys/kernel/random/boot_id": "0d9b5f7c-1111-2222-3333-444455556666\n",
        "proc/modules": "",
        "sys/devices/system/cpu/online": host.online + "\n",
        "sys/devices/system/cpu/possible": host.online + "\n",
        "sys/devices/system/node/online": format_list(host.nodes) + "\n",
    }
    for node, cpulist in host.nodes.items():
        files[f"sys/devices/system/node/node{node}/cpulist"] = cpulist + "\n"
    for dev in host.devices:
        base = f"sys/bus/pci/devices/{dev.address}"
        files[f"{base}/vendor"] = f"0x{dev.vendor:04x}\n"
        files[f"{base}/device"] = f"0x{dev.device:04x}\n"
        files[f"{base}/class"] = f"0x{dev.class_code:06x}\n"
        files[f"{base}/config"] = config_space(512)
        files[f"{base}/numa_node"] = f"{dev.node}\n"
        files[f"{base}/irq"] = f"{dev.irqs[0] if dev.irqs else 0}\n"
        for number in dev.irqs:
            if dev.msi:
                files[f"{base}/msi_irqs/{number}"] = "msix\n"
            cpulist = dev.affinity.get(number, host.online)
            irq = f"proc/irq/{number}"
            files[f"{irq}/smp_affinity_list"] = cpulist + "\n"
            files[f"{irq}/smp_affinity"] = mask(cpulist, cpus) + "\n"
            files[f"{irq}/effective_affinity_list"] = f"{min(parse_list(cpulist))}\n"
            files[f"{irq}/node"] = f"{dev.node}\n"
            if number in dev.managed:
                files[f"{REFUSES.lstrip('/')}/{irq}/smp_affinity_list"] = f"{errno.EIO}\n"
    if host.irqbalance:
        files["sys/fs/cgroup/system.slice/irqbalance.service/cgroup.procs"] = "1234\n"
    if host.irqbalance_unit:
        files["lib/systemd/system/irqbalance.service"] = DEBIAN_UNIT.read_text()
    for rel, content in files.items():
        write(root, rel, content)
    return root
