#!/usr/bin/env python3
"""Generate the example host snapshots under examples/hosts/.

The machine is ``gpu-node-07``, a Proxmox VE host that serves SGLang from LXC
container 101:

* 8x NVIDIA RTX PRO 6000 Blackwell Server Edition (10de:2bb5, class 030200),
  four per socket: 0000:{01,21,41,61}:00.0 on NUMA node 0 and
  0000:{81,a1,c1,e1}:00.0 on NUMA node 1.
* 2x AMD EPYC 9335 (32 cores each, SMT on): 128 logical CPUs, cpu0..cpu127,
  node 0 = 0-31,64-95 and node 1 = 32-63,96-127.
* 1x Mellanox ConnectX-7 (15b3:1021) at 0000:c2:00.0, which a GPU selector
  must not match (the profile tunes it with a selector of its own); its 64 MSI-X
  vectors (IRQs 120-183) go to every CPU on the untuned snapshot and to node 1's
  CPUs on the tuned one.
* 2x AMD root complexes (1022:14a4) at 0000:00:00.0 and 0000:80:00.0, which
  have no capability list.
* One root port (1022:14ab, GPP bridge) above each GPU, 0000:X0:01.1 on the GPU's
  root bus, and one above the ConnectX, 0000:c0:01.2: each function lies in
  ``/sys/devices/pci0000:XX/`` below its root port, as sysfs lays it out, and
  ``/sys/bus/pci/devices/`` links to it. A root port's configuration space is a
  real one's: pciutils' dump of a Xeon E5 v3 root port (``cap-aer-root``,
  ``tests/corpus/pciutils``), with this host's ids and bus numbers, and ACS
  Control as Linux leaves it with the IOMMU on (P2P redirects on) untuned and
  with the redirects off tuned.

Two snapshots of that host are written, each laid out like the host's ``/``
(paths are relative, no leading slash):

* ``rtx6000bw-untuned/``: kernel 6.8.12-9-pve with distribution defaults, and
  a container config whose NVIDIA device majors went stale after a driver
  update (nvidia-uvm moved from major 511 to 509).
* ``rtx6000bw-tuned/``: kernel 6.14.8-2-pve after ``tune`` applied its
  profile (sysctls, kernel command line, cpufreq/cpuidle, THP, IOMMU
  passthrough, PCIe Max_Read_Request_Size 4096 on the GPUs and the NIC, nvidia_peermem,
  and a container config that matches the current majors).

Files use the formats the kernel prints: a value file ends with a newline,
multi-value sysctls are TAB separated, and each PCI device's ``config`` is
its binary configuration space (4096 bytes, as root reads it).

The script uses the standard library and the reader of pciutils' dumps in
``tests/test_pciutils_corpus.py``, is deterministic and idempotent:
it deletes and recreates both output directories.  Run it as
``python3 examples/hosts/generate.py``.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import struct
import sys
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOSTNAME = "gpu-node-07"
N_CPUS = 128
NODE_CPULISTS = {0: "0-31,64-95", 1: "32-63,96-127"}
NVIDIA_DRIVER_VERSION = "575.57.08"

# --------------------------------------------------------------------------
# Host specifications: everything that differs between the two snapshots.
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class CState:
    """One cpuidle state as exposed under cpuN/cpuidle/stateK/."""

    name: str
    desc: str
    latency: int


POLL = CState("POLL", "CPUIDLE CORE POLL IDLE", 0)
C1 = CState("C1", "ACPI FFH MWAIT 0x0", 1)
C2 = CState("C2", "ACPI IOPORT 0x814", 400)


@dataclass(frozen=True)
class HostSpec:
    """The values that differ between the untuned and the tuned snapshot."""

    name: str
    osrelease: str
    cmdline: str
    grub_cmdline_linux_default: str
    grub_dropin: str | None
    sysctls: Mapping[str, object]
    thp_enabled: str
    scaling_driver: str
    scaling_governor: str
    available_governors: str
    cstates: tuple[CState, ...]
    iommu_type: str
    peermem_loaded: bool
    nvidia_majors: Mapping[int, str]
    container_allow_majors: tuple[int, ...]
    container_memlock: bool
    container_mounts_modeset: bool
    gpu_mrrs: int
    nic_mrrs: int  # the ConnectX's Max_Read_Request_Size
    acs_control: int  # ACS Control of the root ports
    # /proc/irq/N/smp_affinity_list of the ConnectX's MSI-X vectors.
    nic_irq_affinity: str = f"0-{N_CPUS - 1}"
    # Boot-time files `tune apply` owns (sysctl.d, modules-load.d, tmpfiles.d, udev rules).
    tune_files: tuple[tuple[str, str], ...] = ()
    gpu_persistence: str = "Disabled"  # as nvidia-smi prints persistence_mode


# The GPUs' buses: one per root bus X0, below the root port X0:01.1.
GPU_BUSES = ("01", "21", "41", "61", "81", "a1", "c1", "e1")
NIC_BDF = "0000:c2:00.0"


def root_port(bdf: str) -> str:
    """The root port above a GPU or the NIC: 01.1 (GPU) or 01.2 (NIC) of its root bus."""
    return f"0000:{bdf[5]}0:01.{1 if bdf != NIC_BDF else 2}"


def acs_rule(port: str) -> str:
    return (
        f'ACTION=="add|bind", SUBSYSTEM=="pci", KERNEL=="{port}", '
        'RUN+="/usr/bin/setpci -s $kernel ECAP_ACS+6.w=0000:002c"\n'
    )


TUNE_HEADER = (
    "# Written by tune for profile blackwell-8x. tune owns this file: edits are overwritten.\n"
)

UNTUNED = HostSpec(
    name="rtx6000bw-untuned",
    osrelease="6.8.12-9-pve",
    cmdline="BOOT_IMAGE=/boot/vmlinuz-6.8.12-9-pve root=/dev/mapper/pve-root ro quiet",
    grub_cmdline_linux_default="quiet",
    grub_dropin=None,
    sysctls={
        "kernel/numa_balancing": 1,
        "vm/swappiness": 60,
        "kernel/nmi_watchdog": 1,
        "kernel/sched_autogroup_enabled": 1,
        "net/core/rmem_max": 212992,
        "net/core/wmem_max": 212992,
        "net/core/rmem_default": 212992,
        "net/core/wmem_default": 212992,
        "net/core/netdev_max_backlog": 1000,
        "net/ipv4/tcp_rmem": (4096, 131072, 6291456),
        "net/ipv4/tcp_wmem": (4096, 16384, 4194304),
        "vm/dirty_ratio": 20,
        "vm/dirty_background_ratio": 10,
    },
    thp_enabled="always",
    scaling_driver="acpi-cpufreq",
    scaling_governor="schedutil",
    available_governors="conservative ondemand userspace powersave performance schedutil",
    cstates=(POLL, C1, C2),
    iommu_type="DMA-FQ",
    peermem_loaded=False,
    nvidia_majors={195: "nvidia-frontend", 509: "nvidia-uvm", 510: "nvidia-caps"},
    # 511 is the old nvidia-uvm major (stale); the current 509 is missing.
    container_allow_majors=(195, 226, 510, 511),
    container_memlock=False,
    container_mounts_modeset=False,
    gpu_mrrs=512,
    nic_mrrs=512,
    # What pci_std_enable_acs sets with the IOMMU on: Source Validation, Request and
    # Completion Redirect, Upstream Forwarding.
    acs_control=0x001D,
)

TUNED = HostSpec(
    name="rtx6000bw-tuned",
    osrelease="6.14.8-2-pve",
    cmdline=(
        "BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=/dev/mapper/pve-root ro quiet"
        " iommu=pt amd_pstate=active processor.max_cstate=1"
    ),
    grub_cmdline_linux_default="quiet iommu=pt",
    grub_dropin=(
        "# Managed by tune; do not edit.\n"
        'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT'
        ' amd_pstate=active processor.max_cstate=1"\n'
    ),
    sysctls={
        "kernel/numa_balancing": 0,
        "vm/swappiness": 10,
        "kernel/nmi_watchdog": 0,
        "kernel/sched_autogroup_enabled": 0,
        "net/core/rmem_max": 268435456,
        "net/core/wmem_max": 268435456,
        "net/core/rmem_default": 212992,
        "net/core/wmem_default": 212992,
        "net/core/netdev_max_backlog": 250000,
        "net/ipv4/tcp_rmem": (4096, 87380, 268435456),
        "net/ipv4/tcp_wmem": (4096, 65536, 268435456),
        "vm/dirty_ratio": 10,
        "vm/dirty_background_ratio": 5,
    },
    thp_enabled="madvise",
    scaling_driver="amd-pstate-epp",
    scaling_governor="performance",
    available_governors="performance powersave",
    # processor.max_cstate=1: C2 is not exposed.
    cstates=(POLL, C1),
    iommu_type="identity",
    peermem_loaded=True,
    nvidia_majors={195: "nvidia-frontend", 508: "nvidia-caps", 511: "nvidia-uvm"},
    container_allow_majors=(195, 226, 508, 511),
    container_memlock=True,
    container_mounts_modeset=True,
    gpu_mrrs=4096,
    gpu_persistence="Enabled",
    nic_irq_affinity=NODE_CPULISTS[1],
    nic_mrrs=4096,
    acs_control=0x0011,  # the redirects off (ACS Control bits 2, 3, 5)
    tune_files=(
        (
            "etc/sysctl.d/90-tune.conf",
            TUNE_HEADER + "kernel.numa_balancing = 0\n"
            "vm.swappiness = 10\n"
            "kernel.nmi_watchdog = 0\n"
            "kernel.sched_autogroup_enabled = 0\n"
            "net.core.rmem_max = 268435456\n"
            "net.core.wmem_max = 268435456\n"
            "net.ipv4.tcp_rmem = 4096 87380 268435456\n"
            "net.ipv4.tcp_wmem = 4096 65536 268435456\n"
            "net.core.netdev_max_backlog = 250000\n"
            "vm.dirty_ratio = 10\n"
            "vm.dirty_background_ratio = 5\n",
        ),
        ("etc/modules-load.d/tune.conf", TUNE_HEADER + "nvidia_peermem\n"),
        (
            "etc/tmpfiles.d/tune.conf",
            TUNE_HEADER + "w /sys/kernel/mm/transparent_hugepage/enabled - - - - madvise\n"
            "w /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor - - - - performance\n",
        ),
        (
            "etc/systemd/system/nvidia-persistenced.service.d/90-tune-gpus.conf",
            TUNE_HEADER + "[Service]\nExecStart=\n"
            "ExecStart=/usr/bin/nvidia-persistenced --verbose --persistence-mode\n",
        ),
        (
            "etc/udev/rules.d/90-tune-pci.rules",
            TUNE_HEADER + 'ACTION=="add|bind", SUBSYSTEM=="pci", ATTR{vendor}=="0x10de", '
            'ATTR{class}=="0x0302??", RUN+="/usr/bin/setpci -s $kernel CAP_EXP+8.w=5000:7000"\n'
            'ACTION=="add|bind", SUBSYSTEM=="pci", ATTR{vendor}=="0x15b3", '
            'ATTR{class}=="0x02????", RUN+="/usr/bin/setpci -s $kernel CAP_EXP+8.w=5010:7010"\n'
            + "".join(acs_rule(root_port(f"0000:{bus}:00.0")) for bus in GPU_BUSES),
        ),
    ),
)

HOSTS = (UNTUNED, TUNED)

# --------------------------------------------------------------------------
# Values shared by both snapshots.
# --------------------------------------------------------------------------

COMMON_SYSCTLS: dict[str, object] = {
    "kernel/hostname": HOSTNAME,
    "kernel/ostype": "Linux",
    "kernel/numa_balancing_promote_rate_limit_MBps": 65536,
    "kernel/sched_cfs_bandwidth_slice_us": 5000,
    "kernel/sched_rt_period_us": 1000000,
    "kernel/sched_rt_runtime_us": 950000,
    "kernel/watchdog": 1,
    "kernel/soft_watchdog": 1,
    "kernel/watchdog_thresh": 10,
    "kernel/hung_task_timeout_secs": 120,
    "kernel/perf_event_paranoid": 2,
    "kernel/kptr_restrict": 1,
    "kernel/dmesg_restrict": 1,
    "kernel/randomize_va_space": 2,
    "kernel/sysrq": 438,
    "kernel/printk": (4, 4, 1, 7),
    "kernel/panic": 0,
    "kernel/panic_on_oops": 0,
    "kernel/pid_max": 4194304,
    "kernel/threads-max": 12379545,
    "kernel/core_pattern": "core",
    "kernel/shmmax": 18446744073692774399,
    "kernel/shmall": 18446744073692774399,
    "kernel/shmmni": 4096,
    "kernel/sem": (32000, 1024000000, 500, 32000),
    "kernel/msgmax": 8192,
    "kernel/msgmnb": 16384,
    "kernel/unprivileged_bpf_disabled": 2,
    "kernel/yama/ptrace_scope": 1,
    "kernel/random/entropy_avail": 256,
    "kernel/random/poolsize": 256,
    "vm/max_map_count": 65530,
    "vm/overcommit_memory": 0,
    "vm/overcommit_ratio": 50,
    "vm/dirty_bytes": 0,
    "vm/dirty_background_bytes": 0,
    "vm/dirty_expire_centisecs": 3000,
    "vm/dirty_writeback_centisecs": 500,
    "vm/min_free_kbytes": 160529,
    "vm/watermark_scale_factor": 10,
    "vm/watermark_boost_factor": 15000,
    "vm/zone_reclaim_mode": 0,
    "vm/nr_hugepages": 0,
    "vm/nr_overcommit_hugepages": 0,
    "vm/vfs_cache_pressure": 100,
    "vm/page-cluster": 3,
    "vm/compaction_proactiveness": 20,
    "vm/stat_interval": 1,
    "vm/numa_stat": 1,
    "vm/panic_on_oom": 0,
    "vm/mmap_min_addr": 65536,
    "vm/lowmem_reserve_ratio": (256, 256, 32, 0, 0),
    "net/core/somaxconn": 4096,
    "net/core/optmem_max": 20480,
    "net/core/netdev_budget": 300,
    "net/core/netdev_budget_usecs": 2000,
    "net/core/dev_weight": 64,
    "net/core/busy_poll": 0,
    "net/core/busy_read": 0,
    "net/core/default_qdisc": "fq_codel",
    "net/ipv4/tcp_mem": (18446238, 24594987, 36892476),
    "net/ipv4/udp_mem": (36892476, 49189974, 73784952),
    "net/ipv4/tcp_congestion_control": "cubic",
    "net/ipv4/tcp_available_congestion_control": "reno cubic",
    "net/ipv4/tcp_mtu_probing": 0,
    "net/ipv4/tcp_timestamps": 1,
    "net/ipv4/tcp_sack": 1,
    "net/ipv4/tcp_window_scaling": 1,
    "net/ipv4/tcp_slow_start_after_idle": 1,
    "net/ipv4/tcp_max_syn_backlog": 4096,
    "net/ipv4/tcp_fin_timeout": 60,
    "net/ipv4/tcp_keepalive_time": 7200,
    "net/ipv4/tcp_fastopen": 1,
    "net/ipv4/tcp_syncookies": 1,
    "net/ipv4/tcp_tw_reuse": 2,
    "net/ipv4/tcp_notsent_lowat": 4294967295,
    "net/ipv4/ip_forward": 0,
    "net/ipv4/ip_local_port_range": (32768, 60999),
    "fs/file-max": 9223372036854775807,
    "fs/file-nr": (12480, 0, 9223372036854775807),
    "fs/nr_open": 1073741816,
    "fs/aio-max-nr": 1048576,
    "fs/inotify/max_user_watches": 4194304,
    "fs/inotify/max_user_instances": 65536,
    "fs/inotify/max_queued_events": 8388608,
}

CPU_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36"
    " clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm"
    " constant_tsc rep_good amd_lbr_v2 nopl nonstop_tsc cpuid extd_apicid"
    " aperfmperf rapl pni pclmulqdq monitor ssse3 fma cx16 pcid sse4_1 sse4_2"
    " x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy svm"
    " extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit"
    " wdt tce topoext perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb"
    " cat_l3 cdp_l3 hw_pstate ssbd mba perfmon_v2 ibrs ibpb stibp"
    " ibrs_enhanced vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms"
    " invpcid cqm rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt"
    " clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves"
    " cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local avx_vnni avx512_bf16"
    " clzero irperf xsaveerptr rdpru wbnoinvd amd_ppin cppc arat npt lbrv"
    " svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists"
    " pausefilter pfthreshold avic v_vmsave_vmload vgif x2avic v_spec_ctrl"
    " vnmi avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq"
    " avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid bus_lock_detect movdiri"
    " movdir64b overflow_recov succor smca fsrm avx512_vp2intersect flush_l1d"
)

# --------------------------------------------------------------------------
# Small file helpers.
# --------------------------------------------------------------------------


def write_text(root: Path, rel: str, text: str) -> None:
    """Write text to root/rel, creating parent directories."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def write_bytes(root: Path, rel: str, data: bytes) -> None:
    """Write binary data to root/rel, creating parent directories."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def format_value(value: object) -> str:
    """Format a value like the kernel prints it (tuples are TAB separated)."""
    if isinstance(value, tuple):
        return "\t".join(str(v) for v in value)
    return str(value)


def write_value(root: Path, rel: str, value: object) -> None:
    """Write a single-value kernel file: the value plus a newline."""
    write_text(root, rel, format_value(value) + "\n")


def choice_line(options: Iterable[str], selected: str) -> str:
    """Format a sysfs choice file such as 'always [madvise] never'."""
    return " ".join(f"[{o}]" if o == selected else o for o in options)


def boot_id(host: HostSpec) -> str:
    """A stable, host-specific boot id (a random UUID on a real host)."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host.name}.{HOSTNAME}.boot"))


