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
`LOAD_FAILS`. `nvidia-smi` keeps each GPU's state where the snapshot recorded its queries
(`reconciler.hosts.recorded`): a setting edits that GPU's line of the CSV, as the next query
of a real GPU would print it. The test lab's sh library (`tests/lab.sh`, which tune never
sends to a host) emulates the same, byte for byte, for an apply through the sh engine to a
snapshot; `tests/engines` holds both to it.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.errors import HostError
from ..core.files import NOT_INSTALLED, CommandOutput, Files, Request
from ..facts import irq, nvidia_smi, pcie, systemd
from ..facts.kernel import OSRELEASE
from ..facts.lxc_keys import KEYS
from ..facts.modules import (
    MODULE_DIR,
    MODULES,
    builtin_modules,
    builtin_path,
    is_live,
    module_name,
)
from ..facts.numa import parse_list
from ..facts.numbers import unsigned
from ..facts.pci import DEVICES
from . import recorded
from .base import ENOTSUPP, Completed, link_at_attribute, refusal
from .beneath import open_regular, write_all

if TYPE_CHECKING:
    from .directory import DirectoryHost

CONTAINER_TOOLS = ("pct", "lxc-stop", "lxc-start", "lxc-attach")
# LXC's key table as the sh emulation takes it: names, a prefix key with a final "*".
LXC_KEY_WORDS = " ".join(name + ("" if strict else "*") for name, strict in KEYS)
REBOOT_ASKED = "/run/emulated/reboot-asked"  # `systemctl --no-block reboot`, as a snapshot keeps it
COMMANDS = ("modprobe", "setpci", "grubby", "systemctl", nvidia_smi.NVIDIA_SMI, *CONTAINER_TOOLS)
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
    """What the kernel prints back after `value` is written to a file that printed `old`. A NUL
    in `old` (no kernel attribute prints one; a snapshot may hold anything) is dropped, as the
    sh engine's emulation drops it: a shell variable cannot hold one."""
    options = old.replace("\0", "").split()
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
    local = host.local(path)  # a link that leads out of the snapshot is refused as such here
    if os.path.islink(host.local(path, follow=False)):
        raise link_at_attribute(path)
    if not os.path.isfile(local):
        raise HostError(f"{path}: cannot open for writing (No such file or directory).")
    if not writable(host, path):
        raise HostError(f"{path}: cannot open for writing (Permission denied).")
    refuses = _read(host, REFUSES + path)
    if refuses is not None:
        code = unsigned(refuses.strip())
        # Any errno a kernel returns (MAX_ERRNO is 4095), ENOTSUPP's 524 too, which Python's
        # errno module does not name.
        if code is None or not 0 < code < 4096:
            raise HostError(
                f"{REFUSES + path}: holds {refuses.strip()[:40]!r}, not the number of an errno; "
                "a snapshot marks an attribute the kernel refuses with the errno it refuses with."
            )
        raise refusal(path, value, code)
    if irq.is_affinity_list(path):
        new = _affinity_text(host, path, value)
    else:
        old = (host.read_file(path) or b"").decode("utf-8", "replace")
        try:
            new = kernel_text(old, value)
        except ValueError:
            raise refusal(path, value, errno.EINVAL) from None
    _overwrite(local, new.encode())


def _affinity_text(host: DirectoryHost, path: str, value: str) -> str:
    """An IRQ's `smp_affinity_list` after `value` is written: the list printed in ranges; a CPU
    past the possible ones is ERANGE, anything else bitmap_parselist cannot take EINVAL. (Its
    sibling `smp_affinity`, the same CPUs as a hex mask, is left as it was.)"""
    possible = parse_list(_read(host, irq.CPUS_POSSIBLE))
    count = max(possible) + 1 if possible else None
    try:
        return irq.kernel_cpulist(value, count) + "\n"
    except irq.CpuOutOfRange:
        raise refusal(path, value, errno.ERANGE) from None
    except ValueError:
        raise refusal(path, value, errno.EINVAL) from None


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
    if argv[0] == "systemctl":
        return _systemctl(host, argv[1:])
    if argv[0] == nvidia_smi.NVIDIA_SMI:
        return _nvidia_smi(host, argv[1:])
    return _setpci(host, argv[1:])


