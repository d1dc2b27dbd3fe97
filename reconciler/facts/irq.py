"""The interrupts of PCI devices and the CPUs the kernel may deliver them to.

A function's MSI and MSI-X vectors are the file names under its `msi_irqs/` directory (each
holds `msi` or `msix`); a function without them uses its legacy line, the number in its `irq`
file (0: none). `/proc/irq/N/smp_affinity_list` is the CPUs IRQ N may go to, as a cpulist the
kernel prints in ranges (`0-23,48-71`) whatever form was written. irqbalance, when it runs,
rewrites those files every ten seconds.
"""

from __future__ import annotations

import re

from ..core.files import Files, Request
from . import numbers
from .numa import NODE_CPULIST, format_list, parse_list
from .pci import DEVICES, NUMA_NODE
from .services import INVOCATION

AFFINITY = "/proc/irq/*/smp_affinity_list"
MSI_IRQS = DEVICES + "/*/msi_irqs/*"
LEGACY_IRQ = DEVICES + "/*/irq"
CPUS_ONLINE = "/sys/devices/system/cpu/online"
# The CPUs this kernel can ever have (nr_cpu_ids): the bound of every cpumask it parses.
CPUS_POSSIBLE = "/sys/devices/system/cpu/possible"
# irqbalance runs when systemd's unit has a process in its cgroup (cgroup v2), or a link for
# the running unit; both are read as files, nothing is run on the host.
IRQBALANCE_CGROUP = "/sys/fs/cgroup/system.slice/irqbalance.service/cgroup.procs"
IRQBALANCE_UNIT = INVOCATION.format("irqbalance")

_AFFINITY_FILE = re.compile(r"/proc/irq/\d+/smp_affinity(_list)?")
_AFFINITY_LIST = re.compile(r"/proc/irq/\d+/smp_affinity_list")


def affinity_path(irq: int) -> str:
    return f"/proc/irq/{irq}/smp_affinity_list"


def refuses_with_eio(path: str) -> bool:
    """Whether EIO from a write to `path` means the kernel does not let user space move this
    IRQ: write_irq_affinity returns -EIO for a managed IRQ (the driver spread its vectors over
    the CPUs itself, NVMe's and many multiqueue drivers') and for a chip that cannot route it."""
    return _AFFINITY_FILE.fullmatch(path) is not None


def is_affinity_list(path: str) -> bool:
    return _AFFINITY_LIST.fullmatch(path) is not None


def request() -> Request:
    return Request.of(
        AFFINITY,
        MSI_IRQS,
        LEGACY_IRQ,
        NUMA_NODE,
        NODE_CPULIST,
        CPUS_ONLINE,
        IRQBALANCE_CGROUP,
        nodes=[IRQBALANCE_UNIT],
    )


def device_irqs(files: Files, address: str) -> tuple[int, ...]:
    """The IRQs of the function at `address`, in numeric order: its MSI(-X) vectors, else its
    legacy line; () when it has none (no driver bound, or none that asked for one)."""
    vectors = [p.rsplit("/", 1)[1] for p in files.glob(f"{DEVICES}/{address}/msi_irqs/*")]
    found = sorted(n for n in map(numbers.unsigned, vectors) if n is not None)
    if found:
        return tuple(found)
    legacy = numbers.unsigned((files.value(f"{DEVICES}/{address}/irq") or "").strip())
    return (legacy,) if legacy else ()


def affinity(files: Files, irq: int) -> frozenset[int] | None:
    """The CPUs IRQ `irq` may go to; None when the host has no such file or it is unreadable."""
    text = files.value(affinity_path(irq))
    if text is None:
        return None
    cpus = parse_list(text)
    return frozenset(cpus) if cpus else None


def online_cpus(files: Files) -> frozenset[int] | None:
    cpus = parse_list(files.value(CPUS_ONLINE))
    return frozenset(cpus) if cpus else None


def irqbalance_active(files: Files) -> bool:
    procs = files.value(IRQBALANCE_CGROUP)
    return bool(files.node_paths(IRQBALANCE_UNIT)) or bool(procs and procs.strip())


class CpuOutOfRange(ValueError):
    """A cpulist naming a CPU at or past the host's CPU count: the kernel's ERANGE."""


def kernel_cpulist(written: str, cpus: int | None = None) -> str:
    """What `smp_affinity_list` prints after `written` is written to it: bitmap_parselist's
    plain forms (`N`, `A-B`, comma separated, surrounding whitespace ignored) printed back in
    ascending ranges. ValueError (the kernel's EINVAL) for anything else, a range that runs
    backwards or an empty list; CpuOutOfRange (ERANGE) for a CPU at or past `cpus` (the host's
    CPU count)."""
    numbers = parse_list(written)
    if not numbers:
        raise ValueError(written)
    if cpus is not None and max(numbers) >= cpus:
        raise CpuOutOfRange(written)
    return format_list(numbers)