# --------------------------------------------------------------------------
# /proc/sys
# --------------------------------------------------------------------------


def write_sysctls(root: Path, host: HostSpec) -> None:
    values = dict(COMMON_SYSCTLS)
    values.update(host.sysctls)
    values["kernel/osrelease"] = host.osrelease
    values["kernel/random/boot_id"] = boot_id(host)
    for key in sorted(values):
        write_value(root, f"proc/sys/{key}", values[key])


# --------------------------------------------------------------------------
# /proc/cmdline, /proc/modules, /proc/devices, /proc/cpuinfo
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    """One /proc/modules line; holders are the modules that use this one."""

    name: str
    size: int
    holders: tuple[str, ...] = ()
    users: int = 0
    taint: str = ""

    def line(self) -> str:
        refcount = len(self.holders) + self.users
        deps = "".join(f"{h}," for h in self.holders) or "-"
        text = f"{self.name} {self.size} {refcount} {deps} Live 0x0000000000000000"
        return f"{text} ({self.taint})" if self.taint else text


def loaded_modules(host: HostSpec) -> list[Module]:
    """Loaded modules, most recently loaded first (as the kernel lists them)."""
    peer = ("nvidia_peermem",) if host.peermem_loaded else ()
    modules = [
        Module("nvidia_uvm", 1527808, users=4, taint="POE"),
        Module("nvidia_drm", 135168, taint="POE"),
        Module("nvidia_modeset", 1781760, ("nvidia_drm",), taint="POE"),
        Module("nvidia", 11649024, (*peer, "nvidia_uvm", "nvidia_modeset"), users=16, taint="POE"),
        Module("drm_kms_helper", 253952, ("nvidia_drm", "ast")),
        Module("ast", 65536),
        Module("drm", 753664, ("nvidia_drm", "drm_kms_helper", "ast"), users=2),
        Module("video", 73728, ("nvidia_modeset",)),
        Module("mlx5_ib", 499712),
        Module("ib_uverbs", 196608, ("mlx5_ib",)),
        Module("ib_core", 487424, (*peer, "mlx5_ib", "ib_uverbs")),
        Module("mlx5_core", 2494464, ("mlx5_ib",)),
        Module("mlxfw", 36864, ("mlx5_core",)),
        Module("psample", 20480, ("mlx5_core",)),
        Module("tls", 155648, ("mlx5_core",)),
        Module("pci_hyperv_intf", 12288, ("mlx5_core",)),
        Module("vfio_pci", 16384),
        Module("vfio_pci_core", 86016, ("vfio_pci",)),
        Module("vfio_iommu_type1", 49152),
        Module("vfio", 69632, ("vfio_pci", "vfio_pci_core", "vfio_iommu_type1"), users=2),
        Module("iommufd", 98304, ("vfio",)),
        Module("kvm_amd", 245760),
        Module("kvm", 1404928, ("kvm_amd",)),
        Module("irqbypass", 12288, ("kvm",), users=1),
        Module("ccp", 155648, ("kvm_amd",)),
        Module("amd64_edac", 57344),
        Module("edac_mce_amd", 28672, ("amd64_edac",)),
        Module("k10temp", 16384),
        Module("ipmi_ssif", 45056),
        Module("ipmi_si", 86016),
        Module("ipmi_devintf", 20480),
        Module("ipmi_msghandler", 77824, ("ipmi_devintf", "ipmi_si", "ipmi_ssif")),
        Module("overlay", 212992),
        Module("bridge", 421888),
        Module("stp", 12288, ("bridge",)),
        Module("llc", 16384, ("bridge", "stp")),
        Module("nvme", 57344, users=6),
        Module("nvme_core", 200704, ("nvme",), users=7),
        Module("xhci_pci", 24576),
        Module("i2c_piix4", 32768),
    ]
    if host.peermem_loaded:
        modules.insert(0, Module("nvidia_peermem", 16384, taint="POE"))
    return modules