# nvidia-smi's settings: option -> (the query field it changes, its argument -> the value the
# query prints). `-e` changes only what applies at the next boot.
NVIDIA_SMI_SETTINGS = {
    "-pm": (nvidia_smi.PERSISTENCE, {"0": "Disabled", "1": "Enabled"}),
    "-c": (
        nvidia_smi.COMPUTE_MODE,
        {m: m.title() for m in ("DEFAULT", "PROHIBITED", "EXCLUSIVE_PROCESS")},
    ),
    "-e": (nvidia_smi.ECC_PENDING, {"0": "Disabled", "1": "Enabled"}),
}
# The application clocks: `-ac MEMORY,GRAPHICS` and `-rac` edit the clocks query's answer.
CLOCK_OPTIONS = ("-ac", "-rac")
# nvidia-smi's exit statuses (its manual's RETURN VALUE section).
SMI_INVALID, SMI_NOT_SUPPORTED, SMI_NOT_FOUND, SMI_NO_DRIVER = 2, 3, 6, 9
_CLOCK_PAIR = re.compile(r"([0-9]+),([0-9]+)")


def _nvidia_smi(host: DirectoryHost, args: list[str]) -> Completed:
    """`nvidia-smi -i BUSID -pm 0|1 | -pl WATTS | -c MODE | -e 0|1 | -ac MEM,GR | -rac`, on the
    recorded query (the clocks query for the last two)."""
    clocks = len(args) >= 3 and args[2] in CLOCK_OPTIONS
    query = nvidia_smi.CLOCKS_QUERY if clocks else nvidia_smi.QUERY
    path = f"{recorded.where(query)}/stdout"
    data = host.read_file(path)
    if data is None:
        said = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        return Completed(SMI_NO_DRIVER, said + "\n")
    arity = 3 if clocks and args[2] == "-rac" else 4
    known = (*NVIDIA_SMI_SETTINGS, "-pl", *CLOCK_OPTIONS)
    if len(args) != arity or args[0] != "-i" or args[2] not in known:
        return Completed(SMI_INVALID, f"Invalid combination of input arguments: {' '.join(args)}\n")
    # Byte for byte but the cells it sets, as the driver keeps what it does not change: bytes
    # that are no UTF-8 and line ends other than \n come back as they were.
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    names = nvidia_smi.field_names(lines[0])
    at = names.index(nvidia_smi.BUS_ID) if nvidia_smi.BUS_ID in names else 0
    row = next(
        (
            n
            for n, line in enumerate(lines[1:], 1)
            if (line.split(nvidia_smi.SEPARATOR) + [""] * at)[at].upper() == args[1].upper()
        ),
        None,
    )
    if row is None:
        return Completed(SMI_NOT_FOUND, f"No devices were found matching {args[1]}\n")
    cells = lines[row].split(nvidia_smi.SEPARATOR)
    gpu = dict(zip(names, cells, strict=False))
    edits = _smi_edits(gpu, args[2:])
    if any(f not in names or gpu[f].startswith("[") for f in edits):
        said = f"Setting {','.join(edits)} is not supported for GPU {args[1]}.\n"
        return Completed(SMI_NOT_SUPPORTED, said)
    if not edits or None in edits.values():
        given = args[3] if len(args) > 3 else ""
        return Completed(SMI_INVALID, f"Invalid value {given!r} for {args[2]}.\n")
    for name, value in edits.items():
        cells[names.index(name)] = str(value)
    lines[row] = nvidia_smi.SEPARATOR.join(cells)
    _overwrite(host.local(path), "\n".join(lines).encode("utf-8", "surrogateescape"))
    said = ", ".join(f"{name} to {value}" for name, value in edits.items())
    return Completed(0, f"Set {said} for GPU {args[1]}.\n")


