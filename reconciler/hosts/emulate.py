"""What the kernel and the tools would do to the files of a snapshot host.

This lives with the snapshot host, not in a test helper: `tune apply --root DIR` serves demos and
support cases as well as tests, and a snapshot must still read like a host after an apply. A
choice file keeps its `always [madvise] never` form, a vector sysctl comes back tab-separated,
a file without write permission refuses (whoever runs tune, root included), `modprobe` edits
`/proc/modules`, the masked `setpci` write edits the device's binary `config`, and a container
(`pct`, `lxc-*`) sees in its `/dev` what its config binds from the snapshot's. Otherwise the
next `tune plan` of that snapshot, and every read-back, would compare against files no kernel
prints. Faults (failed writes, clamped values, crashes) are the tests' business and live there,
except one a real kernel has: an attribute that refuses every write with an errno, as
`kernel.nmi_watchdog` does without perf counters. A snapshot says so with a file holding the
errno at `REFUSES` + the attribute's path (`/.tune-emulate/refuses/proc/sys/kernel/nmi_watchdog`
containing `524`), outside every path a profile reads; a snapshot that lacks a tool lists the
ones it has in `LISTED`, and one whose module cannot load holds modprobe's words in
`LOAD_FAILS`. The sh library (`reconciler/apply/lib.sh`) emulates the same, byte for byte, for
an apply through the sh engine with `TUNE_ROOT` set; `tests/engines` holds both to it.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import struct
from typing import TYPE_CHECKING

from ..errors import HostError
from ..facts import pcie
from ..facts.kernel import OSRELEASE
from ..facts.lxc_keys import KEYS
from ..facts.modules import MODULE_DIR, MODULES, builtin_modules, builtin_path, module_name
from ..facts.pci import DEVICES
from .base import ENOTSUPP, Completed, refusal
from .beneath import open_regular, write_all

if TYPE_CHECKING:
    from .directory import DirectoryHost

CONTAINER_TOOLS = ("pct", "lxc-stop", "lxc-start", "lxc-attach")
# LXC's key table as the sh emulation takes it: names, a prefix key with a final "*".
LXC_KEY_WORDS = " ".join(name + ("" if strict else "*") for name, strict in KEYS)
COMMANDS = ("modprobe", "setpci", "grubby", *CONTAINER_TOOLS)
REFUSES = "/.tune-emulate/refuses"
LISTED = "/.tune-emulate/commands"
# A module whose load fails (built against another kernel's or RDMA stack's symbols): a file
# named after it here holds what modprobe prints.
LOAD_FAILS = "/.tune-emulate/modprobe"
# The errnos a `REFUSES` marker is expected to hold: the refusing ones (EINVAL, EOPNOTSUPP,
# ENOTSUPP), and the transient failures a kernel attribute also gives.
ERRNOS = (
    errno.EPERM,
    errno.EIO,
    errno.ENXIO,
    errno.EAGAIN,
    errno.EACCES,
    errno.EBUSY,
    errno.ENODEV,
    errno.EINVAL,
    errno.ERANGE,
    errno.EOPNOTSUPP,
    ENOTSUPP,
)

_INT = re.compile(r"[+-]?(0x[0-9a-fA-F]+|\d+)")
_SETPCI = re.compile(
    r"(CAP_EXP|ECAP_ACS)\+([0-9a-fA-F]+)\.w(?:=([0-9a-fA-F]{1,4})(?::([0-9a-fA-F]{1,4}))?)?"
)


def _existing(host: DirectoryHost, path: str) -> str:
    local = host.local(path)
    while not os.path.lexists(local) and os.path.dirname(local) != local:
        local = os.path.dirname(local)
    return local


def commands(host: DirectoryHost) -> frozenset[str]:
    """What the snapshot has installed: the names listed one a line in `LISTED` when it holds
    that file (a host without `setpci`), else every command emulated here."""
    listed = _read(host, LISTED)
    return frozenset(COMMANDS) if listed is None else frozenset(listed.splitlines())


def writable(host: DirectoryHost, path: str) -> bool:
    """By the permission bits alone: root may write anything, but the kernel refuses a write to a
    0444 sysctl (or any sysctl in a read-only /proc/sys) even for root."""
    return bool(os.stat(_existing(host, path)).st_mode & 0o222)


def kernel_text(old: str, value: str) -> str:
    """What the kernel prints back after `value` is written to a file that printed `old`."""
    options = old.split()
    if any(o.startswith("[") and o.endswith("]") for o in options):
        names = [o.strip("[]") for o in options]
        if value.strip() not in names:
            raise ValueError(value)
        return " ".join(f"[{n}]" if n == value.strip() else n for n in names) + "\n"
    words = value.split()
    if words and all(_INT.fullmatch(w) for w in words):
        return "\t".join(str(int(w, 16) if "x" in w.lower() else int(w)) for w in words) + "\n"
    return value.strip() + "\n"


def set_attr(host: DirectoryHost, path: str, value: str) -> None:
    local = host.local(path)
    if not os.path.isfile(local):
        raise HostError(f"{path}: cannot open for writing (No such file or directory).")
    if not writable(host, path):
        raise HostError(f"{path}: cannot open for writing (Permission denied).")
    refuses = _read(host, REFUSES + path)
    if refuses is not None:
        raise refusal(path, value, int(refuses.strip()))
    old = (host.read_file(path) or b"").decode("utf-8", "replace")
    try:
        new = kernel_text(old, value)
    except ValueError:
        raise refusal(path, value, errno.EINVAL) from None
    _overwrite(local, new.encode())


def _overwrite(local: str, data: bytes, create: bool = False) -> None:
    """In place, keeping the file's mode, as a kernel attribute keeps its own. `local` is
    resolved in the snapshot (`DirectoryHost.local`): a link there now is not followed."""
    # Only a regular file: a FIFO or a device node the snapshot holds is refused, not opened.
    fd = open_regular(local, os.O_WRONLY | os.O_TRUNC | (os.O_CREAT if create else 0))
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def run(host: DirectoryHost, argv: list[str]) -> Completed:
    if argv[0] == "modprobe":
        return _modprobe(host, argv[1:])
    if argv[0] == "grubby":
        return _grubby(host, argv[1:])
    if argv[0] in CONTAINER_TOOLS:
        return _container(host, argv)
    return _setpci(host, argv[1:])


def _read(host: DirectoryHost, path: str) -> str | None:
    data = host.read_file(path)
    return None if data is None else data.decode("utf-8", "replace")


def _loadable(host: DirectoryHost, release: str, name: str) -> bool:
    """Listed in the snapshot's `modules.dep`; every module is, when the snapshot has none."""
    dep = _read(host, f"/lib/modules/{release}/modules.dep")
    if dep is None:
        return True
    return name in {module_name(line.split(":", 1)[0]) for line in dep.splitlines() if line.strip()}


