"""One specification of every primitive, as data: a small host tree, one primitive (write an
attribute, replace or delete a file, run an argv, read a probe), and what it must leave and
say. Each case runs against both executors of primitives: the Python one (`SnapshotHost`
and `hosts/emulate.py`, through `apply.python_engine.perform` and `read`) and the sh one
(`apply/lib.sh` as the sh engine renders it, run with `TUNE_ROOT` at the snapshot)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import ACS_CASE, PROJECT, write
from conftest import config_space as pcie_config
from lab import lab_env
from small_host import (
    CLOCKS_HEADER,
    GPU_HEADER,
    clocks_line,
    config_space,
    gpu_line,
    whole_tree,
)

from reconciler.apply.python_engine import perform, read
from reconciler.apply.sh_script import LIBRARY, _probe_args, op_call
from reconciler.core.errors import HostError, Refused
from reconciler.core.quoting import quoted
from reconciler.facts import nvidia_smi
from reconciler.hosts import recorded
from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.emulate import LISTED, REFUSES
from reconciler.steps.ops import Command, DeleteFile, Op, Probe, PutFile, Read, SetAttr, Step

Primitive = Op | Probe


@dataclass(frozen=True)
class Said:
    """What a primitive answered: "ok" with a command's output or a reading ("absent" for
    none), "refused" (the kernel rejected the value: an optional knob is skipped), or
    "failed", with the message."""

    outcome: str
    text: str = ""


@dataclass(frozen=True)
class Case:
    name: str
    primitive: Primitive
    said: Said
    files: dict[str, str | bytes] = field(default_factory=dict)
    after: dict[str, str | bytes | None] = field(default_factory=dict)  # None: no such file
    modes: dict[str, int] = field(default_factory=dict)  # files' permission bits before


THP = "/sys/kernel/mm/transparent_hugepage/enabled"
BUS, OTHER = "00000000:17:00.0", "00000000:3D:00.0"
SMI_DIR = recorded.where(nvidia_smi.QUERY)
SMI_OUT = f"{SMI_DIR}/stdout"
SMI_OK: dict[str, str | bytes] = {f"{SMI_DIR}/status": "0\n"}
SMI: dict[str, str | bytes] = {SMI_OUT: GPU_HEADER + gpu_line(BUS) + gpu_line(OTHER), **SMI_OK}
CLOCKS_DIR = recorded.where(nvidia_smi.CLOCKS_QUERY)
CLOCKS_OUT = f"{CLOCKS_DIR}/stdout"
CLOCKS: dict[str, str | bytes] = {
    CLOCKS_OUT: CLOCKS_HEADER + clocks_line(BUS) + clocks_line(OTHER, 877, 1380),
    f"{CLOCKS_DIR}/status": "0\n",
}
RMEM = "/proc/sys/net/ipv4/tcp_rmem"
WATCHDOG = "/proc/sys/kernel/nmi_watchdog"
MODULES = "/proc/modules"
AFFINITY = "/proc/irq/120/smp_affinity_list"
POSSIBLE = "/sys/devices/system/cpu/possible"
GPU = "/sys/bus/pci/devices/0000:01:00.0/config"
# Root port 00:07.0 of pciutils' tree-asus-p6t6 dump (a real X58), its ACS capability at 0x150,
# control at 0x156 set as Linux sets it with the IOMMU on.
PORT = "/sys/bus/pci/devices/0000:00:07.0/config"
PORT_CONFIG = (ACS_CASE / "host" / PORT.lstrip("/")).read_bytes()
RELEASE = {"/proc/sys/kernel/osrelease": "6.8.0\n"}
# As Debian's kernel packages list them (tests/corpus/kmod/modules.builtin).
BUILTIN = {
    "/lib/modules/6.8.0/modules.builtin": "kernel/net/unix/unix.ko\n"
    "kernel/drivers/nvme/host/nvme-core.ko\n"
}
ENTRY_A = "title A\nlinux /vmlinuz\noptions root=/dev/sda1 ro quiet nomodeset\n"
# No final newline, a duplicate parameter, `-` for `_`, and a second `options` line.
ENTRY_B = "title B\noptions  quiet processor.max-cstate=3 x processor.max_cstate=5\noptions y"
LXC = (
    "arch: amd64\n# lxc.mount.entry: /dev/nvidia9 dev/nvidia9 none bind,optional,create=file\n"
    "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
    "lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
    "lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps/x none bind,optional,create=dir\n"
    "lxc.mount.entry: /dev/absent dev/absent none bind,optional,create=file\n"
    "[snapshot1]\nlxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n"
)
# The same as plain LXC reads it: no sections, `key = value`, blanks anywhere around `=`, a
# Proxmox key (`arch:`) skipped, and an fstab entry with or without its dump and pass fields.
PLAIN = (
    "arch: amd64\n# lxc.mount.entry = /dev/nvidia9 dev/nvidia9 none bind,optional,create=file\n"
    "\tlxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file 0 0\n"
    "lxc.mount.entry=/dev/nvidia-uvm  dev/nvidia-uvm\tnone bind,optional,create=file\n"
    "lxc.mount.entry = '/dev/nvidia-caps dev/nvidia-caps/x none bind,optional,create=dir'\n"
    "lxc.mount.entry = /dev/absent dev/absent none bind,optional,create=file\n"
)
# RHEL 8: entries use $kernelopts from the GRUB environment block (tests/corpus/grub/rhel8).
RHEL8 = PROJECT / "tests/corpus/grub/rhel8"
ENTRY_EL8 = (RHEL8 / "loader-entry.conf").read_text()
# The block as a host has it: padded with `#` to its end (the capture ends in a line break,
# where grub2-editenv finds no free space).
GRUBENV = (RHEL8 / "grubenv").read_text().rstrip("#\n") + "\n"
GRUBENV += "#" * (1024 - len(GRUBENV))
# What the real grubby (tests/corpus/grubby/grubby-bls) leaves, as it did on these files: every
# line that starts with `options` gets the options of all of them, edited.
ENTRY_B_SET = "options quiet processor.max-cstate=3 x y processor.max_cstate=1\n"
ENTRY_B_SET = "title B\n" + ENTRY_B_SET + ENTRY_B_SET.rstrip("\n")
ENTRY_B_UNQUIET = "options processor.max-cstate=3 x processor.max_cstate=5 y\n"
ENTRY_B_UNQUIET = "title B\n" + ENTRY_B_UNQUIET + ENTRY_B_UNQUIET.rstrip("\n")
NODES = {"/dev/nvidia0": "", "/dev/nvidia1": "", "/dev/nvidia-uvm": "", "/dev/nvidia-caps/x": ""}
IN_CONTAINER = (
    "console\nfull\nnull\nnvidia-uvm\nnvidia0\nptmx\npts\nrandom\nshm\ntty\nurandom\nzero"
)

CASES = [
    # Writing an attribute: the kernel's normalisation and refusals.
    Case(
        "choice",
        SetAttr(THP, "never"),
        Said("ok"),
        {THP: "always [madvise] never\n"},
        {THP: "always madvise [never]\n"},
    ),
    Case(
        "vector",
        SetAttr(RMEM, " 4096 87380  0x1000 "),
        Said("ok"),
        {RMEM: "4096\t131072\t6291456\n"},
        {RMEM: "4096\t87380\t4096\n"},
    ),
    Case(
        "leading zeros",
        SetAttr("/proc/sys/vm/swappiness", "010"),
        Said("ok"),
        {"/proc/sys/vm/swappiness": "60\n"},
        {"/proc/sys/vm/swappiness": "10\n"},
    ),
    Case(
        "text",
        SetAttr("/proc/sys/net/ipv4/tcp_congestion_control", " bbr "),
        Said("ok"),
        {"/proc/sys/net/ipv4/tcp_congestion_control": "cubic\n"},
        {"/proc/sys/net/ipv4/tcp_congestion_control": "bbr\n"},
    ),
    Case(
        "no such choice",
        SetAttr(THP, "sometimes"),
        Said("refused", f"{THP}: the kernel refused 'sometimes' (Invalid argument)."),
        {THP: "always [madvise] never\n"},
        {THP: "always [madvise] never\n"},
    ),
    Case(
        "refused text is shown as Python shows it",
        SetAttr(THP, "it's"),
        Said("refused", f"""{THP}: the kernel refused "it's" (Invalid argument)."""),
        {THP: "always [madvise] never\n"},
        {THP: "always [madvise] never\n"},
    ),
    Case(
        "refuses ENOTSUPP",
        SetAttr(WATCHDOG, "0"),
        Said("refused", f"{WATCHDOG}: the kernel refused '0' (Unknown error 524)."),
        {WATCHDOG: "1\n", REFUSES + WATCHDOG: "524\n"},
        {WATCHDOG: "1\n"},
    ),
    Case(
        "refuses EBUSY",
        SetAttr(WATCHDOG, "0"),
        Said("failed", f"{WATCHDOG}: the kernel refused '0' (Device or resource busy)."),
        {WATCHDOG: "1\n", REFUSES + WATCHDOG: "16"},
        {WATCHDOG: "1\n"},
    ),
    # An IRQ's affinity: the kernel prints the CPUs back in ranges, refuses a malformed list
    # (EINVAL) or a CPU past the possible ones (ERANGE), and a managed IRQ with EIO, which is
    # a refusal (the driver placed it), unlike EIO elsewhere.
    Case(
        "irq affinity in ranges",
        SetAttr(AFFINITY, " 8,3,0-2,1 \n"),
        Said("ok"),
        {AFFINITY: "0-127\n", POSSIBLE: "0-127\n"},
        {AFFINITY: "0-3,8\n"},
    ),
    Case(
        "irq affinity past the possible CPUs",
        SetAttr(AFFINITY, "0-3,128"),
        Said(
            "failed", f"{AFFINITY}: the kernel refused '0-3,128' (Numerical result out of range)."
        ),
        {AFFINITY: "0-127\n", POSSIBLE: "0-127\n"},
        {AFFINITY: "0-127\n"},
    ),
    Case(
        "irq affinity backwards",
        SetAttr(AFFINITY, "3-0"),
        Said("refused", f"{AFFINITY}: the kernel refused '3-0' (Invalid argument)."),
        {AFFINITY: "0-127\n", POSSIBLE: "0-127\n"},
        {AFFINITY: "0-127\n"},
    ),
    Case(
        "managed irq refuses with EIO",
        SetAttr(AFFINITY, "0"),
        Said("refused", f"{AFFINITY}: the kernel refused '0' (Input/output error)."),
        {AFFINITY: "0-127\n", REFUSES + AFFINITY: "5\n"},
        {AFFINITY: "0-127\n"},
    ),
    Case(
        "EIO of a file beside an irq's affinity fails",
        SetAttr(AFFINITY + "x", "0"),
        Said("failed", f"{AFFINITY}x: the kernel refused '0' (Input/output error)."),
        {AFFINITY + "x": "0-127\n", REFUSES + AFFINITY + "x": "5\n"},
        {AFFINITY + "x": "0-127\n"},
    ),
    Case(
        "read-only",
        SetAttr(WATCHDOG, "0"),
        Said("failed", f"{WATCHDOG}: cannot open for writing (Permission denied)."),
        {WATCHDOG: "1\n"},
        {WATCHDOG: "1\n"},
        {WATCHDOG: 0o444},
    ),
    Case(
        "no such attribute",
        SetAttr("/proc/sys/vm/nosuch", "1"),
        Said("failed", "/proc/sys/vm/nosuch: cannot open for writing (No such file or directory)."),
        after={"/proc/sys/vm/nosuch": None},
    ),
    # Replacing and deleting a file.
    Case(
        "new file, new directories",
        PutFile("/etc/tune/a/b.conf", b"x = 1\n\0\xff", 0o600),
        Said("ok"),
        {"/etc/hostname": "h\n"},
        {"/etc/tune/a/b.conf": b"x = 1\n\0\xff"},
    ),
    Case(
        "replace",
        PutFile("/etc/x.conf", b"new\n"),
        Said("ok"),
        {"/etc/x.conf": "old\n"},
        {"/etc/x.conf": "new\n"},
        {"/etc/x.conf": 0o600},
    ),
    Case(
        "delete",
        DeleteFile("/etc/x.conf"),
        Said("ok"),
        {"/etc/x.conf": "old\n"},
        {"/etc/x.conf": None},
    ),
    Case(
        "delete absent",
        DeleteFile("/etc/x.conf"),
        Said("ok"),
        {"/etc/y": ""},
        {"/etc/x.conf": None},
    ),
    # Running an argv: every command the snapshot emulation knows.
    Case(
        "modprobe",
        Command(("modprobe", "dummy", "numdummies=0x2", "x=a b")),
        Said("ok"),
        {MODULES: "veth 16384 0 - Live 0x0\n", **RELEASE},
        {
            MODULES: "dummy 16384 0 - Live 0x0000000000000000\nveth 16384 0 - Live 0x0\n",
            "/sys/module/dummy/parameters/numdummies": "2\n",
            "/sys/module/dummy/parameters/x": "a b\n",
        },
    ),
    Case(
        "modprobe -r",
        Command(("modprobe", "-r", "veth")),
        Said("ok"),
        {
            MODULES: "veth 16384 0 - Live 0x0\nbond 1 0 - Live 0x0\n",
            "/sys/module/veth/refcnt": "0\n",
            **RELEASE,
        },
        {
            MODULES: "bond 1 0 - Live 0x0\n",
            "/sys/module/veth/refcnt": None,
            "/sys/module/veth": None,
        },
    ),
    Case(
        "modprobe -r in use",
        Command(("modprobe", "-r", "veth")),
        Said("failed", "`modprobe -r veth` failed: modprobe: FATAL: Module veth is in use."),
        {MODULES: "veth 16384 2 - Live 0x0\n", **RELEASE},
    ),
    Case(
        "modprobe unknown",
        Command(("modprobe", "--dry-run", "nope")),
        Said(
            "failed",
            "`modprobe --dry-run nope` failed: modprobe: FATAL: Module nope not "
            "found in directory /lib/modules/6.8.0",
        ),
        {MODULES: "", "/lib/modules/6.8.0/modules.dep": "kernel/a/dummy.ko.zst:\n", **RELEASE},
    ),
    Case(
        "modprobe of a module compiled in: success, nothing loaded",
        Command(("modprobe", "nvme-core")),
        Said("ok"),
        {MODULES: "veth 16384 0 - Live 0x0\n", **BUILTIN, **RELEASE},
        {MODULES: "veth 16384 0 - Live 0x0\n"},
    ),
    Case(
        "modprobe --dry-run of a module compiled in",
        Command(("modprobe", "--dry-run", "unix")),
        Said("ok"),
        {MODULES: "", **BUILTIN, **RELEASE},
    ),
    Case(
        "modprobe -r of a module compiled in",
        Command(("modprobe", "-r", "unix")),
        Said("failed", "`modprobe -r unix` failed: modprobe: FATAL: Module unix is builtin."),
        {MODULES: "", **BUILTIN, **RELEASE},
    ),
    Case(
        "modprobe -r of a module not loaded",
        Command(("modprobe", "-r", "veth")),
        Said("failed", "`modprobe -r veth` failed: modprobe: FATAL: Module veth is not in kernel."),
        {MODULES: "bond 1 0 - Live 0x0\n", **RELEASE},
    ),
    Case(
        "modprobe unknown names it as typed",
        Command(("modprobe", "no-such")),
        Said(
            "failed",
            "`modprobe no-such` failed: modprobe: FATAL: Module no-such not "
            "found in directory /lib/modules/6.8.0",
        ),
        {MODULES: "", **BUILTIN, "/lib/modules/6.8.0/modules.dep": "kernel/a/dummy.ko.zst:\n"}
        | RELEASE,
    ),
    Case(
        "setpci read",
        Command(("setpci", "-s", "0000:01:00.0", "CAP_EXP+8.w")),
        Said("ok", "0810"),
        {GPU: config_space(128)},
    ),
    Case(
        "setpci masked write",
        Command(("setpci", "-s", "0000:01:00.0", "CAP_EXP+8.w=5000:7000")),
        Said("ok"),
        {GPU: config_space(512, other_bits=0x0C3F)},
        {GPU: config_space(4096, other_bits=0x0C3F)},
    ),
    Case(
        "setpci no express capability",
        Command(("setpci", "-s", "0000:01:00.0", "CAP_EXP+8.w=5000:7000")),
        Said(
            "failed",
            "`setpci -s 0000:01:00.0 CAP_EXP+8.w=5000:7000` failed: setpci: "
            "Capability 0010 not found on 0000:01:00.0.",
        ),
        {GPU: pcie_config(express_at=None)},
    ),
    Case(
        "setpci no device",
        Command(("setpci", "-s", "0000:09:00.0", "CAP_EXP+8.w")),
        Said(
            "failed",
            "`setpci -s 0000:09:00.0 CAP_EXP+8.w` failed: setpci: Warning: No "
            "devices selected for `0000:09:00.0'.",
        ),
    ),
    Case(
        "setpci read of the ACS control",
        Command(("setpci", "-s", "0000:00:07.0", "ECAP_ACS+6.w")),
        Said("ok", "001d"),
        {PORT: PORT_CONFIG},
    ),
    Case(
        "setpci masked write of the ACS control keeps its other bits",
        Command(("setpci", "-s", "0000:00:07.0", "ECAP_ACS+6.w=0000:002c")),
        Said("ok"),
        {PORT: PORT_CONFIG},
        {PORT: PORT_CONFIG[:0x156] + b"\x11\x00" + PORT_CONFIG[0x158:]},
    ),
    Case(
        "setpci ECAP_ACS where the function has no ACS",
        Command(("setpci", "-s", "0000:01:00.0", "ECAP_ACS+6.w=0000:002c")),
        Said(
            "failed",
            "`setpci -s 0000:01:00.0 ECAP_ACS+6.w=0000:002c` failed: setpci: 0000:01:00.0: "
            "Instance #0 of Extended capability 000d not found - there are no capabilities "
            "with that id.",
        ),
        {GPU: pcie_config()},
    ),
    Case(
        "setpci ECAP_ACS where only 256 bytes of config are readable",
        Command(("setpci", "-s", "0000:00:07.0", "ECAP_ACS+6.w")),
        Said(
            "failed",
            "`setpci -s 0000:00:07.0 ECAP_ACS+6.w` failed: setpci: 0000:00:07.0: "
            "Instance #0 of Extended capability 000d not found - there are no capabilities "
            "with that id.",
        ),
        {PORT: PORT_CONFIG[:256]},
    ),
    Case(
        "grubby --args",
        Command(("grubby", "--update-kernel=ALL", "--args=processor.max_cstate=1")),
        Said("ok"),
        {
            "/boot/loader/entries/a.conf": ENTRY_A,
            "/boot/loader/entries/b.conf": ENTRY_B,
            "/boot/loader/entries/c.txt": ENTRY_A,
        },
        {
            "/boot/loader/entries/a.conf": ENTRY_A.replace(
                "nomodeset", "nomodeset processor.max_cstate=1"
            ),
            "/boot/loader/entries/b.conf": ENTRY_B_SET,
            "/boot/loader/entries/c.txt": ENTRY_A,
        },
    ),
    Case(
        "grubby --remove-args",
        Command(("grubby", "--update-kernel=ALL", "--remove-args=quiet")),
        Said("ok"),
        {"/boot/loader/entries/a.conf": ENTRY_A, "/boot/loader/entries/b.conf": ENTRY_B},
        {
            "/boot/loader/entries/a.conf": ENTRY_A.replace(" quiet", ""),
            "/boot/loader/entries/b.conf": ENTRY_B_UNQUIET,
        },
    ),
    Case(
        "grubby --args on RHEL 8: kernelopts in grubenv, not the entry",
        Command(("grubby", "--update-kernel=ALL", "--args=processor.max_cstate=1")),
        Said("ok"),
        {
            "/boot/loader/entries/el8.conf": ENTRY_EL8,
            "/boot/loader/entries/b.conf": ENTRY_B,
            "/boot/grub2/grubenv": GRUBENV,
        },
        {
            "/boot/loader/entries/el8.conf": ENTRY_EL8,
            "/boot/loader/entries/b.conf": ENTRY_B_SET,
            "/boot/grub2/grubenv": GRUBENV.replace("noapic\n", "noapic processor.max_cstate=1\n")[
                :1024
            ],
        },
    ),
    Case(
        "grubby --remove-args on RHEL 8",
        Command(("grubby", "--update-kernel=ALL", "--remove-args=noapic")),
        Said("ok"),
        {"/boot/loader/entries/el8.conf": ENTRY_EL8, "/boot/grub2/grubenv": GRUBENV},
        {
            "/boot/loader/entries/el8.conf": ENTRY_EL8,
            "/boot/grub2/grubenv": GRUBENV.replace(" noapic\n", "\n") + "#" * 7,
        },
    ),
    Case(
        "grubby without entries", Command(("grubby", "--update-kernel=ALL", "--args=x")), Said("ok")
    ),
    Case(
        "grubby other options",
        Command(("grubby", "--info=ALL", "--args=x")),
        Said(
            "failed",
            "`grubby --info=ALL --args=x` failed: grubby: unsupported arguments "
            "--info=ALL --args=x",
        ),
    ),
    Case(
        "pct reboot", Command(("pct", "reboot", "101")), Said("ok"), {"/etc/pve/lxc/101.conf": LXC}
    ),
    Case(
        "pct exec ls /dev",
        Command(("pct", "exec", "101", "--", "ls", "/dev")),
        Said("ok", IN_CONTAINER),
        {"/etc/pve/lxc/101.conf": LXC, **NODES},
    ),
    Case(
        "lxc-attach ls /dev",
        Command(("lxc-attach", "-n", "c1", "-P", "/srv/lxc", "--", "ls", "/dev")),
        Said("ok", IN_CONTAINER),
        {"/srv/lxc/c1/config": PLAIN, **NODES},
    ),
    Case(
        "lxc-stop",
        Command(("lxc-stop", "-n", "c1", "-P", "/srv/lxc")),
        Said("ok"),
        {"/srv/lxc/c1/config": PLAIN},
    ),
    # LXC refuses a whole config for one line it cannot read (confile.c `parse_line`), and every
    # lxc-* tool loads the config first: Proxmox's `key: value`, an unknown key.
    Case(
        "lxc-start of a config in Proxmox's syntax",
        Command(("lxc-start", "-n", "c1", "-P", "/srv/lxc")),
        Said(
            "failed",
            "`lxc-start -n c1 -P /srv/lxc` failed: lxc-start: c1: Invalid configuration line: "
            "lxc.prlimit.memlock: unlimited",
        ),
        {"/srv/lxc/c1/config": PLAIN + "  lxc.prlimit.memlock: unlimited\n"},
    ),
    Case(
        "lxc-start of a Proxmox mount entry",
        Command(("lxc-start", "-n", "c1", "-P", "/srv/lxc")),
        Said(
            "failed",
            "`lxc-start -n c1 -P /srv/lxc` failed: lxc-start: c1: Unsupported config key "
            '"lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create"',
        ),
        {"/srv/lxc/c1/config": LXC},
    ),
    Case(
        "lxc-attach with a key LXC 3 dropped",
        Command(("lxc-attach", "-n", "c1", "-P", "/srv/lxc", "--", "ls", "/dev")),
        Said(
            "failed",
            "`lxc-attach -n c1 -P /srv/lxc -- ls /dev` failed: lxc-attach: c1: Unsupported "
            'config key "lxc.network.type"',
        ),
        {"/srv/lxc/c1/config": "lxc.arch = amd64\nlxc.network.type = veth\n"},
    ),
    Case(
        "pct without config",
        Command(("pct", "reboot", "102")),
        Said(
            "failed",
            "`pct reboot 102` failed: pct: configuration file "
            "'/etc/pve/lxc/102.conf' does not exist",
        ),
    ),
    Case(
        "lxc-attach other command",
        Command(("lxc-attach", "-n", "c1", "-P", "/srv/lxc", "--", "id")),
        Said(
            "failed",
            "`lxc-attach -n c1 -P /srv/lxc -- id` failed: lxc-attach: unsupported command id",
        ),
        {"/srv/lxc/c1/config": PLAIN},
    ),
    Case(
        "not installed",
        Command(("setpci", "-s", "0000:01:00.0", "CAP_EXP+8.w")),
        Said("failed", "`setpci -s 0000:01:00.0 CAP_EXP+8.w` failed: setpci: command not found"),
        {GPU: config_space(128), LISTED: "modprobe\ngrubby\n"},
    ),
    Case(
        "unknown command",
        Command(("reboot",)),
        Said("failed", "`reboot` failed: reboot: command not found"),
    ),
    # nvidia-smi, on the query a snapshot recorded (hosts/emulate.py `_nvidia_smi`).
    Case(
        "nvidia-smi sets a GPU's persistence",
        Command(("nvidia-smi", "-i", BUS, "-pm", "1")),
        Said("ok", f"Set persistence_mode to Enabled for GPU {BUS}."),
        SMI,
        {SMI_OUT: GPU_HEADER + gpu_line(BUS, "Enabled") + gpu_line(OTHER)},
    ),
    Case(
        "nvidia-smi sets a power limit",
        Command(("nvidia-smi", "-i", BUS, "-pl", "450")),
        Said("ok", f"Set power.limit to 450.00 W for GPU {BUS}."),
        SMI,
        {SMI_OUT: GPU_HEADER + gpu_line(BUS, limit="450.00 W") + gpu_line(OTHER)},
    ),
    Case(
        "nvidia-smi refuses a power limit past the GPU's",
        Command(("nvidia-smi", "-i", BUS, "-pl", "700")),
        Said("failed", f"`nvidia-smi -i {BUS} -pl 700` failed: Invalid value '700' for -pl."),
        SMI,
        {SMI_OUT: SMI[SMI_OUT]},
    ),
    Case(
        "nvidia-smi on a GPU the host does not have",
        Command(("nvidia-smi", "-i", "00000000:99:00.0", "-c", "DEFAULT")),
        Said(
            "failed",
            "`nvidia-smi -i 00000000:99:00.0 -c DEFAULT` failed: "
            "No devices were found matching 00000000:99:00.0",
        ),
        SMI,
    ),
    Case(
        "nvidia-smi on a setting the GPU lacks",
        Command(("nvidia-smi", "-i", BUS, "-e", "1")),
        Said(
            "failed",
            f"`nvidia-smi -i {BUS} -e 1` failed: "
            f"Setting ecc.mode.pending is not supported for GPU {BUS}.",
        ),
        {SMI_OUT: GPU_HEADER + gpu_line(BUS).replace("Enabled, Enabled", "[N/A], [N/A]"), **SMI_OK},
    ),
    Case(
        "nvidia-smi without a driver",
        Command(("nvidia-smi", "-i", BUS, "-pm", "1")),
        Said(
            "failed",
            f"`nvidia-smi -i {BUS} -pm 1` failed: "
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        ),
    ),
    Case(
        "nvidia-smi sets application clocks",
        Command(("nvidia-smi", "-i", BUS, "-ac", "877,1530")),
        Said(
            "ok",
            f"Set clocks.applications.memory to 877 MHz, clocks.applications.graphics to "
            f"1530 MHz for GPU {BUS}.",
        ),
        CLOCKS,
        {CLOCKS_OUT: CLOCKS_HEADER + clocks_line(BUS, 877, 1530) + clocks_line(OTHER, 877, 1380)},
    ),
    Case(
        "nvidia-smi resets application clocks to the defaults",
        Command(("nvidia-smi", "-i", OTHER, "-rac")),
        Said(
            "ok",
            f"Set clocks.applications.memory to 877 MHz, clocks.applications.graphics to "
            f"1312 MHz for GPU {OTHER}.",
        ),
        CLOCKS,
        {CLOCKS_OUT: CLOCKS_HEADER + clocks_line(BUS) + clocks_line(OTHER)},
    ),
    Case(
        "nvidia-smi refuses application clocks that are not a pair",
        Command(("nvidia-smi", "-i", BUS, "-ac", "877")),
        Said("failed", f"`nvidia-smi -i {BUS} -ac 877` failed: Invalid value '877' for -ac."),
        CLOCKS,
        {CLOCKS_OUT: CLOCKS[CLOCKS_OUT]},
    ),
    Case(
        "nvidia-smi on application clocks the driver deprecated",
        Command(("nvidia-smi", "-i", BUS, "-ac", "877,1530")),
        Said(
            "failed",
            f"`nvidia-smi -i {BUS} -ac 877,1530` failed: Setting clocks.applications.memory,"
            f"clocks.applications.graphics is not supported for GPU {BUS}.",
        ),
        {CLOCKS_OUT: CLOCKS_HEADER + clocks_line(BUS, 0), f"{CLOCKS_DIR}/status": "0\n"},
    ),
    Case(
        "gpu application clocks",
        Probe(OTHER, Read.GPU, nvidia_smi.APPLICATION_CLOCKS),
        Said("ok", "877,1380"),
        CLOCKS,
    ),
    Case(
        "gpu application clocks deprecated",
        Probe(BUS, Read.GPU, nvidia_smi.APPLICATION_CLOCKS),
        Said("ok", "absent"),
        {CLOCKS_OUT: CLOCKS_HEADER + clocks_line(BUS, 0), f"{CLOCKS_DIR}/status": "0\n"},
    ),
    Case("gpu power limit", Probe(BUS, Read.GPU, "power.limit"), Said("ok", "600"), SMI),
    Case(
        "gpu absent",
        Probe(OTHER.replace("3D", "99"), Read.GPU, "power.limit"),
        Said("ok", "absent"),
        SMI,
    ),
    Case(
        "gpu field bracketed",
        Probe(BUS, Read.GPU, "ecc.mode.pending"),
        Said("ok", "absent"),
        {SMI_OUT: GPU_HEADER + gpu_line(BUS).replace("Enabled, Enabled", "[N/A], [N/A]"), **SMI_OK},
    ),
    # The five readings.
    Case("text", Probe("/etc/x", Read.TEXT), Said("ok", "a\n\nb\n\n"), {"/etc/x": "a\n\nb\n\n"}),
    Case("text absent", Probe("/etc/x", Read.TEXT), Said("ok", "absent")),
    Case(
        "words",
        Probe(RMEM, Read.WORDS),
        Said("ok", "4096 87380 6291456"),
        {RMEM: " 4096\t87380\n 6291456\n"},
    ),
    Case(
        "choice", Probe(THP, Read.CHOICE), Said("ok", "madvise"), {THP: "always [madvise] never\n"}
    ),
    Case(
        "choice of none",
        Probe(THP, Read.CHOICE),
        Said("ok", "always never"),
        {THP: "always  never\n"},
    ),
    Case(
        "module loaded",
        Probe(MODULES, Read.MODULE, "veth"),
        Said("ok", "loaded"),
        {MODULES: "bond 1 0 - Live 0x0\nveth 16384 0 - Live 0x0\n"},
    ),
    Case(
        "module absent",
        Probe(MODULES, Read.MODULE, "vet"),
        Said("ok", "absent"),
        {MODULES: "veth 16384 0 - Live 0x0\n"},
    ),
    Case("mrrs", Probe(GPU, Read.MRRS, "72"), Said("ok", "4096"), {GPU: config_space(4096)}),
    Case(
        "mrrs short file",
        Probe(GPU, Read.MRRS, "72"),
        Said("ok", "absent"),
        {GPU: config_space(4096)[:73]},
    ),
    Case("bits", Probe(PORT, Read.BITS, "342:002c"), Said("ok", "000c"), {PORT: PORT_CONFIG}),
    Case(
        "bits of one flag",
        Probe(GPU, Read.BITS, "72:0010"),
        Said("ok", "0010"),
        {GPU: config_space(512)},
    ),
    Case(
        "bits short file",
        Probe(PORT, Read.BITS, "342:002c"),
        Said("ok", "absent"),
        {PORT: PORT_CONFIG[:343]},
    ),
]

STEP = Step("test:primitive", "test", "t", None, None, Probe("/x", Read.TEXT), None, None, (), ())


def python(root: Path, primitive: Primitive) -> Said:
    host = SnapshotHost(root)
    if isinstance(primitive, Probe):
        return Said("ok", read(host, primitive) or "absent")
    try:
        if isinstance(primitive, Command):
            done = host.run(primitive.argv)
            if done.returncode == 0:
                return Said("ok", done.stdout.rstrip("\n"))
        perform(host, STEP, primitive)
    except Refused as exc:
        return Said("refused", str(exc))
    except HostError as exc:
        return Said("failed", str(exc))
    return Said("ok")


def sh(root: Path, primitive: Primitive) -> Said:
    if isinstance(primitive, Probe):
        body = f"reading {_probe_args(primitive)} || printf absent\n"
    else:
        body = (
            f"ERR=; REFUSED=; out=\nif {op_call(primitive)}; then printf 'ok\\n%s' \"$out\"\n"
            'elif [ -n "$REFUSED" ]; then printf \'refused\\n%s\' "$ERR"\n'
            "else printf 'failed\\n%s' \"$ERR\"; fi\n"
        )
    env = {"PATH": "/usr/bin:/bin", **lab_env(root)}
    done = subprocess.run(["sh"], input=(LIBRARY + body).encode(), capture_output=True, env=env)
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    if isinstance(primitive, Probe):
        return Said("ok", text)
    outcome, _, said = text.partition("\n")
    return Said(outcome, said)


EXECUTORS = {"python": python, "sh": sh}


@pytest.mark.parametrize("executor", sorted(EXECUTORS))
@pytest.mark.parametrize(
    "case", CASES, ids=[f"{type(c.primitive).__name__}: {c.name}" for c in CASES]
)
def test_primitive(tmp_path: Path, case: Case, executor: str) -> None:
    root = tmp_path / "host"
    root.mkdir()
    for path, content in case.files.items():
        write(root, path, content)
    for path, mode in case.modes.items():
        (root / path.lstrip("/")).chmod(mode)
    before = whole_tree(root)
    said = EXECUTORS[executor](root, case.primitive)
    assert said == case.said
    after = whole_tree(root)
    for path, content in case.after.items():
        data = content.encode() if isinstance(content, str) else content
        assert after.get(path.lstrip("/"), (0, None))[1] == data, path
    if isinstance(case.primitive, PutFile):
        assert after[case.primitive.path.lstrip("/")][0] & 0o7777 == case.primitive.mode
    unchanged = {p for p in before if "/" + p not in case.after}
    assert {p: after.get(p) for p in unchanged} == {p: before[p] for p in unchanged}


def test_on_a_live_host_a_directory_not_made_yet_is_writable_by_the_one_above(
    tmp_path: Path,
) -> None:
    """Without TUNE_ROOT (a real target) `writable` asks about the nearest existing directory,
    as `DirectoryHost.writable` does: a first apply creates /var/lib/tune/runs, and refusing
    it as "not writable" stopped every first apply over SSH. Only a test (`-w`) runs here."""
    env = {k: v for k, v in os.environ.items() if k != "TUNE_ROOT"}
    script = LIBRARY + f"writable {quoted(str(tmp_path / 'var' / 'lib' / 'tune' / 'runs'))}\n"
    assert subprocess.run(["sh"], input=script.encode(), env=env).returncode == 0