def write_proc_modules(root: Path, host: HostSpec) -> None:
    lines = [m.line() for m in loaded_modules(host)]
    write_text(root, "proc/modules", "\n".join(lines) + "\n")


CHAR_DEVICES = {
    1: ["mem"],
    4: ["/dev/vc/0", "tty", "ttyS"],
    5: ["/dev/tty", "/dev/console", "/dev/ptmx"],
    7: ["vcs"],
    10: ["misc"],
    13: ["input"],
    21: ["sg"],
    29: ["fb"],
    89: ["i2c"],
    128: ["ptm"],
    136: ["pts"],
    180: ["usb"],
    188: ["ttyUSB"],
    189: ["usb_device"],
    226: ["drm"],
    231: ["infiniband_verbs"],
    237: ["ipmidev"],
    238: ["aux"],
    239: ["cec"],
    240: ["vfio"],
    241: ["nvme-generic"],
    242: ["nvme"],
    243: ["hidraw"],
    244: ["ttyDBC"],
    245: ["bsg"],
    246: ["watchdog"],
    247: ["ptp"],
    248: ["pps"],
    249: ["rtc"],
    250: ["dma_heap"],
    251: ["dax"],
    252: ["tpmrm"],
    253: ["tpm"],
    254: ["gpiochip"],
}

