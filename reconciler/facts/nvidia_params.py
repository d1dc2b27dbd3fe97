"""The NVIDIA driver's `NVreg_*` parameters: what the running driver uses
(`/proc/driver/nvidia/params`) and what the next load of `nvidia` will be given (the `options`
lines of modprobe.d).

The driver declares them `module_param(NVreg_X, int, 0)`: mode 0, so they never appear under
`/sys/module/nvidia/parameters`. It prints them instead, one `Name: value` a line without the
`NVreg_` prefix: integers as `%u` (so `~0` reads 4294967295), strings quoted (`RmMsg: ""`); one
parameter prints under another name (`NVreg_RestrictProfilingToAdminUsers` as
`RmProfilingAdminOnly`, nv-reg.h's `NV_DEFINE_PARAMS_TABLE_ENTRY_CUSTOM_NAME`).

Which build of the driver runs (NVIDIA's open kernel modules or the proprietary one, and its
version) is the first line of `/proc/driver/nvidia/version`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import NamedTuple

from . import numbers
from .modules import canonical

PARAMS = "/proc/driver/nvidia/params"
VERSION = "/proc/driver/nvidia/version"
PREFIX = "NVreg_"
MODULE = "nvidia"
# Where the GPU Operator's driver container says it loaded nvidia (its startup probe writes it
# once nvidia-smi answers); a host-installed driver leaves `host-driver-ready` instead. There,
# the driver reads its parameters from the operator's ConfigMap, never the host's modprobe.d.
DRIVER_CONTAINER_MARK = "/run/nvidia/validations/.driver-ctr-ready"

# The parameters of nvidia.ko as NVIDIA's open kernel modules 595.45.04 declare them
# (kernel-open/nvidia/nv-reg.h; tests/corpus/nvidia-params checks the list against it).
INTEGERS = (
    "ResmanDebugLevel",
    "RmLogonRC",
    "ModifyDeviceFiles",
    "DeviceFileUID",
    "DeviceFileGID",
    "DeviceFileMode",
    "InitializeSystemMemoryAllocations",
    "UsePageAttributeTable",
    "EnablePCIeGen3",
    "EnableMSI",
    "EnableStreamMemOPs",
    "RestrictProfilingToAdminUsers",
    "PreserveVideoMemoryAllocations",
    "EnableS0ixPowerManagement",
    "S0ixPowerManagementVideoMemoryThreshold",
    "DynamicPowerManagement",
    "DynamicPowerManagementVideoMemoryThreshold",
    "EnableGpuFirmware",
    "EnableGpuFirmwareLogs",
    "OpenRmEnableUnsupportedGpus",
    "EnableUserNUMAManagement",
    "MemoryPoolSize",
    "KMallocHeapMaxSize",
    "VMallocHeapMaxSize",
    "IgnoreMMIOCheck",
    "NvLinkDisable",
    "EnablePCIERelaxedOrderingMode",
    "RegisterPCIDriver",
    "RegisterPlatformDeviceDriver",
    "EnableResizableBar",
    "EnableDbgBreakpoint",
    "TegraGpuPgMask",
    "EnableNonblockingOpen",
    "ExcludeAllGpus",
    "GpuInitOnProbe",
    "DmaRemapPeerMmio",
    "RmNvlinkBandwidthLinkCount",
    "ImexChannelCount",
    "CreateImexChannel0",
    "GrdmaPciTopoCheckOverride",
    "EnableSystemMemoryPools",
    "UseKernelSuspendNotifiers",
)
STRINGS = (
    "CoherentGPUMemoryMode",
    "RegistryDwords",
    "RegistryDwordsPerDevice",
    "RmMsg",
    "GpuBlacklist",
    "TemporaryFilePath",
    "ExcludedGpus",
    "RmNvlinkBandwidth",
)
KNOWN = frozenset(PREFIX + name for name in INTEGERS + STRINGS)
# The parameter (less NVreg_) -> the name the proc file prints it under, where they differ.
PROC_NAMES = {"RestrictProfilingToAdminUsers": "RmProfilingAdminOnly"}


def driver_param(module: str, param: str) -> bool:
    """Whether `param` of `module` is one of the driver's NVreg_ parameters (read from the proc
    file, set for the next load), not a parameter /sys/module shows."""
    return canonical(module) == MODULE and param.startswith(PREFIX)


def proc_name(param: str) -> str:
    """`NVreg_EnableGpuFirmware` -> `EnableGpuFirmware`, as the proc file prints it."""
    name = param.removeprefix(PREFIX)
    return PROC_NAMES.get(name, name)


def parse(text: str | None) -> dict[str, str] | None:
    """The proc file's `Name: value` lines, strings unquoted; None when there is no file (the
    driver is not loaded)."""
    if text is None:
        return None
    found = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip():
            found[name.strip()] = _unquoted(value.strip())
    return found


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def normalize(param: str, value: str) -> str:
    """`value` given to `param` as the proc file prints it back: an integer parameter as the
    unsigned 32-bit decimal `%u` prints (`-1` and `0xffffffff` read 4294967295), a string
    parameter as given, without the quotes a modprobe.d line may put around it."""
    value = _unquoted(value.strip())
    number = numbers.kernel_integer(value)  # kstrtoint's base 0
    if param.removeprefix(PREFIX) in STRINGS or number is None:
        return value
    return str(number % 2**32)


def nearest(param: str) -> str | None:
    """The known parameter `param` was most likely meant to be, if any is close."""
    found = difflib.get_close_matches(param, sorted(KNOWN), n=1, cutoff=0.6)
    return found[0] if found else None


def running(params: Mapping[str, str] | None, param: str) -> str | None:
    """What the running driver uses for `param`; None when the driver is not loaded or does not
    print it."""
    return None if params is None else params.get(proc_name(param))


# `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build ...`, or
# the proprietary module's `NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  ...`.
_NVRM = re.compile(
    r"NVRM version: (?P<id>.*?Kernel Module(?: for \S+)?)\s+(?P<version>\d+(?:\.\d+)*)\s"
)


class Build(NamedTuple):
    """The running nvidia.ko: NVIDIA's open kernel modules or not, and its version."""

    open: bool
    version: tuple[int, ...]  # (565, 57, 1); Jetson's L4T numbers its own way (35, 3, 1)

    @property
    def text(self) -> str:
        return ".".join(str(n) for n in self.version)


def build(text: str | None) -> Build | None:
    """The build /proc/driver/nvidia/version names; None without the file or a line it knows."""
    match = _NVRM.match(text or "")
    if match is None:
        return None
    parts = [numbers.unsigned(n) for n in match["version"].split(".")]
    if None in parts:
        return None
    return Build("Open Kernel Module" in match["id"], tuple(p for p in parts if p is not None))
