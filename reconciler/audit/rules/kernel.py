"""Audit rules: Modules, IOMMU, kernel version."""

from __future__ import annotations

from ...facts import kernel
from ...facts.modules import MODULES
from ...facts.pci import DEVICES
from ..facts import Facts
from ..model import Area, Fix, Good, NotIssue, Problem, Verdict
from ..thresholds import Thresholds
from .base import P0, P1, addresses, rule

PEERMEM = "nvidia_peermem"


@rule("peermem-missing", Area.MODULES)
def peermem_missing(facts: Facts, limits: Thresholds) -> list[Verdict]:
    loaded = facts.loaded_modules
    if loaded is None or not facts.gpus:
        return []
    if PEERMEM in loaded:
        return [Good(f"{PEERMEM} loaded", (f"{MODULES}: {PEERMEM}",))]
    evidence = (f"{MODULES}: no nvidia_peermem",)
    if not facts.rdma_nics:
        return [
            NotIssue(
                f"{PEERMEM} not loaded",
                (*evidence, f"{DEVICES}: no Mellanox (15b3) NIC"),
                "without an RDMA NIC there is no peer for GPUDirect RDMA",
            )
        ]
    return [
        Problem(
            P0,
            f"{PEERMEM} not loaded, with an RDMA NIC at {addresses(facts.rdma_nics)}",
            (*evidence, *(f"{DEVICES}/{n.address}/vendor: 0x15b3" for n in facts.rdma_nics)),
            "without nvidia_peermem the RDMA NIC cannot read GPU memory directly (GPUDirect "
            "RDMA); NCCL then stages every transfer through host memory",
            (Fix("modules", (PEERMEM,), "loaded"),),
        )
    ]


TRANSLATED = ("DMA", "DMA-FQ")


@rule("iommu-translated", Area.BOOT, kernel.IOMMU_TYPES)
def iommu_translated(facts: Facts, limits: Thresholds) -> list[Verdict]:
    paths = facts.files.glob(kernel.IOMMU_TYPES)
    types: dict[str, int] = {}
    for path in paths:
        kind = (facts.files.value(path) or "").strip()
        types[kind] = types.get(kind, 0) + 1
    if not types:
        return []
    evidence = tuple(f"{kernel.IOMMU_TYPES}: {t} on {n} groups" for t, n in sorted(types.items()))
    translated = sum(n for t, n in types.items() if t in TRANSLATED)
    if not translated:
        return [Good(f"IOMMU groups in {', '.join(sorted(types))} mode", evidence)]
    return [
        Problem(
            P1,
            f"{translated} of {len(paths)} IOMMU groups translate DMA "
            f"({', '.join(t for t in sorted(types) if t in TRANSLATED)})",
            evidence,
            "in translated mode every DMA, including GPU peer-to-peer and NIC traffic, goes "
            "through IOMMU page tables and their IOTLB misses",
            (Fix("cmdline", ("set", "iommu"), "pt"),),
            remedy="iommu=pt is on the command line and the groups still translate: check the "
            "BIOS DMA protection setting and amd_iommu/intel_iommu parameters",
        )
    ]


@rule("kernel-version", Area.KERNEL)
def kernel_version(facts: Facts, limits: Thresholds) -> list[Verdict]:
    release = facts.identity.kernel
    if release is None or not kernel.version(release):
        return []
    evidence = (f"{kernel.OSRELEASE}: {release}",)
    if kernel.kernel_ok(release, f">={limits.min_kernel}"):
        return [Good(f"kernel {release} (at least {limits.min_kernel})", evidence)]
    return [
        Problem(
            P1,
            f"kernel {release}, older than {limits.min_kernel}",
            evidence,
            "newer kernels carry the scheduler, amd-pstate, IOMMU and PCIe fixes current GPUs "
            "and CPUs need; drivers are validated against them",
            remedy=f"install a kernel {limits.min_kernel} or newer and reboot into it",
        )
    ]