def _smi_edits(gpu: dict[str, str], option: list[str]) -> dict[str, str | None]:
    """The cells `option` (and its argument) sets on `gpu`'s line: None for a value it refuses."""
    if option[0] == "-rac":
        return {
            nvidia_smi.APP_MEMORY: gpu.get(nvidia_smi.DEFAULT_APP_MEMORY),
            nvidia_smi.APP_GRAPHICS: gpu.get(nvidia_smi.DEFAULT_APP_GRAPHICS),
        }
    if option[0] == "-ac":
        pair = _CLOCK_PAIR.fullmatch(option[1])
        memory, graphics = (None, None) if pair is None else (f"{v} MHz" for v in pair.groups())
        return {nvidia_smi.APP_MEMORY: memory, nvidia_smi.APP_GRAPHICS: graphics}
    if option[0] == "-pl":
        return {nvidia_smi.POWER_LIMIT: _power_limit(gpu, option[1])}
    field, values = NVIDIA_SMI_SETTINGS[option[0]]
    return {field: values.get(option[1].upper())}


def _power_limit(gpu: dict[str, str], watts: str) -> str | None:
    """The `power.limit` cell for `-pl WATTS`, None outside power.min_limit..power.max_limit."""
    try:
        wanted = float(watts)
        low = float(gpu[nvidia_smi.POWER_MIN].removesuffix(" W"))
        high = float(gpu[nvidia_smi.POWER_MAX].removesuffix(" W"))
    except (KeyError, ValueError):
        return None
    return f"{wanted:.2f} W" if low <= wanted <= high else None


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
    # The other lines go back byte for byte, whatever a snapshot holds there.
    text = (host.read_file(MODULES) or b"").decode("utf-8", "surrogateescape")
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
        _overwrite(
            local, "".join(x for x in lines if x is not line).encode(errors="surrogateescape")
        )
        shutil.rmtree(host.local(f"{MODULE_DIR}/{name}", follow=False), ignore_errors=True)
        return Completed(0)
    if line is not None and is_live(line, name):
        return Completed(0)
    failure = _read(host, f"{LOAD_FAILS}/{name}")
    if failure is not None:
        return Completed(1, "", failure)
    # A module in flight: the kernel waits for it to finish (init_module's
    # add_unformed_module), then it is the one loaded, or gone and loaded anew. The kernel
    # lists the newest module first.
    text = "".join(x for x in lines if x is not line)
    line = f"{name} 16384 0 - Live 0x0000000000000000\n"
    _overwrite(local, (line + text).encode(errors="surrogateescape"))
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
    """`grubby --update-kernel=ALL [--remove-args=R] [--args=A]`, as the script grubby-bls
    does it (`facts.grubby.update_all`): BLS entries, kernelopts in the GRUB environment
    block, GRUB_CMDLINE_LINUX in /etc/default/grub, /etc/kernel/cmdline."""
    from ..facts import grubby

    options = dict(arg.partition("=")[::2] for arg in args)
    if (
        len(options) != len(args)
        or options.get("--update-kernel") != "ALL"
        or not set(options) <= {"--update-kernel", "--args", "--remove-args"}
    ):
        return Completed(1, "", f"grubby: unsupported arguments {' '.join(args)}")
    found = os.listdir(host.local(grubby.ENTRIES)) if host.paths.isdir(grubby.ENTRIES) else []
    paths = [f"{grubby.ENTRIES}/{n}" for n in found if n.endswith(".conf")]
    paths += [grubby.GRUBENV, grubby.ETC_DEFAULT_GRUB, grubby.KERNEL_CMDLINE]
    texts = {
        p: (host.read_file(p) or b"").decode("utf-8", "surrogateescape")
        if host.paths.isfile(p)
        else None
        for p in paths
    }
    boot = grubby.GrubbyFiles(texts, kernel_dir=host.paths.isdir("/etc/kernel"))
    try:
        after = grubby.update_all(boot, options.get("--remove-args", ""), options.get("--args", ""))
    except grubby.GrubbyCannot as exc:
        return Completed(1, "", f"grubby: the emulation cannot predict this: {exc}")
    for path, text in after.files.items():
        if text is not None and text != texts[path]:
            _overwrite(host.local(path), text.encode("utf-8", "surrogateescape"), create=True)
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