BLOCK_DEVICES = {
    7: ["loop"],
    8: ["sd"],
    9: ["md"],
    65: ["sd"],
    66: ["sd"],
    67: ["sd"],
    68: ["sd"],
    69: ["sd"],
    70: ["sd"],
    71: ["sd"],
    128: ["sd"],
    129: ["sd"],
    130: ["sd"],
    131: ["sd"],
    132: ["sd"],
    133: ["sd"],
    134: ["sd"],
    135: ["sd"],
    253: ["device-mapper"],
    254: ["mdp"],
    259: ["blkext"],
}


def device_lines(table: Mapping[int, list[str]]) -> list[str]:
    """Format major/name pairs like fs/char_dev.c: '%3d %s', sorted by major."""
    return [f"{major:3d} {name}" for major in sorted(table) for name in table[major]]


def write_proc_devices(root: Path, host: HostSpec) -> None:
    chars = {major: list(names) for major, names in CHAR_DEVICES.items()}
    for major, name in host.nvidia_majors.items():
        chars.setdefault(major, []).append(name)
    lines = ["Character devices:", *device_lines(chars), ""]
    lines += ["Block devices:", *device_lines(BLOCK_DEVICES)]
    write_text(root, "proc/devices", "\n".join(lines) + "\n")


def cpu_socket_and_core(cpu: int) -> tuple[int, int]:
    """Socket (physical id) and core id: 32 cores per socket, SMT siblings +64."""
    core = cpu % 64
    return core // 32, core % 32


