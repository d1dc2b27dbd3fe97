"""The audit's rules: one function each, registered with its stable id and area.

A rule reads `Facts` (and only the files its registration declares, plus those `facts.READS`
covers), compares with `Thresholds` (thresholds.py), and returns verdicts: a `Problem` with the
profile entries that fix it (or a remedy tune cannot apply), a `Good`, or a `NotIssue`. Rules
never decide whether a fix is already configured: the audit runs each fix through the plan
engine for that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..facts import cpu, kernel, sysctl
from ..facts import lxc as lxc_fmt
from ..facts.cmdline import PROC_CMDLINE
from ..facts.lxc import LXC_CONFIGS, PVE_CONFIGS, device_lines, nvidia_allow_lines
from ..facts.modules import MODULES
from ..facts.numa import NODES_ONLINE
from ..facts.pci import DEVICES, PciDevice
from ..facts.pcie import SPEEDS, gts
from ..hosts.files import Request
from ..kinds.base import normalize_choice
from ..plan.model import Priority
from ..render.folding import ranges
from .facts import NVIDIA, Facts
from .model import Area, Fix, Good, NotIssue, Problem, Verdict
from .thresholds import Thresholds

P0, P1, P2 = Priority.P0, Priority.P1, Priority.P2


Check = Callable[[Facts, Thresholds], Iterable[Verdict]]


@dataclass(frozen=True)
class Rule:
    id: str
    area: Area
    reads: Request
    check: Check


RULES: list[Rule] = []


def rule(rule_id: str, area: Area, *reads: str | Request) -> Callable[[Check], Check]:
    """Register a rule; `reads` are the files (or requests) it needs beyond `facts.READS`."""
    wanted = Request.of(*(r for r in reads if isinstance(r, str)))
    for read in reads:
        if isinstance(read, Request):
            wanted |= read

    def register(check: Check) -> Check:
        RULES.append(Rule(rule_id, area, wanted, check))
        return check

    return register


def count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def cpus(names: Iterable[str]) -> str:
    """`cpu0-63,96-127` for a set of `cpuN` names."""
    return "cpu" + ranges(int(n.removeprefix("cpu")) for n in names)


def addresses(devices: list[PciDevice]) -> str:
    names = [d.address for d in devices]
    return ", ".join(names) if len(names) <= 4 else f"{names[0]} ... {names[-1]}"


def config_of(device: PciDevice) -> str:
    return f"{DEVICES}/{device.address}/config"


# ---------------------------------------------------------------------------------------------
# PCI Express


@rule("pcie-mrrs", Area.PCIE)
def pcie_mrrs(facts: Facts, limits: Thresholds) -> list[Verdict]:
    gpus = [(g, c) for g in facts.gpus if (c := g.express) is not None]
    low = [(g, c) for g, c in gpus if c.max_read_request < limits.min_read_request]
    shown = low or gpus
    evidence = tuple(f"{config_of(g)}: MaxReadReq {c.max_read_request}" for g, c in shown)
    if not gpus:
        return []
    if not low:
        return [Good(f"MaxReadReq {limits.min_read_request} on {len(gpus)} NVIDIA GPUs", evidence)]
    sizes = "/".join(str(s) for s in sorted({c.max_read_request for _, c in low}))
    classes = sorted({g.class_code >> 8 for g, _ in low})
    fixes = tuple(
        Fix(
            "pci",
            (),
            {"max_read_request": limits.min_read_request},
            item={"select": {"vendor": NVIDIA, "class": cls}},
        )
        for cls in classes
    )
    return [
        Problem(
            P0,
            f"MaxReadReq {sizes} bytes on {len(low)} of {len(gpus)} NVIDIA GPUs "
            f"({addresses([g for g, _ in low])})",
            evidence,
            f"a MaxReadReq below {limits.min_read_request} splits every host-to-GPU DMA read "
            "into small requests and caps PCIe throughput (weights, KV cache, pinned copies)",
            fixes,
        )
    ]


@rule("pcie-maxpayload", Area.PCIE)
def pcie_maxpayload(facts: Facts, limits: Thresholds) -> list[Verdict]:
    at_limit = [
        (d, c)
        for d in facts.gpus + facts.rdma_nics
        if (c := d.express) is not None and c.max_payload == c.max_payload_supported
    ]
    out: list[Verdict] = []
    for size in sorted({c.max_payload for _, c in at_limit}):
        devices = [(d, c) for d, c in at_limit if c.max_payload == size]
        out.append(
            NotIssue(
                f"MaxPayload {size} bytes on {len(devices)} GPUs and RDMA NICs "
                f"({addresses([d for d, _ in devices])})",
                tuple(
                    f"{config_of(d)}: DevCtl MaxPayload {c.max_payload}, "
                    f"DevCap MaxPayload {c.max_payload_supported}"
                    for d, c in devices
                ),
                "each device already uses the largest payload it supports (its DevCap limit); "
                "only MaxReadReq is a setting worth changing",
            )
        )
    return out


def _link_devices(facts: Facts) -> list[tuple[PciDevice, str]]:
    return [(g, "GPU") for g in facts.gpus] + [(n, "RDMA NIC") for n in facts.rdma_nics]


@rule("pcie-link-width", Area.PCIE)
def pcie_link_width(facts: Facts, limits: Thresholds) -> list[Verdict]:
    checked = [(d, what, c) for d, what in _link_devices(facts) if (c := d.express) is not None]
    narrow = [(d, what, c) for d, what, c in checked if 0 < c.link_width < c.link_width_max]
    if not checked:
        return []
    if not narrow:
        return [
            Good(
                f"{count(len(checked), 'GPU and RDMA NIC link')} at full width",
                tuple(f"{config_of(d)}: LnkSta x{c.link_width}" for d, _, c in checked),
            )
        ]
    return [
        Problem(
            P0,
            ", ".join(
                f"{what} {d.address} at x{c.link_width} of x{c.link_width_max}"
                for d, what, c in narrow
            ),
            tuple(
                f"{config_of(d)}: LnkSta x{c.link_width}, LnkCap x{c.link_width_max}"
                for d, _, c in narrow
            ),
            "a link trained below its width divides the device's host bandwidth; links do not "
            "narrow to save power, so this is the slot, riser, cable or card",
            remedy="reseat the card, check the slot, riser and BIOS PCIe lane settings",
        )
    ]


@rule("pcie-link-speed", Area.PCIE)
def pcie_link_speed(facts: Facts, limits: Thresholds) -> list[Verdict]:
    """GPUs retrain to the lowest speed when idle and back under load: a GPU at the lowest
    speed is power saving. A GPU at a speed between, or a NIC below its maximum, is not."""
    lowest = SPEEDS[1]
    slow, idle, full = [], [], []
    links = _link_devices(facts)
    for device, what in links:
        cap = device.express
        if cap is None or not cap.link_speed:
            continue
        if gts(cap.link_speed) >= gts(cap.link_speed_max):
            full.append((device, cap))
        elif what == "GPU" and cap.link_speed == lowest:
            idle.append((device, cap))
        else:
            slow.append((device, what, cap))
    out: list[Verdict] = []
    if idle:
        out.append(
            NotIssue(
                f"{len(idle)} NVIDIA GPUs at {lowest} now, capable of "
                + "/".join(sorted({str(c.link_speed_max) for _, c in idle})),
                tuple(
                    f"{config_of(d)}: LnkSta {c.link_speed} x{c.link_width}, "
                    f"LnkCap {c.link_speed_max} x{c.link_width_max}"
                    for d, c in idle
                ),
                "idle GPUs drop their link to the lowest speed to save power and retrain to full "
                "speed under load (nvidia-smi -q -d PCIE shows the maximum reached)",
            )
        )
    if full:
        out.append(
            Good(
                f"{len(full)} of {count(len(links), 'GPU and RDMA NIC link')} at full speed",
                tuple(f"{config_of(d)}: LnkSta {c.link_speed}" for d, c in full),
            )
        )
    if slow:
        nic = any(what != "GPU" for _, what, _ in slow)
        out.append(
            Problem(
                P1 if nic else P2,
                ", ".join(
                    f"{what} {d.address} at {c.link_speed} of {c.link_speed_max}"
                    for d, what, c in slow
                ),
                tuple(
                    f"{config_of(d)}: LnkSta {c.link_speed}, LnkCap {c.link_speed_max}"
                    for d, _, c in slow
                ),
                "a link below its speed, and not idle at the lowest speed, divides the device's "
                "host bandwidth",
                remedy="check the speed under load (nvidia-smi -q -d PCIE); if it stays low, "
                "check the slot, riser and the BIOS PCIe speed setting",
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Kernel parameters under /proc/sys


def _sysctl(facts: Facts, key: str) -> tuple[str, str | None]:
    path = sysctl.path_of(key)
    value = facts.files.value(path)
    return path, None if value is None else " ".join(value.split())


NUMA_BALANCING = "kernel.numa_balancing"


@rule("numa-balancing", Area.MEMORY, sysctl.path_of(NUMA_BALANCING))
def numa_balancing(facts: Facts, limits: Thresholds) -> list[Verdict]:
    path, value = _sysctl(facts, NUMA_BALANCING)
    if value is None:
        return []
    nodes = len(facts.numa_nodes)
    evidence = (f"{path}: {value}", f"{NODES_ONLINE}: {facts.files.value(NODES_ONLINE)}")
    if value == "0":
        return [Good(f"{NUMA_BALANCING} = 0", evidence[:1])]
    if nodes <= 1:
        return [
            NotIssue(
                f"{NUMA_BALANCING} = {value} on a single NUMA node",
                evidence,
                "with one node there is nowhere to migrate pages to",
            )
        ]
    return [
        Problem(
            P0,
            f"{NUMA_BALANCING} = {value} on a host with {nodes} NUMA nodes",
            evidence,
            "automatic NUMA balancing unmaps and migrates pages under the serving process, "
            "stalling the CPU threads that feed the GPUs and moving pinned buffers away from them",
            (Fix("sysctl", (NUMA_BALANCING,), 0),),
        )
    ]


def sysctl_above(
    rule_id: str,
    area: Area,
    key: str,
    limit: Callable[[Thresholds], int],
    priority: Priority,
    reason: str,
) -> None:
    """A rule for an integer sysctl that should be at most `limit` (which the fix writes)."""

    def check(facts: Facts, limits: Thresholds) -> list[Verdict]:
        path, value = _sysctl(facts, key)
        if value is None or not value.lstrip("-").isdigit():
            return []
        allowed = limit(limits)
        if int(value) <= allowed:
            return [Good(f"{key} = {value}", (f"{path}: {value}",))]
        return [
            Problem(
                priority,
                f"{key} = {value}" + (f" (above {allowed})" if allowed else ""),
                (f"{path}: {value}",),
                reason,
                (Fix("sysctl", (key,), allowed),),
            )
        ]

    rule(rule_id, area, sysctl.path_of(key))(check)


sysctl_above(
    "swappiness",
    Area.MEMORY,
    "vm.swappiness",
    lambda t: t.max_swappiness,
    P1,
    "model weights, pinned buffers and KV-cache staging must stay in RAM; swapping them out "
    "costs seconds on the next request",
)
sysctl_above(
    "nmi-watchdog",
    Area.KERNEL,
    "kernel.nmi_watchdog",
    lambda t: 0,
    P2,
    "the NMI watchdog holds a perf counter on every CPU and interrupts each core periodically",
)
sysctl_above(
    "sched-autogroup",
    Area.KERNEL,
    "kernel.sched_autogroup_enabled",
    lambda t: 0,
    P2,
    "autogroup is for desktop sessions; on a server it skews CPU shares between worker "
    "processes started from different sessions",
)


def socket_buffer(rule_id: str, key: str, triple: bool) -> None:
    """A rule for a socket buffer limit: a byte count, or the max of a `min default max`
    triple (tcp_rmem, tcp_wmem)."""

    def check(facts: Facts, limits: Thresholds) -> list[Verdict]:
        path, value = _sysctl(facts, key)
        words = (value or "").split()
        if not words or not all(w.isdigit() for w in words) or len(words) != (3 if triple else 1):
            return []
        evidence = (f"{path}: {value}",)
        if int(words[-1]) >= limits.min_socket_buffer:
            return [Good(f"{key} = {value}", evidence)]
        fixed: int | str = limits.socket_buffer
        if triple:
            fixed = f"{words[0]} {words[1]} {limits.socket_buffer}"
        size = f"{int(words[-1]) // 1024} KiB"
        return [
            Problem(
                P1,
                f"{key} = {value}: at most {size} per socket",
                evidence,
                f"multi-node NCCL, KV-cache transfer and model downloads need socket buffers "
                f"of the link's bandwidth-delay product; {size} caps a single stream far "
                "below a 100-400 Gb/s NIC",
                (Fix("sysctl", (key,), fixed),),
            )
        ]

    rule(rule_id, Area.KERNEL, sysctl.path_of(key))(check)


socket_buffer("net-rmem-max", "net.core.rmem_max", triple=False)
socket_buffer("net-wmem-max", "net.core.wmem_max", triple=False)
socket_buffer("tcp-rmem", "net.ipv4.tcp_rmem", triple=True)
socket_buffer("tcp-wmem", "net.ipv4.tcp_wmem", triple=True)


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


@rule("thp-always", Area.MEMORY, THP_ENABLED)
def thp_always(facts: Facts, limits: Thresholds) -> list[Verdict]:
    raw = facts.files.value(THP_ENABLED)
    mode = normalize_choice(raw)
    if mode is None:
        return []
    evidence = (f"{THP_ENABLED}: {raw}",)
    if mode != "always":
        return [Good(f"transparent hugepages {mode}", evidence)]
    return [
        Problem(
            P1,
            "transparent hugepages always",
            evidence,
            "THP always makes page faults in the serving process compact memory, with stalls of "
            "milliseconds; madvise keeps huge pages for CUDA and PyTorch, which ask for them",
            (Fix("sysfs", (THP_ENABLED,), "madvise"),),
        )
    ]


# ---------------------------------------------------------------------------------------------
# CPU: idle states, frequency driver and governor

IDLE_LIMITS = ("processor.max_cstate", "intel_idle.max_cstate", "idle")


@rule("cstates-deep", Area.CPU, cpu.STATE_NAME, cpu.STATE_DISABLE, cpu.STATE_LATENCY)
def cstates_deep(facts: Facts, limits: Thresholds) -> list[Verdict]:
    running = facts.running_cmdline
    limit = [f"{k}={running[k]}" if running[k] else k for k in IDLE_LIMITS if k in running]
    files = facts.files
    enabled: dict[tuple[str, str, int], list[str]] = {}  # (name, stateN, latency) -> CPUs
    for cpu_name, states in cpu.idle_states(files).items():
        for name, directory in states.items():
            latency = (files.value(directory + "/latency") or "").strip()
            flag = (files.value(directory + "/disable") or "").strip()
            if latency.isdigit() and int(latency) > limits.deep_cstate_latency_us and flag == "0":
                key = (name, directory.rsplit("/", 1)[1], int(latency))
                enabled.setdefault(key, []).append(cpu_name)
    if limit:
        return [
            Good(
                f"idle states limited on the command line ({' '.join(limit)})",
                (f"{PROC_CMDLINE}: {files.value(PROC_CMDLINE)}",),
            )
        ]
    if not enabled:
        return [
            Good(
                f"no idle state with exit latency above {limits.deep_cstate_latency_us} us "
                "is enabled",
                (f"{cpu.STATE_LATENCY}, {cpu.STATE_DISABLE}",),
            )
        ]
    evidence = (
        *(
            f"{cpu.CPUS}/cpu*/cpuidle/{state}/{{name,latency,disable}}: {name}, {latency}, 0 "
            f"on {cpus(names)}"
            for (name, state, latency), names in sorted(enabled.items())
        ),
        f"{PROC_CMDLINE}: {files.value(PROC_CMDLINE)}",
    )
    names = sorted({name for name, _, _ in enabled})
    return [
        Problem(
            P0,
            "; ".join(
                f"{name} (exit latency {latency} us) enabled on {count(len(c), 'CPU')}"
                for (name, _, latency), c in sorted(enabled.items())
            )
            + "; no processor.max_cstate or idle= on the command line",
            evidence,
            "waking from a deep idle state takes hundreds of microseconds; the CPU threads that "
            "launch kernels and move tokens pay it between every step",
            (Fix("cpu", ("idle_states",), {"disable": names}),),
        )
    ]


PSTATE_DRIVERS = {
    # CPU flag -> (kernel parameter, value, what to enable in the BIOS if it is ignored)
    "cppc": ("amd_pstate", "active", "CPPC (AMD CBS > NBIO > SMU > CPPC)"),
    "hwp": ("intel_pstate", "active", "HWP (Intel Speed Shift)"),
}


@rule("cpufreq-driver", Area.CPU, cpu.SCALING_DRIVER, cpu.CPUINFO)
def cpufreq_driver(facts: Facts, limits: Thresholds) -> list[Verdict]:
    drivers = facts.per_cpu(cpu.SCALING_DRIVER)
    if not drivers:
        return []
    found = sorted(set(drivers.values()))
    evidence = (f"{cpu.SCALING_DRIVER}: {', '.join(found)} on {cpus(drivers)}",)
    if "acpi-cpufreq" not in found:
        return [Good(f"cpufreq driver {', '.join(found)}", evidence)]
    flag = next((f for f in PSTATE_DRIVERS if f in facts.cpu.flags), None)
    if flag is None:
        return [
            NotIssue(
                "cpufreq driver acpi-cpufreq",
                (*evidence, f"{cpu.CPUINFO}: flags without cppc or hwp"),
                "the CPU has neither CPPC nor HWP, so acpi-cpufreq is the only driver it can use",
            )
        ]
    param, value, bios = PSTATE_DRIVERS[flag]
    return [
        Problem(
            P1,
            f"cpufreq driver acpi-cpufreq on a CPU with {flag} ({facts.cpu.model})",
            (*evidence, f"{cpu.CPUINFO}: flags include {flag}"),
            f"acpi-cpufreq only knows the few P-states the ACPI tables list; {param} drives "
            "the CPU's own performance control with finer steps and faster ramps",
            (Fix("cmdline", ("set", param), value),),
            remedy=f"{param}={value} is on the command line and ignored: enable {bios} in the BIOS",
        )
    ]


@rule("cpufreq-governor", Area.CPU, cpu.GOVERNOR)
def cpufreq_governor(facts: Facts, limits: Thresholds) -> list[Verdict]:
    governors = facts.per_cpu(cpu.GOVERNOR)
    if not governors:
        return []
    others: dict[str, list[str]] = {}
    for cpu_name, governor in governors.items():
        if governor != "performance":
            others.setdefault(governor, []).append(cpu_name)
    if not others:
        return [
            Good(
                f"governor performance on {count(len(governors), 'CPU')}",
                (f"{cpu.GOVERNOR}: performance on {cpus(governors)}",),
            )
        ]
    return [
        Problem(
            P1,
            "; ".join(f"governor {g} on {count(len(c), 'CPU')}" for g, c in sorted(others.items())),
            tuple(f"{cpu.GOVERNOR}: {g} on {cpus(c)}" for g, c in sorted(others.items())),
            "demand-based governors raise the frequency after the load arrives; kernel launches "
            "and tokenizer threads run in the ramp",
            (Fix("cpu", ("governor",), "performance"),),
        )
    ]


# ---------------------------------------------------------------------------------------------
# Modules, IOMMU, kernel version

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


# ---------------------------------------------------------------------------------------------
# LXC containers that mount NVIDIA devices


@dataclass(frozen=True)
class ContainerConfig:
    identity: dict[str, str]  # {"container": "101"} or {"path": "/var/lib/lxc/x/config"}
    name: str
    config: str
    text: str


def gpu_containers(facts: Facts) -> list[ContainerConfig]:
    found = []
    for pattern in (PVE_CONFIGS, LXC_CONFIGS):
        for path in facts.files.glob(pattern):
            text = facts.files.text(path)
            if text is None or not lxc_fmt.mounts_nvidia(text):
                continue
            if pattern == PVE_CONFIGS:
                name = path.rsplit("/", 1)[1].removesuffix(".conf")
                found.append(ContainerConfig({"container": name}, name, path, text))
            else:
                found.append(ContainerConfig({"path": path}, path.split("/")[-2], path, text))
    return found


@rule("lxc-memlock", Area.CONTAINER, PVE_CONFIGS, LXC_CONFIGS, lxc_fmt.PROC_DEVICES)
def lxc_memlock(facts: Facts, limits: Thresholds) -> list[Verdict]:
    limited: list[tuple[ContainerConfig, str | None, str]] = []
    fine: list[tuple[ContainerConfig, str | None, str]] = []
    for container in gpu_containers(facts):
        value = lxc_fmt.last(container.text, lxc_fmt.MEMLOCK)
        shown = f"{container.config}: " + (
            f"{lxc_fmt.MEMLOCK}: {value}" if value else f"no {lxc_fmt.MEMLOCK}"
        )
        unlimited = value is not None and all(p == "unlimited" for p in value.split(":"))
        (fine if unlimited else limited).append((container, value, shown))
    out: list[Verdict] = []
    if fine:
        out.append(
            Good(
                f"{lxc_fmt.MEMLOCK} unlimited in {', '.join(c.name for c, _, _ in fine)}",
                tuple(s for _, _, s in fine),
            )
        )
    if limited:
        out.append(
            Problem(
                P0,
                "; ".join(
                    f"container {c.name} mounts NVIDIA devices "
                    + (f"with memlock {v}" if v else "without a memlock limit (default 8 MiB)")
                    for c, v, _ in limited
                ),
                tuple(s for _, _, s in limited),
                "CUDA pinned memory, NCCL and RDMA register host memory with mlock; the default "
                "limit makes them fail or fall back to pageable copies",
                tuple(
                    Fix("lxc", ("memlock",), "unlimited", item=c.identity) for c, _, _ in limited
                ),
            )
        )
    return out


ALLOW_ALL = ("a", "a *:* rwm", "c *:* rwm")


@dataclass(frozen=True)
class Stale:
    """What a GPU container's config lacks or has too much of, against the host."""

    container: ContainerConfig
    gone: list[int]  # allowed majors no device has
    missing: list[tuple[int, str]]  # NVIDIA majors (and their driver) not allowed
    unmounted: list[str]  # /dev/nvidia* nodes not mounted
    vanished: list[str]  # mounted /dev/nvidia* nodes that do not exist
    reworded: bool  # NVIDIA mount entries in another form than tune writes

    @property
    def message(self) -> str:
        parts = []
        if self.gone:
            parts.append(f"allows major {', '.join(map(str, self.gone))}, which no device has")
        if self.missing:
            parts.append(f"lacks {', '.join(f'{m} ({name})' for m, name in self.missing)}")
        if self.unmounted:
            parts.append(f"does not mount {', '.join(self.unmounted)}")
        if self.vanished:
            parts.append(f"mounts {', '.join(self.vanished)}, which does not exist")
        if self.reworded and not (self.unmounted or self.vanished):
            parts.append("mounts NVIDIA nodes with other options than bind,optional,create")
        return f"container {self.container.name} " + ", and ".join(parts)


