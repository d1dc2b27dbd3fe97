"""Small snapshot hosts built in a test, in the kernel's formats, for fast apply properties.

The example hosts have 2000 files; a property that builds hundreds of hosts needs a few dozen.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from conftest import write

from reconciler.core.files import CommandOutput
from reconciler.facts import nvidia_smi, pcie
from reconciler.hosts import recorded

CPUS = "sys/devices/system/cpu"
MODULE_LINE = "{} 16384 0 - Live 0x0000000000000000\n"
THP = "sys/kernel/mm/transparent_hugepage/enabled"
THP_OPTIONS = ("always", "madvise", "never")
GOVERNORS = ("performance", "schedutil", "powersave")


@dataclass
class SmallHost:
    sysctls: dict[str, str] = field(default_factory=dict)  # "vm.swappiness": "60"
    thp: str = "always"
    governors: list[str] = field(default_factory=lambda: ["schedutil"])
    c2_disabled: list[bool] = field(default_factory=lambda: [False])
    modules: list[str] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)  # MaxReadReq of each GPU
    etc: dict[str, str] = field(default_factory=dict)  # extra files, e.g. existing sysctl.d
    # What `nvidia-smi --query-gpu` prints (facts.nvidia_smi.QUERY), recorded as a snapshot
    # records it; None: no nvidia-smi.
    nvidia_smi: str | None = None


# The query's header as nvidia-smi prints it, units in brackets.
GPU_HEADER = (
    "pci.bus_id, persistence_mode, power.limit [W], power.default_limit [W], "
    "power.min_limit [W], power.max_limit [W], compute_mode, ecc.mode.current, ecc.mode.pending\n"
)


def gpu_line(bus_id: str, persistence: str = "Disabled", limit: str = "600.00 W") -> str:
    """One GPU of the query, shaped as the RTX PRO 6000 Blackwell answers it (600 W at most)."""
    return (
        f"{bus_id}, {persistence}, {limit}, 600.00 W, 150.00 W, 600.00 W, Default, "
        "Enabled, Enabled\n"
    )


CLOCKS_HEADER = (
    "pci.bus_id, clocks.applications.memory [MHz], clocks.applications.graphics [MHz], "
    "clocks.default_applications.memory [MHz], clocks.default_applications.graphics [MHz]\n"
)


def clocks_line(bus_id: str, memory: int = 877, graphics: int = 1312) -> str:
    """One GPU of the application clocks query whose defaults are 877,1312 MHz (a V100's), now
    at `memory`,`graphics`; `memory` 0: the driver answers them deprecated (since 590)."""
    if memory == 0:
        return f"{bus_id}" + ", [Requested functionality has been deprecated]" * 4 + "\n"
    return f"{bus_id}, {memory} MHz, {graphics} MHz, 877 MHz, 1312 MHz\n"


def config_space(mrrs: int, other_bits: int = 0x2810) -> bytes:
    """256 bytes: header with a capability list holding only PCI Express at 0x40."""
    data = bytearray(256)
    struct.pack_into("<HH", data, 0, 0x10DE, 0x2BB5)
    struct.pack_into("<H", data, pcie.STATUS, pcie.STATUS_CAP_LIST)
    data[0x09:0x0C] = bytes([0x00, 0x02, 0x03])
    data[pcie.CAP_POINTER] = 0x40
    data[0x40], data[0x41] = pcie.CAP_ID_EXP, 0
    control = (other_bits & ~pcie.MRRS_MASK) | (pcie.mrrs_field(mrrs) << pcie.MRRS_SHIFT)
    struct.pack_into("<H", data, 0x40 + pcie.DEVCTL, control)
    struct.pack_into("<I", data, 0x40 + pcie.LNKCAP, 0x15 | (16 << 4))
    struct.pack_into("<H", data, 0x40 + pcie.LNKSTA, 0x5 | (16 << 4))
    return bytes(data)


def sysctl_path(key: str) -> str:
    return "proc/sys/" + key.replace(".", "/")


def sysctls_of(source: Path, keys: Iterable[str]) -> dict[str, str]:
    """What the snapshot `source` (an example host) has for the sysctls `keys`: a small host
    with them starts where that host does."""
    return {key: (source / sysctl_path(key)).read_text().strip() for key in keys}


def persisted(sysctls: dict[str, str], name: str = "small") -> dict[str, str]:
    """/etc/sysctl.d/90-tune.conf as tune writes it for the profile `name` of `sysctls` (in
    their order), for SmallHost.etc: a small host with it and them is in sync, boot included."""
    lines = "".join(f"{key} = {value}\n" for key, value in sysctls.items())
    header = f"# Written by tune for profile {name}. tune owns this file: edits are overwritten.\n"
    return {"etc/sysctl.d/90-tune.conf": header + lines}


def kernel_value(value: str) -> str:
    words = value.split()
    return ("\t".join(words) if all(w.isdigit() for w in words) else value) + "\n"


def build(root: Path, host: SmallHost) -> Path:
    files: dict[str, str | bytes] = {
        "proc/sys/kernel/hostname": "small\n",
        "proc/sys/kernel/osrelease": "6.14.8-2-pve\n",
        "proc/sys/kernel/random/boot_id": "0d9b5f7c-1111-2222-3333-444455556666\n",
        THP: " ".join(f"[{o}]" if o == host.thp else o for o in THP_OPTIONS) + "\n",
        "proc/modules": "".join(MODULE_LINE.format(m) for m in host.modules),
    }
    for key, value in host.sysctls.items():
        files[sysctl_path(key)] = kernel_value(value)
    for cpu, governor in enumerate(host.governors):
        base = f"{CPUS}/cpu{cpu}"
        files[f"{base}/cpufreq/scaling_governor"] = governor + "\n"
        for index, name in enumerate(("POLL", "C1", "C2")):
            files[f"{base}/cpuidle/state{index}/name"] = name + "\n"
            disabled = name == "C2" and host.c2_disabled[cpu % len(host.c2_disabled)]
            files[f"{base}/cpuidle/state{index}/disable"] = "1\n" if disabled else "0\n"
    for index, mrrs in enumerate(host.gpus):
        base = f"sys/bus/pci/devices/0000:{index + 1:02x}:00.0"
        files[f"{base}/vendor"] = "0x10de\n"
        files[f"{base}/device"] = "0x2bb5\n"
        files[f"{base}/class"] = "0x030200\n"
        files[f"{base}/config"] = config_space(mrrs)
    if host.nvidia_smi is not None:
        answer = CommandOutput(0, host.nvidia_smi.encode())
        for path, data in recorded.record(nvidia_smi.QUERY, answer).items():
            files[path.lstrip("/")] = data
    files.update(host.etc)
    for rel, content in files.items():
        write(root, rel, content)
    return root


def write_profile(path: Path, data: dict[str, object]) -> Path:
    """JSON is YAML: a profile from plain data."""
    path.write_text(json.dumps({"name": "small", **data}, indent=1))
    return path


def tree(root: Path) -> dict[str, bytes]:
    """Every file of the host, except tune's own state (journal, lock, stored profile).

    /proc/modules compares as its set of lines: the kernel lists modules newest first, so a
    module unloaded and loaded again moves to the top on any host; which modules are loaded,
    and how, is what a rollback restores.
    """
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or rel.startswith(("var/lib/tune/", "run/tune/")):
            continue
        data = path.read_bytes()
        if rel == "proc/modules":
            data = b"".join(sorted(data.splitlines(keepends=True)))
        out[rel] = data
    return out


# tune's own state on a host: the journal stays after a rollback, for `tune history`, and the
# directories that hold it stay too (a host without /var or /run gets them from the first run).
STATE_PREFIXES = ("var/lib/tune/", "run/tune/")
STATE_DIRECTORIES = frozenset({"var", "var/lib", "var/lib/tune", "run", "run/tune"})


def listing(top: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry below `top` with its mode and, for a file, its bytes: what must not move."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for base, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(base, name)
            info = path.lstat()
            data = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
            out[str(path.relative_to(top))] = (info.st_mode, data)
    return out


def whole_tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """The host's whole tree, directories, links and modes included, but tune's own state:
    what an apply and its rollback must leave as it was."""
    return {
        p: entry
        for p, entry in listing(root).items()
        if not p.startswith(STATE_PREFIXES)
        and not (p in STATE_DIRECTORIES and stat.S_ISDIR(entry[0]))
    }