def write_proc_cpuinfo(root: Path) -> None:
    blocks = []
    for cpu in range(N_CPUS):
        socket, core = cpu_socket_and_core(cpu)
        blocks.append(
            f"processor\t: {cpu}\n"
            "vendor_id\t: AuthenticAMD\n"
            "cpu family\t: 26\n"
            "model\t\t: 2\n"
            "model name\t: AMD EPYC 9335 32-Core Processor\n"
            f"physical id\t: {socket}\n"
            f"core id\t\t: {core}\n"
            "cpu cores\t: 32\n"
            f"flags\t\t: {CPU_FLAGS}\n"
            "\n"
        )
    write_text(root, "proc/cpuinfo", "".join(blocks))


def write_proc(root: Path, host: HostSpec) -> None:
    write_sysctls(root, host)
    write_value(root, "proc/cmdline", host.cmdline)
    write_proc_modules(root, host)
    write_proc_devices(root, host)
    write_proc_cpuinfo(root)


# --------------------------------------------------------------------------
# /etc/default/grub and /etc/default/grub.d/
# --------------------------------------------------------------------------

GRUB_TEMPLATE = """\
# If you change this file, run 'update-grub' afterwards to update
# /boot/grub/grub.cfg.
# For full documentation of the options in this file, see:
#   info -f grub -n 'Simple configuration'

GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="{cmdline_default}"
GRUB_CMDLINE_LINUX=""

# If your computer has multiple operating systems installed, then you
# probably want to run os-prober. However, if your computer is a host
# for guest OSes installed via LVM or raw disk devices, running
# os-prober can cause damage to those guest OSes as it mounts
# filesystems to look for things.
#GRUB_DISABLE_OS_PROBER=false

# Uncomment to enable BadRAM filtering, modify to suit your needs
# This works with Linux (no patch required) and with any kernel that obtains
# the memory map information from GRUB (GNU Mach, kernel of FreeBSD ...)
#GRUB_BADRAM="0x01234567,0xfefefefe,0x89abcdef,0xefefefef"

# Uncomment to disable graphical terminal
#GRUB_TERMINAL=console

# The resolution used on graphical terminal
# note that you can use only modes which your graphic card supports via VBE
# you can see them in real GRUB with the command `vbeinfo'
#GRUB_GFXMODE=640x480

# Uncomment if you don't want GRUB to pass "root=UUID=xxx" parameter to Linux
#GRUB_DISABLE_LINUX_UUID=true

# Uncomment to disable generation of recovery mode menu entries
#GRUB_DISABLE_RECOVERY="true"

# Uncomment to get a beep at grub start
#GRUB_INIT_TUNE="480 440 1"
"""

INIT_SELECT_CFG = """\
# This file is sourced by update-grub after /etc/default/grub.
# It is reserved for selecting an alternative init system on the kernel
# command line; systemd is the default, so nothing is set here.
"""


def write_grub(root: Path, host: HostSpec) -> None:
    grub = GRUB_TEMPLATE.format(cmdline_default=host.grub_cmdline_linux_default)
    write_text(root, "etc/default/grub", grub)
    write_text(root, "etc/default/grub.d/init-select.cfg", INIT_SELECT_CFG)
    if host.grub_dropin is not None:
        write_text(root, "etc/default/grub.d/90-tune.cfg", host.grub_dropin)


# --------------------------------------------------------------------------
# /etc/pve/lxc/101.conf
# --------------------------------------------------------------------------


def nvidia_mount_entries(gpu_count: int, modeset: bool = False) -> list[str]:
    """lxc.mount.entry lines that bind the NVIDIA device nodes."""
    files = [f"nvidia{i}" for i in range(gpu_count)]
    files += ["nvidiactl", *(["nvidia-modeset"] * modeset), "nvidia-uvm", "nvidia-uvm-tools"]
    lines = [f"lxc.mount.entry: /dev/{f} dev/{f} none bind,optional,create=file" for f in files]
    lines.append("lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir")
    return lines


def allow_lines(majors: Iterable[int]) -> list[str]:
    return [f"lxc.cgroup2.devices.allow: c {major}:* rwm" for major in majors]


def container_main_section(host: HostSpec) -> list[str]:
    lines = [
        "#GPU passthrough for SGLang",
        "arch: amd64",
        "cores: 32",
        "features: nesting=1",
        "hostname: sglang",
        "memory: 262144",
        "net0: name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:5A:3C:7E,ip=dhcp,type=veth",
        "onboot: 1",
        "ostype: ubuntu",
        "parent: pre-upgrade",
        "rootfs: local-lvm:vm-101-disk-0,size=500G",
        "swap: 0",
        "unprivileged: 0",
    ]
    lines += allow_lines(host.container_allow_majors)
    if host.container_memlock:
        lines.append("lxc.prlimit.memlock: unlimited")
    lines += nvidia_mount_entries(8, host.container_mounts_modeset)
    return lines


def container_snapshot_section() -> list[str]:
    """The [pre-upgrade] snapshot: an older config (4 GPUs, old uvm major)."""
    lines = [
        "[pre-upgrade]",
        "#GPU passthrough for SGLang",
        "arch: amd64",
        "cores: 16",
        "features: nesting=1",
        "hostname: sglang",
        "memory: 131072",
        "net0: name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:5A:3C:7E,ip=dhcp,type=veth",
        "onboot: 1",
        "ostype: ubuntu",
        "rootfs: local-lvm:vm-101-disk-0,size=500G",
        "snaptime: 1735689600",
        "swap: 0",
        "unprivileged: 0",
    ]
    lines += allow_lines((195, 511))
    lines += nvidia_mount_entries(4)
    return lines


def write_container(root: Path, host: HostSpec) -> None:
    lines = [*container_main_section(host), "", *container_snapshot_section()]
    write_text(root, "etc/pve/lxc/101.conf", "\n".join(lines) + "\n")


# --------------------------------------------------------------------------
# /dev/nvidia*: device nodes as empty files (tune lists their names, never opens them)
# --------------------------------------------------------------------------

NVIDIA_NODES = (
    *(f"nvidia{i}" for i in range(8)),
    "nvidiactl",
    "nvidia-modeset",  # nvidia_modeset is loaded (nvidia_drm needs it)
    "nvidia-uvm",
    "nvidia-uvm-tools",
    "nvidia-caps/nvidia-cap1",
    "nvidia-caps/nvidia-cap2",
)