def _stale(container: ContainerConfig, devices: str, nodes: tuple[str, ...]) -> Stale | None:
    """None when the container allows every NVIDIA major and mounts every NVIDIA node."""
    nvidia = lxc_fmt.nvidia_majors(devices)
    lines = device_lines(container.text, devices, nodes)
    current, wanted = lines[lxc_fmt.ALLOW]
    allows = [i.value.strip() for i in lxc_fmt.items(container.text) if i.key == lxc_fmt.ALLOW]
    allowed = current == wanted or any(a in ALLOW_ALL for a in allows)
    mounted, to_mount = lines.get(lxc_fmt.MOUNT, ([], []))
    if allowed and mounted == to_mount:
        return None
    majors = [] if allowed else [lxc_fmt.rule_major(line) or 0 for line in current]
    now = [lxc_fmt.mount_source(line) for line in mounted]
    want = [lxc_fmt.mount_source(line) for line in to_mount]
    return Stale(
        container,
        gone=[m for m in majors if m not in nvidia],
        missing=[] if allowed else [(m, n) for m, n in sorted(nvidia.items()) if m not in majors],
        unmounted=[n for n in want if n not in now],
        vanished=[n for n in now if n not in want],
        reworded=mounted != to_mount,
    )


@rule(
    "lxc-stale-majors",
    Area.CONTAINER,
    PVE_CONFIGS,
    LXC_CONFIGS,
    lxc_fmt.PROC_DEVICES,
    Request.of(nodes=[lxc_fmt.NVIDIA_NODES]),
)
def lxc_stale_majors(facts: Facts, limits: Thresholds) -> list[Verdict]:
    devices = facts.files.text(lxc_fmt.PROC_DEVICES) or ""
    nvidia = lxc_fmt.nvidia_majors(devices)
    if not nvidia:
        return []
    nodes = facts.files.node_paths(lxc_fmt.NVIDIA_NODES)
    majors = ", ".join(f"{m} {n}" for m, n in sorted(nvidia.items()))
    stale: list[Stale] = []
    fine: list[ContainerConfig] = []
    for container in gpu_containers(facts):
        found = _stale(container, devices, nodes)
        if found is None:
            fine.append(container)
        else:
            stale.append(found)
    out: list[Verdict] = []
    if fine:
        out.append(
            Good(
                f"NVIDIA device majors allowed in {', '.join(c.name for c in fine)}",
                (f"{lxc_fmt.PROC_DEVICES}: {majors}", *(c.config for c in fine)),
            )
        )
    if stale:
        out.append(
            Problem(
                P0,
                "; ".join(s.message for s in stale),
                (
                    f"{lxc_fmt.PROC_DEVICES}: {majors}",
                    f"{lxc_fmt.NVIDIA_NODES}: {' '.join(nodes) or 'none'}",
                    *(
                        f"{s.container.config}: {lxc_fmt.ALLOW} "
                        + ", ".join(nvidia_allow_lines(s.container.text, devices))
                        for s in stale
                    ),
                ),
                "a kernel or driver upgrade moves the dynamic NVIDIA majors (nvidia-uvm, "
                "nvidia-caps) and can add or remove nodes; the container's cgroup then denies "
                "them, or the node is not there, and CUDA fails inside",
                tuple(
                    Fix("lxc", ("nvidia_devices",), True, item=s.container.identity) for s in stale
                ),
            )
        )
    return out