def _systemctl(host: DirectoryHost, args: list[str]) -> Completed:
    """`systemctl daemon-reload` (nothing to do: a snapshot's files are read as they are),
    `try-restart UNIT` (likewise) and `systemctl restart UNIT`: a running unit's main process
    is replaced by a new one, with a new PID, whose `/proc/PID/limits` holds the limits the
    unit's configuration now sets."""
    if args == ["daemon-reload"]:
        return Completed(0)
    if args == ["--no-block", "reboot"]:
        # A snapshot does not reboot: the request is kept where a test (which then fakes the
        # boot) reads it, one line a request.
        host.append(REBOOT_ASKED, b"systemctl --no-block reboot\n", sync=False)
        return Completed(0)
    if len(args) == 2 and args[0] in UNIT_FILE_VERBS:
        return _unit_file(host, args[0], args[1])
    if len(args) == 2 and args[0] == "try-restart":
        # A step's restart (irqbalance, to read tune's drop-in): nothing a snapshot's files
        # show changes, since what matters is the daemon's command line, read from its unit.
        if not systemd.resolve(host.fetch(systemd.request(args[1])), args[1]).exists:
            return Completed(5, "", f"Failed to try-restart {args[1]}: Unit {args[1]} not found.")
        return Completed(0)
    if len(args) != 2 or args[0] != "restart":
        return Completed(1, "", f"systemctl: unsupported arguments {' '.join(args)}")
    name = args[1]
    files = host.fetch(systemd.request(name) | systemd.running_request(name) | _cgroups(name))
    unit = systemd.resolve(files, name)
    if not unit.exists:
        return Completed(5, "", f"Failed to restart {name}: Unit {name} not found.")
    old = systemd.main_processes(files, unit)
    procs, listed = _cgroup(files, name)
    if not old or not procs:
        return Completed(0)  # not running: it starts with its configuration, as read
    pids = [int(n) for n in os.listdir(host.local("/proc")) if n.isdigit()]
    new = str(max(pids) + 1)
    limits = _limits_text(next((p.limits for p in old if p.limits), ""), files, unit)
    for leaf, data in (("comm", f"{old[0].comm}\n".encode()), ("limits", limits)):
        target = host.local(f"/proc/{new}/{leaf}")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        _overwrite(target, data, create=True)
    gone = {p.pid for p in old}
    _overwrite(host.local(procs), "".join(f"{new if p in gone else p}\n" for p in listed).encode())
    for pid in gone:
        shutil.rmtree(host.local(f"/proc/{pid}", follow=False), ignore_errors=True)
    return Completed(0)


def observe(fetch: Callable[[Request], Files], argv: tuple[str, ...]) -> CommandOutput:
    """What one of tune's rooted scripts (`files.rooted_script`) prints on the host whose
    files `fetch` reads, computed from those files as its shell body reads them."""
    if argv[2] != systemd.RUNNING_SCRIPT:
        return NOT_INSTALLED
    return CommandOutput(0, b"".join(_running(fetch, unit) for unit in argv[4:]))


def _cgroups(unit: str) -> Request:
    return Request.of(*(p.format(unit) for p in systemd.CGROUP_PROCS))