def write_dev(root: Path) -> None:
    for name in NVIDIA_NODES:
        write_text(root, f"dev/{name}", "")


# --------------------------------------------------------------------------
# /sys/devices/system/cpu and /sys/devices/system/node
# --------------------------------------------------------------------------


def write_cpu(root: Path, host: HostSpec, cpu: int) -> None:
    base = f"sys/devices/system/cpu/cpu{cpu}"
    write_value(root, f"{base}/cpufreq/scaling_driver", host.scaling_driver)
    write_value(root, f"{base}/cpufreq/scaling_governor", host.scaling_governor)
    write_value(root, f"{base}/cpufreq/scaling_available_governors", host.available_governors)
    for index, state in enumerate(host.cstates):
        state_dir = f"{base}/cpuidle/state{index}"
        write_value(root, f"{state_dir}/name", state.name)
        write_value(root, f"{state_dir}/desc", state.desc)
        write_value(root, f"{state_dir}/disable", 0)
        write_value(root, f"{state_dir}/latency", state.latency)


def write_cpus(root: Path, host: HostSpec) -> None:
    all_cpus = f"0-{N_CPUS - 1}"
    for name in ("online", "possible", "present"):
        write_value(root, f"sys/devices/system/cpu/{name}", all_cpus)
    write_value(root, "sys/devices/system/cpu/cpufreq/boost", 1)
    for cpu in range(N_CPUS):
        write_cpu(root, host, cpu)
    write_value(root, "sys/devices/system/node/online", "0-1")
    write_value(root, "sys/devices/system/node/possible", "0-1")
    for node, cpulist in NODE_CPULISTS.items():
        write_value(root, f"sys/devices/system/node/node{node}/cpulist", cpulist)


# --------------------------------------------------------------------------
# /sys/kernel: transparent hugepages, IOMMU groups
# --------------------------------------------------------------------------


def write_thp(root: Path, host: HostSpec) -> None:
    base = "sys/kernel/mm/transparent_hugepage"
    enabled = choice_line(("always", "madvise", "never"), host.thp_enabled)
    defrag = choice_line(("always", "defer", "defer+madvise", "madvise", "never"), "madvise")
    write_value(root, f"{base}/enabled", enabled)
    write_value(root, f"{base}/defrag", defrag)


def write_iommu_groups(root: Path, host: HostSpec, count: int = 12) -> None:
    for group in range(count):
        write_value(root, f"sys/kernel/iommu_groups/{group}/type", host.iommu_type)


# --------------------------------------------------------------------------
# /sys/bus/pci/devices: sysfs attributes and binary config space
# --------------------------------------------------------------------------

LINK_SPEEDS = {
    1: "2.5 GT/s PCIe",
    2: "5.0 GT/s PCIe",
    3: "8.0 GT/s PCIe",
    4: "16.0 GT/s PCIe",
    5: "32.0 GT/s PCIe",
}

CONFIG_SIZE = 4096
CAP_PM, CAP_MSI, CAP_EXP, CAP_MSIX = 0x60, 0x68, 0x78, 0xB4
PCI_STATUS_CAP_LIST = 0x0010
EXT_CAP_AER = 0x0001

# PCI Express Device Control bits (MRRS at 14:12 is added per device).
DEVCTL_CERE = 1 << 0  # correctable error reporting
DEVCTL_NFERE = 1 << 1  # non-fatal error reporting
DEVCTL_RELAX_EN = 1 << 4  # relaxed ordering
DEVCTL_PAYLOAD_256B = 0b001 << 5
DEVCTL_EXT_TAG = 1 << 8
DEVCTL_NOSNOOP_EN = 1 << 11
DEVCTL_BASE = (
    DEVCTL_CERE
    | DEVCTL_NFERE
    | DEVCTL_RELAX_EN
    | DEVCTL_PAYLOAD_256B
    | DEVCTL_EXT_TAG
    | DEVCTL_NOSNOOP_EN
)
LNKSTA_DLLLA = 1 << 13  # data link layer link active


@dataclass(frozen=True)
class PcieLink:
    """PCI Express capability contents that matter for tuning."""

    max_speed: int  # speed code, 5 = 32 GT/s
    current_speed: int
    width: int
    mrrs: int  # Max_Read_Request_Size in bytes


@dataclass(frozen=True)
class PciDevice:
    bdf: str
    vendor: int
    device: int
    class_code: int  # 24 bits: base class, subclass, prog-if
    subsystem_vendor: int
    subsystem_device: int
    numa_node: int
    link: PcieLink | None = None
    revision: int = 0xA1
    above: str | None = None  # the root port it hangs off
    config: bytes | None = None  # a real function's configuration space, whole