def _modprobe(host: DirectoryHost, args: list[str]) -> Completed:
    """As kmod's modprobe (tools/modprobe.c): a module compiled in (modules.builtin) loads
    with success and nothing to do, and refuses removal."""
    remove = "-r" in args or "--remove" in args
    dry = "-n" in args or "--dry-run" in args
    words = [a for a in args if not a.startswith("-")]
    if not words:
        return Completed(1, "", "modprobe: ERROR: missing module name.")
    name, params = words[0].replace("-", "_"), words[1:]
    release = (_read(host, OSRELEASE) or "").strip()
    builtin = name in builtin_modules(_read(host, builtin_path(release)))
    if not builtin and not _loadable(host, release, name):
        return Completed(
            1,
            "",
            f"modprobe: FATAL: Module {words[0]} not found in directory /lib/modules/{release}",
        )
    if builtin:
        if remove:
            return Completed(1, "", f"modprobe: FATAL: Module {name} is builtin.")
        return Completed(0)
    text = _read(host, MODULES) or ""
    lines = text.splitlines(keepends=True)
    line = next((x for x in lines if x.split() and x.split()[0] == name), None)
    if dry:
        return Completed(0)
    local = host.local(MODULES)
    if remove:
        if line is None:
            return Completed(1, "", f"modprobe: FATAL: Module {name} is not in kernel.")
        if line.split()[2] != "0":
            return Completed(1, "", f"modprobe: FATAL: Module {name} is in use.")
        _overwrite(local, "".join(x for x in lines if x is not line).encode())
        shutil.rmtree(host.local(f"{MODULE_DIR}/{name}", follow=False), ignore_errors=True)
        return Completed(0)
    if line is not None:
        return Completed(0)
    failure = _read(host, f"{LOAD_FAILS}/{name}")
    if failure is not None:
        return Completed(1, "", failure)
    # The kernel lists the newest module first.
    _overwrite(local, (f"{name} 16384 0 - Live 0x0000000000000000\n" + text).encode())
    for param in params:
        key, _, value = param.partition("=")
        target = host.local(f"{MODULE_DIR}/{name}/parameters/{key}")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        _overwrite(target, kernel_text("", value).encode(), create=True)
    return Completed(0)


def _setpci(host: DirectoryHost, args: list[str]) -> Completed:
    """`setpci -s BDF CAP_EXP+OFF.w[=VALUE[:MASK]]`, or `ECAP_ACS+...` for the ACS extended
    capability: the forms tune uses. setpci's own words where the capability is not there."""
    if len(args) != 3 or args[0] != "-s" or not (match := _SETPCI.fullmatch(args[2])):
        return Completed(1, "", f"setpci: unsupported arguments {' '.join(args)}")
    address = args[1]
    local = host.local(f"{DEVICES}/{address}/config")
    if not os.path.isfile(local):
        return Completed(1, "", f"setpci: Warning: No devices selected for `{address}'.")
    config = host.read_file(f"{DEVICES}/{address}/config") or b""
    if match.group(1) == "CAP_EXP":
        express = pcie.express(config)
        if express is None:
            return Completed(1, "", f"setpci: Capability 0010 not found on {address}.")
        base = express.offset
    else:
        acs = pcie.acs(config)
        if acs is None:
            return Completed(
                1,
                "",
                f"setpci: {address}: Instance #0 of Extended capability 000d not found - "
                "there are no capabilities with that id.",
            )
        base = acs.offset
    at = base + int(match.group(2), 16)
    old = int(struct.unpack_from("<H", config, at)[0])
    if match.group(3) is None:
        return Completed(0, f"{old:04x}\n")
    value = int(match.group(3), 16)
    mask = int(match.group(4) or "ffff", 16)
    new = (old & ~mask) | (value & mask)
    _overwrite(local, config[:at] + struct.pack("<H", new) + config[at + 2 :])
    return Completed(0)


