"""The host the hostile-snapshot fuzz starts from: a small snapshot on which a profile of every
kind plans a change of each (so apply and rollback write through every kind), and the paths
that profile reads, derived from the registry's observation request, never listed by hand."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from conftest import ACS_CASE, write
from small_host import CLOCKS_HEADER, GPU_HEADER, SmallHost, build, clocks_line, gpu_line

from reconciler.core.files import CommandOutput
from reconciler.facts import nvidia_smi
from reconciler.hosts import recorded

BUS = "00000000:01:00.0"
DEVICE = "/sys/bus/pci/devices/0000:01:00.0"
UNIT = "/usr/lib/systemd/system/containerd.service"

# Every section of the profile schema, each asking for a change on HOST.
PROFILE: dict[str, object] = {
    "sysctl": {"vm.swappiness": 10, "net.ipv4.tcp_rmem": "4096 87380 268435456"},
    "sysfs": {
        "/sys/block/*/queue/scheduler": "none",
        "/sys/kernel/mm/transparent_hugepage/enabled": "madvise",
    },
    "hugepages": {"2048kB": {"node*": 4}},
    "cpu": {"governor": "performance", "idle_states": {"disable": ["C2"]}},
    "modules": {
        "nvidia_peermem": {"value": "loaded", "params": {"foo": 1}},
        "nvidia": {"value": "loaded", "params": {"NVreg_EnableStreamMemOPs": 1}},
    },
    "pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 4096}],
    "acs": [{"select": {"vendor": 0x10DE}}],
    "irq_affinity": [{"select": {"vendor": 0x10DE}, "cpus": "local"}],
    "gpus": {
        "all": {
            "persistence": True,
            "power_limit": 400,
            "application_clocks": {"memory": 877, "graphics": 1312},
            "ecc": False,
        }
    },
    "services": {
        "containerd.service": {"limits": {"LimitMEMLOCK": "infinity"}},
        "systemd-logind.service": {"logind": {"RemoveIPC": "no"}},
    },
    "cmdline": {"set": {"amd_pstate": "active"}, "remove": ["intel_iommu"]},
    "lxc": [{"container": "101", "memlock": "unlimited", "nvidia_devices": True}],
    "checks": {"kernel": ">=6.14", "iommu": "passthrough"},
}

FILES: dict[str, str | bytes] = {
    "proc/sys/net/ipv4/tcp_rmem": "4096\t131072\t6291456\n",
    "sys/block/sda/queue/scheduler": "[mq-deadline] none\n",
    "sys/devices/system/node/online": "0\n",
    "sys/devices/system/node/node0/cpulist": "0-1\n",
    "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages": "0\n",
    "sys/devices/system/cpu/online": "0-1\n",
    "sys/module/nvidia_peermem/parameters/foo": "0\n",
    "proc/driver/nvidia/params": "EnableStreamMemOPs: 0\n",
    "proc/driver/nvidia/version": (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build\n"
    ),
    "etc/modprobe.d/nvidia.conf": "options nvidia NVreg_EnableStreamMemOPs=0\n",
    f"{DEVICE.lstrip('/')}/numa_node": "0\n",
    f"{DEVICE.lstrip('/')}/irq": "40\n",
    f"{DEVICE.lstrip('/')}/msi_irqs/41": "msi\n",
    "proc/irq/41/smp_affinity_list": "0-3\n",
    "proc/irq/41/smp_affinity": "f\n",
    "sys/kernel/iommu_groups/1/type": "DMA-FQ\n",
    UNIT.lstrip("/"): "[Service]\nExecStart=/usr/bin/containerd\nLimitMEMLOCK=65536\n",
    "sys/fs/cgroup/system.slice/containerd.service/cgroup.procs": "812\n",
    "proc/812/comm": "containerd\n",
    "proc/812/limits": (
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max locked memory         65536                65536                bytes     \n"
    ),
    "etc/systemd/logind.conf": "[Login]\n#RemoveIPC=yes\n",
    "proc/cmdline": "BOOT_IMAGE=/boot/vmlinuz ro quiet intel_iommu=on\n",
    "etc/default/grub": 'GRUB_CMDLINE_LINUX_DEFAULT="quiet intel_iommu=on"\n',
    "etc/pve/lxc/101.conf": "arch: amd64\nlxc.prlimit.memlock: 65536\n",
    "proc/devices": "Character devices:\n195 nvidia-frontend\n511 nvidia-uvm\n\nBlock devices:\n",
    "dev/nvidia0": "",
    "dev/nvidiactl": "",
    "dev/nvidia-uvm": "",
}


def build_host(root: Path) -> Path:
    """Two CPUs, an NVIDIA GPU (MaxReadReq 512) that nvidia-smi lists, the files above, and a
    GeForce behind a root port with ACS."""
    build(
        root,
        SmallHost(
            sysctls={"vm.swappiness": "60"},
            governors=["schedutil", "schedutil"],
            modules=["nvidia", "nvidia_peermem"],
            gpus=[512],
            nvidia_smi=GPU_HEADER + gpu_line(BUS),
        ),
    )
    answer = CommandOutput(0, (CLOCKS_HEADER + clocks_line(BUS, 810, 1100)).encode())
    for path, data in recorded.record(nvidia_smi.CLOCKS_QUERY, answer).items():
        write(root, path, data)
    for rel, content in FILES.items():
        write(root, rel, content)
    # A GPU behind a root port with ACS, laid out as sysfs does (the acs kind walks the tree).
    port = "sys/devices/pci0000:00/0000:00:07.0"
    shutil.copytree(ACS_CASE / "host" / port, root / port, symlinks=True)
    for address in ("0000:00:07.0", "0000:06:00.0", "0000:06:00.1"):
        link = f"sys/bus/pci/devices/{address}"
        os.symlink(os.readlink(ACS_CASE / "host" / link), root / link)
    (root / "var/lib/tune/runs").mkdir(parents=True)
    (root / "run/lock").mkdir(parents=True)
    return root