def mrrs_code(size: int) -> int:
    """Encode a Max_Read_Request_Size in bytes (128 << code)."""
    code = (size // 128).bit_length() - 1
    assert 128 << code == size, size
    return code


def pcie_capability(link: PcieLink) -> bytes:
    """The PCI Express capability body after the id/next bytes (0x3a bytes)."""
    devctl = DEVCTL_BASE | (mrrs_code(link.mrrs) << 12)
    lnkcap = link.max_speed | (link.width << 4)
    lnksta = link.current_speed | (link.width << 4) | LNKSTA_DLLLA
    return struct.pack(
        "<HIHHIHH",
        0x0002,  # capabilities register: version 2, endpoint
        0x00000001,  # device capabilities: Max_Payload_Size_Supported 256 B
        devctl,
        0x0000,  # device status
        lnkcap,
        0x0040,  # link control: common clock configuration
        lnksta,
    )


def config_space(dev: PciDevice) -> bytes:
    """Build the 4096-byte configuration space of a type 0 function."""
    if dev.config is not None:
        return dev.config
    cfg = bytearray(CONFIG_SIZE)
    struct.pack_into("<HH", cfg, 0x00, dev.vendor, dev.device)
    status = PCI_STATUS_CAP_LIST if dev.link else 0
    struct.pack_into("<HH", cfg, 0x04, 0x0006, status)
    cfg[0x08] = dev.revision
    cfg[0x09] = dev.class_code & 0xFF  # programming interface
    cfg[0x0A] = (dev.class_code >> 8) & 0xFF  # subclass
    cfg[0x0B] = (dev.class_code >> 16) & 0xFF  # base class
    cfg[0x0E] = 0x00  # header type 0
    struct.pack_into("<HH", cfg, 0x2C, dev.subsystem_vendor, dev.subsystem_device)
    if dev.link is None:
        return bytes(cfg)
    cfg[0x34] = CAP_PM
    chain = (
        (CAP_PM, 0x01, CAP_MSI),
        (CAP_MSI, 0x05, CAP_EXP),
        (CAP_EXP, 0x10, CAP_MSIX),
        (CAP_MSIX, 0x11, 0x00),
    )
    for offset, cap_id, next_ptr in chain:
        cfg[offset], cfg[offset + 1] = cap_id, next_ptr
    body = pcie_capability(dev.link)
    cfg[CAP_EXP + 2 : CAP_EXP + 2 + len(body)] = body
    struct.pack_into("<I", cfg, 0x100, EXT_CAP_AER | (2 << 16) | (0 << 20))
    return bytes(cfg)


GPU_BDFS = {
    "0000:01:00.0": 0,
    "0000:21:00.0": 0,
    "0000:41:00.0": 0,
    "0000:61:00.0": 0,
    "0000:81:00.0": 1,
    "0000:a1:00.0": 1,
    "0000:c1:00.0": 1,
    "0000:e1:00.0": 1,
}


# A real root port's configuration space (pciutils' tests/cap-aer-root, 00:02.0: a Xeon E5 v3
# root port with AER, ACS and the rest of a server port's capabilities), given this host's ids
# and bus numbers.
ROOT_PORT_DUMP = HERE.parent.parent / "tests/corpus/pciutils/cap-aer-root.gz"
ROOT_PORT_ID = (0x1022, 0x14AB)  # AMD Genoa/Turin PCIe GPP bridge
EXT_CAP_ACS = 0x000D
ACS_CONTROL = 6  # ACS Control, from the capability's start


def dump_config(path: Path, address: str) -> bytes:
    """The configuration space of `address` in an `lspci -xxxx` dump (gzipped), read as the
    corpus tests read it."""
    sys.path.insert(0, str(HERE.parent.parent / "tests"))
    from test_pciutils_corpus import functions

    return functions(gzip.decompress(path.read_bytes()).decode())[address]


def ext_capability(config: bytes, cap_id: int) -> int:
    """Where the extended capability `cap_id` starts (the list begins at 0x100)."""
    at = 0x100
    while at:
        header = struct.unpack_from("<I", config, at)[0]
        if header & 0xFFFF == cap_id:
            return at
        at = header >> 20
    raise LookupError(cap_id)


def root_port_config(secondary: int, acs_control: int) -> bytes:
    cfg = bytearray(dump_config(ROOT_PORT_DUMP, "00:02.0"))
    struct.pack_into("<HH", cfg, 0x00, *ROOT_PORT_ID)
    cfg[0x18], cfg[0x19], cfg[0x1A] = secondary & 0xF0, secondary, secondary
    struct.pack_into("<H", cfg, ext_capability(cfg, EXT_CAP_ACS) + ACS_CONTROL, acs_control)
    return bytes(cfg)


def pci_devices(host: HostSpec) -> list[PciDevice]:
    bridges = [
        PciDevice(bdf, 0x1022, 0x14A4, 0x060000, 0x1022, 0x14A4, node, revision=0x01)
        for bdf, node in (("0000:00:00.0", 0), ("0000:80:00.0", 1))
    ]
    gpu_link = PcieLink(max_speed=5, current_speed=1, width=16, mrrs=host.gpu_mrrs)
    gpus = [
        PciDevice(bdf, 0x10DE, 0x2BB5, 0x030200, 0x10DE, 0x204E, node, gpu_link)
        for bdf, node in GPU_BDFS.items()
    ]
    nic_link = PcieLink(max_speed=5, current_speed=5, width=16, mrrs=host.nic_mrrs)
    nic = PciDevice(NIC_BDF, 0x15B3, 0x1021, 0x020000, 0x15B3, 0x0041, 1, nic_link, revision=0x00)
    ports = [
        PciDevice(
            root_port(dev.bdf),
            *ROOT_PORT_ID,
            0x060400,
            *ROOT_PORT_ID,
            dev.numa_node,
            revision=0x00,
            config=root_port_config(int(dev.bdf[5:7], 16), host.acs_control),
        )
        for dev in [*gpus, nic]
    ]
    below = [replace(dev, above=root_port(dev.bdf)) for dev in [*gpus, nic]]
    return bridges + ports + below


def write_pci_device(root: Path, dev: PciDevice) -> None:
    # sysfs lists each function in /sys/bus/pci/devices, a link to its place below its root
    # port on its root bus (X0 for bus Xn); a snapshot (`tune snapshot`, or an archive)
    # holds the files of both, as here.
    place = "/".join(a for a in (dev.above, dev.bdf) if a)
    for base in (f"sys/bus/pci/devices/{dev.bdf}", f"sys/devices/pci0000:{dev.bdf[5]}0/{place}"):
        write_attributes(root, base, dev)


def write_attributes(root: Path, base: str, dev: PciDevice) -> None:
    write_value(root, f"{base}/vendor", f"0x{dev.vendor:04x}")
    write_value(root, f"{base}/device", f"0x{dev.device:04x}")
    write_value(root, f"{base}/class", f"0x{dev.class_code:06x}")
    write_value(root, f"{base}/revision", f"0x{dev.revision:02x}")
    write_value(root, f"{base}/subsystem_vendor", f"0x{dev.subsystem_vendor:04x}")
    write_value(root, f"{base}/subsystem_device", f"0x{dev.subsystem_device:04x}")
    write_value(root, f"{base}/numa_node", dev.numa_node)
    write_value(root, f"{base}/local_cpulist", NODE_CPULISTS[dev.numa_node])
    if dev.link is not None:
        write_value(root, f"{base}/max_link_speed", LINK_SPEEDS[dev.link.max_speed])
        write_value(root, f"{base}/current_link_speed", LINK_SPEEDS[dev.link.current_speed])
        write_value(root, f"{base}/max_link_width", dev.link.width)
        write_value(root, f"{base}/current_link_width", dev.link.width)
    write_bytes(root, f"{base}/config", config_space(dev))


# mlx5_core's vectors on this host: one for its async events, 63 for completion queues.
NIC_IRQS = range(120, 184)


def affinity_mask(cpulist: str) -> str:
    """`smp_affinity`: the same CPUs as 32-bit hex groups, highest first."""
    bits = 0
    for part in cpulist.split(","):
        first, _, last = part.partition("-")
        for cpu in range(int(first), int(last or first) + 1):
            bits |= 1 << cpu
    return ",".join(f"{(bits >> (32 * g)) & 0xFFFFFFFF:08x}" for g in reversed(range(N_CPUS // 32)))


def write_nic_irqs(root: Path, host: HostSpec, nic: PciDevice) -> None:
    for irq in NIC_IRQS:
        write_value(root, f"sys/bus/pci/devices/{nic.bdf}/msi_irqs/{irq}", "msix")
        write_value(root, f"proc/irq/{irq}/smp_affinity_list", host.nic_irq_affinity)
        write_value(root, f"proc/irq/{irq}/smp_affinity", affinity_mask(host.nic_irq_affinity))
        first = host.nic_irq_affinity.split(",")[0].split("-")[0]
        write_value(root, f"proc/irq/{irq}/effective_affinity_list", first)
        write_value(root, f"proc/irq/{irq}/node", nic.numa_node)
    write_value(root, f"sys/bus/pci/devices/{nic.bdf}/irq", NIC_IRQS[0])


def write_pci(root: Path, host: HostSpec) -> None:
    for dev in pci_devices(host):
        write_pci_device(root, dev)
        if dev.vendor == 0x15B3:
            write_nic_irqs(root, host, dev)


# --------------------------------------------------------------------------
# nvidia-smi, as `tune snapshot` records a command's output (reconciler/hosts/recorded.py)
# --------------------------------------------------------------------------

# reconciler.facts.nvidia_smi.QUERY
NVIDIA_SMI_QUERY = (
    "nvidia-smi",
    "--query-gpu=pci.bus_id,persistence_mode,power.limit,power.default_limit,power.min_limit,"
    "power.max_limit,compute_mode,ecc.mode.current,ecc.mode.pending",
    "--format=csv",
)


def write_nvidia_smi(root: Path, host: HostSpec) -> None:
    """The query's answer in nvidia-smi's CSV: 600 W boards (the power limits are this
    example's, not a measured card's), ECC on, persistence as the host has it."""
    digest = hashlib.sha256("\0".join(NVIDIA_SMI_QUERY).encode()).hexdigest()[:16]
    base = f".tune-observed/commands/nvidia-smi-{digest}"
    header = (
        "pci.bus_id, persistence_mode, power.limit [W], power.default_limit [W], "
        "power.min_limit [W], power.max_limit [W], compute_mode, ecc.mode.current, "
        "ecc.mode.pending\n"
    )
    lines = "".join(
        f"0000{bdf.upper()}, {host.gpu_persistence}, 600.00 W, 600.00 W, 300.00 W, 600.00 W, "
        "Default, Enabled, Enabled\n"
        for bdf in GPU_BDFS
    )
    write_bytes(root, f"{base}/argv", b"".join(w.encode() + b"\0" for w in NVIDIA_SMI_QUERY))
    write_text(root, f"{base}/status", "0\n")
    write_text(root, f"{base}/stdout", header + lines)


# --------------------------------------------------------------------------
# /sys/module/<name>/parameters
# --------------------------------------------------------------------------

MODULE_PARAMETERS: dict[str, dict[str, object]] = {
    "nvidia": {
        "NVreg_EnableGpuFirmware": 18,
        "NVreg_EnableMSI": 1,
        "NVreg_EnablePCIeGen3": 0,
        "NVreg_EnableStreamMemOPs": 0,
        "NVreg_NvLinkDisable": 0,
        "NVreg_DynamicPowerManagement": 3,
        "NVreg_PreserveVideoMemoryAllocations": 0,
        "NVreg_RegistryDwords": "(null)",
        "NVreg_ModifyDeviceFiles": 1,
        "NVreg_DeviceFileMode": 438,
    },
    "nvidia_uvm": {
        "uvm_ats_mode": 1,
        "uvm_perf_access_counter_migration_enable": -1,
        "uvm_global_oversubscription": 1,
    },
    "nvidia_drm": {"modeset": "N", "fbdev": "N"},
    "kvm": {"halt_poll_ns": 200000, "ignore_msrs": "N", "tdp_mmu": "Y"},
    "kvm_amd": {"npt": "Y", "nested": 1, "avic": "N", "sev": "N"},
    "vfio_iommu_type1": {
        "allow_unsafe_interrupts": "N",
        "disable_hugepages": "N",
        "dma_entry_limit": 65535,
    },
    "vfio_pci": {"disable_vga": "N", "disable_idle_d3": "N", "nointxmask": "N"},
    "mlx5_core": {"debug_mask": 0, "prof_sel": 2, "probe_vf": "Y"},
    "nvme_core": {"io_timeout": 30, "default_ps_max_latency_us": 100000, "multipath": "Y"},
}

PEERMEM_PARAMETERS = {"peerdirect_support": 0, "persistent_api_support": 1}


def write_sys_modules(root: Path, host: HostSpec) -> None:
    params = dict(MODULE_PARAMETERS)
    if host.peermem_loaded:
        params["nvidia_peermem"] = PEERMEM_PARAMETERS
    for module, values in sorted(params.items()):
        for name, value in values.items():
            write_value(root, f"sys/module/{module}/parameters/{name}", value)
    write_value(root, "sys/module/nvidia/version", NVIDIA_DRIVER_VERSION)


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def generate_host(host: HostSpec) -> Path:
    root = HERE / host.name
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    write_proc(root, host)
    write_grub(root, host)
    write_container(root, host)
    write_dev(root)
    write_cpus(root, host)
    write_thp(root, host)
    write_iommu_groups(root, host)
    write_pci(root, host)
    write_nvidia_smi(root, host)
    write_sys_modules(root, host)
    for rel, text in host.tune_files:
        write_text(root, rel, text)
    return root


def main() -> None:
    for host in HOSTS:
        root = generate_host(host)
        count = sum(1 for p in root.rglob("*") if p.is_file())
        print(f"{root.relative_to(HERE.parent.parent)}: {count} files")


if __name__ == "__main__":
    main()
