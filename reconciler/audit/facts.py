"""What the rules share about a host, parsed once from the observed files with the facts
layer's parsers (`reconciler.facts`): PCI devices, the running command line, loaded modules,
CPU and NUMA layout."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from ..core.changes import HostFacts
from ..core.files import Files, Request
from ..facts import cmdline as cmdline_fmt
from ..facts import cpu, kernel, modules, nvidia_params, services
from ..facts.cpu import CpuInfo
from ..facts.numa import NODES_ONLINE, parse_list
from ..facts.pci import NUMA_NODE, PciDevice, numa_node, pci_devices, request_devices
from ..plan.observe import IDENTITY
from ..steps.persist import OWNED
from .model import Device, HostSummary

NVIDIA_VERSION = modules.MODULE_DIR + "/nvidia/version"

NVIDIA = 0x10DE
MELLANOX = 0x15B3  # Mellanox, now NVIDIA networking: ConnectX and BlueField
GPU_CLASSES = (0x0300, 0x0302)  # VGA-compatible and 3D controllers
NETWORK_CLASS = 0x02
VENDORS = {NVIDIA: "NVIDIA", MELLANOX: "Mellanox", 0x8086: "Intel", 0x14E4: "Broadcom"}

# What every audit reads: the host summary's files, and those of the knob kinds fixes use most
# (PCI devices, the running and configured command line, loaded modules).
READS = (
    IDENTITY
    | request_devices()
    | cmdline_fmt.request()
    | Request.of(NODES_ONLINE, NUMA_NODE, NVIDIA_VERSION, cpu.SCALING_DRIVER, cpu.GOVERNOR)
    # /proc/cpuinfo outgrows the cap on kernel files on a large host (1.4 KiB per CPU), and
    # sockets are counted over all of it.
    | Request.of(whole=[cpu.CPUINFO])
    | Request.of(modules.MODULES, modules.BUILTIN, nvidia_params.VERSION)
    | services.request()  # the daemons that set knobs too, which the kinds' notes name
    | Request.of(*OWNED)  # tune's own boot-time files: a host tune already manages
)


# What GPUDirect RDMA through DMA-BUF needs, as NVIDIA's GPU Operator guide lists it
# ("GPUDirect RDMA and GPUDirect Storage", Common Prerequisites,
# docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-rdma.html): an Open
# Kernel module driver, CUDA 11.7 or higher (its driver branch is R515), Linux 5.12 or higher.
DMABUF_DRIVER = 515
DMABUF_KERNEL = "5.12"
DMABUF_SOURCE = "NVIDIA's GPU Operator guide, GPUDirect RDMA and GPUDirect Storage"


@dataclass(frozen=True)
class DmaBuf:
    """Whether this host's driver and kernel give GPUDirect RDMA through DMA-BUF: what shows
    it, and what it lacks (nothing: it does)."""

    evidence: tuple[str, ...]
    lacking: tuple[str, ...]

    @property
    def available(self) -> bool:
        return not self.lacking


class Facts:
    """One host's observation, parsed lazily and at most once per fact."""

    def __init__(self, identity: HostFacts, files: Files) -> None:
        self.identity = identity
        self.files = files

    @cached_property
    def devices(self) -> list[PciDevice]:
        return pci_devices(self.files)

    @cached_property
    def gpus(self) -> list[PciDevice]:
        return [d for d in self.devices if d.vendor == NVIDIA and d.class_code >> 8 in GPU_CLASSES]

    @cached_property
    def nics(self) -> list[PciDevice]:
        return [d for d in self.devices if d.class_code >> 16 == NETWORK_CLASS]

    @cached_property
    def rdma_nics(self) -> list[PciDevice]:
        return [d for d in self.nics if d.vendor == MELLANOX]

    @cached_property
    def numa_nodes(self) -> tuple[int, ...]:
        return parse_list(self.files.value(NODES_ONLINE))

    @cached_property
    def cpu(self) -> CpuInfo:
        return cpu.cpu_info(self.files.text(cpu.CPUINFO))

    @cached_property
    def running_cmdline(self) -> cmdline_fmt.Parameters:
        return cmdline_fmt.running(self.files)

    @cached_property
    def loaded_modules(self) -> set[str] | None:
        text = self.files.text(modules.MODULES)
        return None if text is None else modules.loaded_modules(text)

    @cached_property
    def nvidia_build(self) -> nvidia_params.Build | None:
        return nvidia_params.build(self.files.text(nvidia_params.VERSION))

    @cached_property
    def arm64(self) -> bool:
        return cpu.arm64(self.files.text(cpu.CPUINFO))

    @cached_property
    def dma_buf(self) -> DmaBuf:
        build, release = self.nvidia_build, self.identity.kernel
        evidence, lacking = [], []
        if build is None:
            lacking.append(f"no NVIDIA driver build is known ({nvidia_params.VERSION})")
        else:
            kind = "open kernel modules" if build.open else "proprietary kernel module"
            evidence.append(f"{nvidia_params.VERSION}: {kind} {build.text}")
            if not build.open:
                lacking.append("the driver is not NVIDIA's open kernel modules")
            if build.version[:1] < (DMABUF_DRIVER,):
                lacking.append(f"driver {build.text} is older than R{DMABUF_DRIVER}")
        if release is None or not kernel.version(release):
            lacking.append("the kernel's version is unknown")
        else:
            evidence.append(f"{kernel.OSRELEASE}: {release}")
            if not kernel.kernel_ok(release, f">={DMABUF_KERNEL}"):
                lacking.append(f"kernel {release} is older than {DMABUF_KERNEL}")
        return DmaBuf(tuple(evidence), tuple(lacking))

    def per_cpu(self, pattern: str) -> dict[str, str]:
        """cpuN -> value of a per-CPU file, in CPU order."""
        return cpu.per_cpu(self.files, pattern)

    def summary(self) -> HostSummary:
        drivers = Counter(self.per_cpu(cpu.SCALING_DRIVER).values())
        governors = Counter(self.per_cpu(cpu.GOVERNOR).values())
        return HostSummary(
            name=self.identity.name,
            source=self.identity.source,
            kernel=self.identity.kernel,
            boot_id=self.identity.boot_id,
            cpu_model=self.cpu.model,
            sockets=self.cpu.sockets,
            cpus=self.cpu.cpus,
            numa_nodes=len(self.numa_nodes) or None,
            cpufreq_driver=",".join(sorted(drivers)) or None,
            governor=",".join(sorted(governors)) or None,
            nvidia_driver=self.files.value(NVIDIA_VERSION),
            tune_files=tuple(p for p in OWNED if self.files.read(p) is not None),
            gpus=tuple(self.device(d) for d in self.gpus),
            nics=tuple(self.device(d) for d in self.nics),
        )

    def device(self, device: PciDevice) -> Device:
        cap = device.express
        link = None
        if cap is not None:
            link = f"{cap.link_speed} x{cap.link_width}"
            if (cap.link_speed, cap.link_width) != (cap.link_speed_max, cap.link_width_max):
                link += f" (capable of {cap.link_speed_max} x{cap.link_width_max})"
        vendor = VENDORS.get(device.vendor, f"vendor {device.vendor:04x}")
        return Device(
            address=device.address,
            name=f"{vendor} {device.vendor:04x}:{device.device:04x}",
            numa_node=numa_node(self.files, device),
            link=link,
            max_read_request=cap.max_read_request if cap else None,
        )
