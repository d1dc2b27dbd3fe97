"""Audit rules: Modules, IOMMU, kernel version."""

from __future__ import annotations

from ...facts import kernel
from ...facts.cpu import CPUINFO
from ...facts.modules import MODULES
from ...facts.pci import DEVICES
from ..facts import DMABUF_DRIVER, DMABUF_KERNEL, DMABUF_SOURCE, Facts
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
    dma_buf = facts.dma_buf
    if dma_buf.available:
        return [
            NotIssue(
                f"{PEERMEM} not loaded",
                (*evidence, *dma_buf.evidence),
                "GPUDirect RDMA can register GPU memory through DMA-BUF here, which NVIDIA "
                f"recommends over nvidia_peermem ({DMABUF_SOURCE}: NVIDIA's open kernel "
                f"modules, CUDA 11.7 or later (driver R{DMABUF_DRIVER}), Linux "
                f"{DMABUF_KERNEL} or later); NCCL uses it by itself",
            )
        ]
    return [
        Problem(
            P0,
            f"{PEERMEM} not loaded, with an RDMA NIC at {addresses(facts.rdma_nics)}",
            (
                *evidence,
                *(f"{DEVICES}/{n.address}/vendor: 0x15b3" for n in facts.rdma_nics),
                *dma_buf.evidence,
            ),
            "without nvidia_peermem the RDMA NIC cannot read GPU memory directly (GPUDirect "
            "RDMA); NCCL then stages every transfer through host memory. DMA-BUF, which "
            f"NVIDIA recommends instead, is not available: {'; '.join(dma_buf.lacking)}",
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
    observed = (
        f"{translated} of {len(paths)} IOMMU groups translate DMA "
        f"({', '.join(t for t in sorted(types) if t in TRANSLATED)})"
    )
    kept = _iommu_kept(facts)
    if kept is not None:
        return [NotIssue(observed, (*evidence, *kept[0]), kept[1])]
    return [
        Problem(
            P1,
            observed,
            evidence,
            "in translated mode every DMA, including GPU peer-to-peer and NIC traffic, goes "
            "through IOMMU page tables and their IOTLB misses",
            (Fix("cmdline", ("set", "iommu"), "pt"),),
            remedy="iommu=pt is on the command line and the groups still translate: check the "
            "BIOS DMA protection setting and amd_iommu/intel_iommu parameters",
        )
    ]


# x2APIC addresses CPUs with APIC IDs above 255, and the kernel turns x2APIC on only with
# interrupt remapping, which the IOMMU provides (intel_irq_remapping, amd_iommu).
X2APIC_CPUS = 256
# Issue #20: on Grace (arm64) kernels before 6.11, which lack pci=config_acs= to open ACS per
# device, GPUDirect RDMA through DMA-BUF between devices ACS keeps apart relies on the SMMU:
# passthrough is not suggested there.
ARM64_PASSTHROUGH_KERNEL = "6.11"


def _iommu_kept(facts: Facts) -> tuple[tuple[str, ...], str] | None:
    """Why this host's IOMMU mode is left alone (evidence, reason), if it is."""
    if facts.cpu.cpus >= X2APIC_CPUS:
        return (
            (f"{CPUINFO}: {facts.cpu.cpus} CPUs",),
            f"with {X2APIC_CPUS} or more CPUs the IOMMU is what brings the CPUs above 255 up "
            "(x2APIC needs interrupt remapping, which the IOMMU provides), so tune suggests no "
            "change of its mode here: measure DMA translation's cost before changing it",
        )
    release = facts.identity.kernel
    old = release is not None and not kernel.kernel_ok(release, f">={ARM64_PASSTHROUGH_KERNEL}")
    if facts.arm64 and old and facts.dma_buf.available:
        return (
            (f"{CPUINFO}: arm64 (CPU implementer)", *facts.dma_buf.evidence),
            f"on an arm64 (Grace) kernel before {ARM64_PASSTHROUGH_KERNEL}, GPUDirect RDMA "
            "through DMA-BUF between devices that ACS isolates relies on the SMMU translating, "
            "so tune does not suggest passthrough here",
        )
    return None


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