def _cgroup(files: Files, unit: str) -> tuple[str, list[str]]:
    """The first of the unit's `cgroup.procs` that lists anything, and what it lists ("" and
    nothing: not running), as the running-limits script reads them."""
    for pattern in systemd.CGROUP_PROCS:
        path = pattern.format(unit)
        text = (files.text(path) or "").rstrip("\n")  # as `$(cat)` reads it
        if text:
            return path, text.split()
    return "", []


def _running(fetch: Callable[[Request], Files], unit: str) -> bytes:
    _, listed = _cgroup(fetch(_cgroups(unit)), unit)
    pids = [p for p in listed if p.isascii() and p.isdigit()]
    leaves = ("comm", "limits")
    files = fetch(Request.of(*(f"/proc/{p}/{leaf}" for p in pids for leaf in leaves)))
    processes = [
        systemd.Process(
            pid,
            (files.text(f"/proc/{pid}/comm") or "").rstrip("\n"),
            files.text(f"/proc/{pid}/limits"),
        )
        for pid in pids
    ]
    return systemd.running_output(unit, processes)


UNIT_FILE_VERBS = ("enable", "disable", "mask", "unmask")


def _unit_file(host: DirectoryHost, verb: str, name: str) -> Completed:
    """`systemctl enable|disable|mask|unmask UNIT` as systemd's install.c does it in /etc: a
    link to the unit file in each `[Install]` target's `.wants`/`.requires` directory, and a
    mask as an empty unit file (systemd links to /dev/null; both read empty, and a snapshot's
    /dev is not the host's)."""
    # The links lie in /etc/systemd/system/T.wants/: four levels below /.
    files = host.fetch(systemd.request(name))
    unit = systemd.resolve(files, name)
    if not unit.exists or unit.path is None:
        return Completed(1, "", f"Failed to {verb} unit: Unit file {name} does not exist.")
    own = f"{systemd.ADMIN}/{name}"
    local = host.local(own, follow=False)
    masked = unit.path == own and unit.masked
    if verb == "mask" and os.path.lexists(local) and not masked:
        return Completed(1, "", f"Failed to mask unit: File {own} already exists.")
    if verb == "mask":
        _overwrite(local, b"", create=True)
    elif verb == "unmask" and masked:
        os.unlink(local)
    elif verb == "enable":
        if masked:
            return Completed(1, "", f"Failed to enable unit: Unit file {own} is masked.")
        for target in systemd.link_targets(files, unit):
            link = host.local(f"{systemd.ADMIN}/{target}/{name}", follow=False)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            if not os.path.lexists(link):
                # Relative, where systemctl links absolutely: the same file either way, and
                # the sh emulation reads the snapshot with this machine's own tools.
                os.symlink(f"../../../..{unit.path}", link)
    elif verb == "disable":
        for kind in systemd.LINK_KINDS.values():
            for path in files.node_paths(f"{systemd.ADMIN}/*.{kind}/{name}"):
                os.unlink(host.local(path, follow=False))
    return Completed(0)


def _limits_text(text: str, files: Files, unit: systemd.Unit) -> bytes:
    """`text` (a /proc/PID/limits) with the rows the unit's configuration sets rewritten, in
    the kernel's layout (fs/proc/base.c, proc_pid_limits)."""
    rows = {row: key for key, (row, _) in systemd.LIMITS.items()}
    out = []
    for line in text.splitlines():
        key = next((k for r, k in rows.items() if line.startswith(r + " ")), None)
        raw = None if key is None else systemd.setting(files, unit, "Service", key)[0]
        if key is None or raw is None:
            out.append(line + "\n")
            continue
        value = systemd.normalize_limit(key, raw) or ""
        soft, _, hard = value.partition(":")
        shown = ["unlimited" if v == systemd.INFINITY else v for v in (soft, hard or soft)]
        units = line[25 + 1 + 20 + 1 + 20 + 1 :].strip()
        row = f"{systemd.LIMITS[key][0]:<25} {shown[0]:<20} {shown[1]:<20} "
        out.append(row + (f"{units:<10}\n" if units else "\n"))
    return "".join(out).encode()