def _grubby(host: DirectoryHost, args: list[str]) -> Completed:
    """`grubby --update-kernel=ALL --args=W | --remove-args=NAME`: edits every BLS entry's
    `options` line, or RHEL 8's kernelopts in the GRUB environment block for entries that use
    it (facts.cmdline.grubby_edit)."""
    from ..facts import cmdline

    if len(args) != 2 or args[0] != "--update-kernel=ALL":
        return Completed(1, "", f"grubby: unsupported arguments {' '.join(args)}")
    option, _, word = args[1].partition("=")
    if option == "--args":
        name, _, value = word.partition("=")
        sets, removes = {name: value}, set()
    elif option == "--remove-args":
        sets, removes = {}, {word}
    else:
        return Completed(1, "", f"grubby: unsupported option {option}")
    entries = cmdline.LOADER_ENTRIES.rsplit("/", 1)[0]
    found = os.listdir(host.local(entries)) if host.paths.isdir(entries) else []
    paths = [f"{entries}/{n}" for n in sorted(found) if n.endswith(".conf")]
    if host.paths.isfile(cmdline.GRUBENV):
        paths.append(cmdline.GRUBENV)
    texts = {p: (host.read_file(p) or b"").decode("utf-8", "replace") for p in paths}
    for path, text in cmdline.grubby_edit(texts, sets, removes).items():
        if text != texts[path]:
            _overwrite(host.local(path), text.encode())
    return Completed(0)


# What any container has in /dev besides what its config binds.
CONTAINER_DEV = (
    "console",
    "full",
    "null",
    "ptmx",
    "pts",
    "random",
    "shm",
    "tty",
    "urandom",
    "zero",
)


def _container(host: DirectoryHost, argv: list[str]) -> Completed:
    """`pct reboot ID`, `pct exec ID -- ls /dev`, and `lxc-stop|lxc-start|lxc-attach -n NAME
    -P LXCPATH [-- ls /dev]`: the forms tune runs. `pct` reads its config as Proxmox does, an
    `lxc-*` tool as LXC does, and fails as LXC does, with LXC's words, on the first line LXC
    cannot read (`lxc.KEY: VALUE`, an unknown key), as every LXC tool loads the config first.
    Otherwise a restart succeeds when the config exists; `ls /dev` lists the mount entries of
    its main section whose source the snapshot has (they are `optional`: a missing source is
    skipped, as LXC does). Stateless: the listing is what a start with the current config
    would bind."""
    from ..facts import lxc

    tool, args = argv[0], argv[1:]
    command = args[args.index("--") + 1 :] if "--" in args else []
    if tool == "pct" and len(args) >= 2 and args[0] in ("reboot", "exec"):
        config, syntax = f"/etc/pve/lxc/{args[1]}.conf", lxc.Syntax.PROXMOX
    elif tool != "pct" and args[:1] == ["-n"] and args[2:3] == ["-P"] and len(args) >= 4:
        config, syntax = f"{args[3]}/{args[1]}/config", lxc.Syntax.LXC
    else:
        return Completed(1, "", f"{tool}: unsupported arguments {' '.join(args)}")
    text = _read(host, config)
    if text is None:
        return Completed(2, "", f"{tool}: configuration file '{config}' does not exist")
    parsed = lxc.parse(text, syntax)
    if syntax is lxc.Syntax.LXC and parsed.unreadable:
        return Completed(1, "", f"{tool}: {args[1]}: {parsed.unreadable[0].message}")
    if (tool == "pct" and args[0] == "reboot") or tool in ("lxc-stop", "lxc-start"):
        return Completed(0)
    if command != ["ls", "/dev"]:
        return Completed(1, "", f"{tool}: unsupported command {' '.join(command)}")
    names = set(CONTAINER_DEV)
    for value in parsed.values(lxc.MOUNT):
        source, target = lxc.mount_source(value), lxc.mount_target(value)
        if not source.startswith("/dev/"):
            continue
        directly_in_dev = target.startswith("dev/") and target.count("/") == 1
        if directly_in_dev and os.path.lexists(host.local(source)):
            names.add(target.removeprefix("dev/"))
    return Completed(0, "\n".join(sorted(names)) + "\n")
