"""systemd's formats: unit files and their drop-ins as systemd resolves them, resource limits
as a unit sets them (`LimitMEMLOCK=infinity`, `64M`, `soft:hard`) and as `/proc/PID/limits`
prints them, and which of a unit's processes is its main one.

Resolution follows systemd.unit(5): the unit file is the first found along the search path
(`/etc` before `/run` before `/usr/lib` and `/lib`); an empty unit file, or a link to
`/dev/null`, masks the unit. Drop-ins are the `*.conf` files of `UNIT.d/` in every directory of
the path, and of the type's `service.d/` (and a template's `NAME@.service.d/`): read in the
order of their file names, a name in an earlier directory hiding the same name in a later one,
so for a single-valued setting the last file read wins; an empty assignment resets it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from ..core.files import Files, Request, rooted_script
from ..core.paths import overlay_order

# systemd's system unit search path, highest priority first (systemd.unit(5), "System Unit
# Search Path"), without the generator and transient directories tune never writes.
UNIT_DIRS = (
    "/etc/systemd/system.control",
    "/run/systemd/system.control",
    "/run/systemd/transient",
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)
OWN_DROPIN = "90-tune.conf"
# Where systemd puts a running service's processes (cgroup v2, then v1's named hierarchy).
CGROUP_PROCS = (
    "/sys/fs/cgroup/system.slice/{}/cgroup.procs",
    "/sys/fs/cgroup/systemd/system.slice/{}/cgroup.procs",
)

UNIT_NAME = r"[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?\.(service|socket|timer|path|mount|target)"

# Each `Limit*=` setting and its row in /proc/PID/limits (fs/proc/base.c `lnames`); `True`:
# its value is a size, which systemd reads with 1024-based suffixes (K, M, G, T, P, E).
LIMITS: dict[str, tuple[str, bool]] = {
    "LimitFSIZE": ("Max file size", True),
    "LimitDATA": ("Max data size", True),
    "LimitSTACK": ("Max stack size", True),
    "LimitCORE": ("Max core file size", True),
    "LimitRSS": ("Max resident set", True),
    "LimitNPROC": ("Max processes", False),
    "LimitNOFILE": ("Max open files", False),
    "LimitMEMLOCK": ("Max locked memory", True),
    "LimitAS": ("Max address space", True),
    "LimitLOCKS": ("Max file locks", False),
    "LimitSIGPENDING": ("Max pending signals", False),
    "LimitMSGQUEUE": ("Max msgqueue size", True),
    "LimitRTPRIO": ("Max realtime priority", False),
}
_SUFFIX = {"": 0, "B": 0, "K": 10, "M": 20, "G": 30, "T": 40, "P": 50, "E": 60}
_ONE = r"(?:infinity|[0-9]+(?:[KMGTPE]|B)?)"
LIMIT_VALUE = rf"{_ONE}(?::{_ONE})?"
INFINITY = "infinity"


Section = dict[str, str]


def parse(text: str) -> dict[str, list[tuple[str, str]]]:
    """Each section's assignments in order, as systemd's config parser reads them
    (src/shared/conf-parser.c): `#` and `;` start a comment line, a line ending in a
    backslash continues on the next (comment lines inside are skipped), whitespace around the
    key and the value is dropped."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    joined = ""
    for raw in text.splitlines():
        line = raw.strip()
        if joined and line[:1] in ("#", ";"):
            continue
        if line.endswith("\\"):
            joined += line[:-1] + " "
            continue
        line, joined = (joined + line).strip(), ""
        if not line or line[:1] in ("#", ";"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
        elif current is not None and "=" in line:
            key, value = line.split("=", 1)
            current.append((key.strip(), value.strip()))
    return sections


def unit_type(unit: str) -> str:
    return unit.rsplit(".", 1)[1]


def template(unit: str) -> str | None:
    """`getty@.service` for the instance `getty@tty1.service`; None for a plain unit."""
    name, _, suffix = unit.rpartition(".")
    if "@" not in name:
        return None
    return f"{name.split('@', 1)[0]}@.{suffix}"


def _dropin_dirs(unit: str) -> list[str]:
    names = [f"{unit_type(unit)}.d"]
    base = template(unit)
    if base is not None:
        names.append(f"{base}.d")
    return [*names, f"{unit}.d"]


def dropin(unit: str, directory: str = "/etc/systemd/system") -> str:
    """tune's own drop-in for `unit`."""
    return f"{directory}/{unit}.d/{OWN_DROPIN}"


# Where `systemctl enable` links a unit (`[Install]` WantedBy= and RequiredBy=), and masks it.
ADMIN = "/etc/systemd/system"
LINK_KINDS = {"WantedBy": "wants", "RequiredBy": "requires"}


def request(unit: str) -> Request:
    """Every file that makes up `unit`'s configuration, and the links that enable it (listed,
    never opened: a mask links to /dev/null)."""
    names = [unit, *filter(None, [template(unit)])]
    files = [f"{d}/{n}" for d in UNIT_DIRS for n in names]
    dropins = [f"{d}/{n}/*.conf" for d in UNIT_DIRS for n in _dropin_dirs(unit)]
    links = [f"{ADMIN}/*.{kind}/{unit}" for kind in LINK_KINDS.values()]
    return Request.of(*files, *dropins, nodes=[*files, *links])


class Unit(NamedTuple):
    """A unit as systemd loads it: its file (None: not installed), whether it is masked, and
    its drop-ins in the order systemd reads them."""

    name: str
    path: str | None
    masked: bool
    dropins: tuple[str, ...]

    @property
    def exists(self) -> bool:
        return self.path is not None


def _first(files: Files, paths: list[str]) -> str | None:
    """The first of `paths` there: read, or listed (a link to /dev/null in a snapshot, whose
    /dev is not the host's)."""
    return next((p for p in paths if files.read(p) is not None or files.node_paths(p)), None)


def resolve(files: Files, unit: str) -> Unit:
    """Where `unit`'s configuration comes from on the host `files` was read from."""
    path = _first(files, [f"{d}/{unit}" for d in UNIT_DIRS])
    base = template(unit)
    if path is None and base is not None:
        path = _first(files, [f"{d}/{base}" for d in UNIT_DIRS])
    masked = path is not None and not (files.read(path) or b"").strip()
    dropins = [f"{d}/{n}" for n in _dropin_dirs(unit) for d in UNIT_DIRS]
    return Unit(unit, path, masked, tuple(conf_files(files, dropins)))


def conf_files(files: Files, directories: Iterable[str]) -> list[str]:
    """The `*.conf` files of `directories` (highest priority first) in the order systemd reads
    them (src/basic/conf-files.c): by file name, a name in an earlier directory hiding the
    same name in a later one."""
    ordered = tuple(directories)
    return overlay_order(ordered, (p for d in ordered for p in files.glob(f"{d}/*.conf")))


def assignments(files: Files, unit: Unit, section: str) -> Iterator[tuple[str, str, str]]:
    """(file, key, value) of `section` in the order systemd applies them."""
    for path in (unit.path, *unit.dropins) if unit.path is not None else ():
        for key, value in parse(files.text(path) or "").get(section, []):
            yield path, key, value


def setting(files: Files, unit: Unit, section: str, key: str) -> tuple[str | None, str | None]:
    """The effective value of a single-valued `key` (None: unset, or reset by an empty
    assignment) and the file that set it last."""
    value: str | None = None
    source: str | None = None
    for path, name, found in assignments(files, unit, section):
        if name == key:
            value, source = found or None, path
    return value, source


def _bound(word: str, size: bool) -> int | None:
    if word == INFINITY:
        return None
    match = re.fullmatch(r"([0-9]+)([KMGTPE]|B)?", word)
    if match is None or (match.group(2) and not size):
        raise ValueError(word)
    return int(match.group(1)) << _SUFFIX[match.group(2) or ""]


def _shown(bound: int | None) -> str:
    return INFINITY if bound is None else str(bound)


def normalize_limit(key: str, value: str | None) -> str | None:
    """A `Limit*=` value as tune compares it: bytes in decimal, `infinity`, and `soft:hard`
    only where the two differ (systemd's `rlimit_parse`). None stays None."""
    if value is None:
        return None
    size = LIMITS[key][1]
    soft, _, hard = value.partition(":")
    low = _bound(soft, size)
    high = low if not hard else _bound(hard, size)
    return _shown(low) if low == high else f"{_shown(low)}:{_shown(high)}"


def configured_limit(key: str, value: str | None) -> str | None:
    """A unit's `Limit*=` value as compared: normalised, or as written where systemd cannot
    parse it (it ignores such a line, so no value tune wants ever equals it)."""
    try:
        return normalize_limit(key, value)
    except ValueError:
        return value


def process_limits(text: str) -> dict[str, str]:
    """`/proc/PID/limits` as `Limit*` keys with normalised values (`unlimited` is infinity)."""
    rows = {row: key for key, (row, _) in LIMITS.items()}
    found = {}
    for line in text.splitlines():
        for row, key in rows.items():
            if line.startswith(row + " "):
                words = line[len(row) :].split()
                # A kernel's line has soft, hard and a unit; a shorter one (a hostile /proc,
                # a process gone in the middle of the read) says nothing.
                if len(words) < 2:
                    continue
                soft, hard = (INFINITY if w == "unlimited" else w for w in words[:2])
                found[key] = soft if soft == hard else f"{soft}:{hard}"
    return found


def main_command(files: Files, unit: Unit) -> str | None:
    """The program name (`comm`, 15 characters at most) of the unit's first `ExecStart=`."""
    starts = [v for _, k, v in assignments(files, unit, "Service") if k == "ExecStart" and v]
    if not starts:
        return None
    program = starts[0].lstrip("-@:+!").split()[0]
    return program.rsplit("/", 1)[-1][:15]


class Process(NamedTuple):
    """One process of a unit's cgroup as the running-limits command printed it: `comm` without
    its newline; `limits` None where they were not printed (the process ended, or an earlier
    process of the same `comm` showed them)."""

    pid: str
    comm: str
    limits: str | None


def _running_body() -> str:
    tries = " ".join(f'"{p.lstrip("/").format("$unit")}"' for p in CGROUP_PROCS)
    return (
        # A PID list from a snapshot is not trusted: split, never globbed, digits only.
        "set -f\n"
        "nl='\n'\n"
        "for unit; do\n"
        "    printf 'U\\000%s\\000' \"$unit\"\n"
        "    pids=\n"
        f"    for procs in {tries}; do\n"
        '        pids=$(cat -- "$procs" 2>/dev/null) && [ -n "$pids" ] && break\n'
        "    done\n"
        '    shown="$nl"\n'
        "    for pid in $pids; do\n"
        "        case $pid in *[!0-9]*) continue ;; esac\n"
        '        comm=$(cat -- "proc/$pid/comm" 2>/dev/null)\n'
        '        printf \'P\\000%s\\000%s\\000\' "$pid" "$comm"\n'
        '        case $shown in *"$nl$comm$nl"*) ;; *)\n'
        '            if limits=$(cat -- "proc/$pid/limits" 2>/dev/null); then\n'
        "                printf 'L%s\\n' \"$limits\"\n"
        '                shown="$shown$comm$nl"\n'
        "            fi ;;\n"
        "        esac\n"
        "        printf '\\000'\n"
        "    done\n"
        "done\n"
    )


# What finds a unit's running processes in one batch with every other read (a batch cannot ask
# for the cgroup's PIDs first, and reading every process's limits is ~2 MB on a busy host):
# `sh -c RUNNING_SCRIPT sh UNIT...`, the units as arguments, never inside the script. Per unit
# `U\0UNIT\0`, then per PID of its cgroup `P\0PID\0COMM\0` and `L` + its limits + `\0`:
# neither a comm nor a kernel's limits holds a NUL. Limits go out once per `comm` (the first
# process of it that has them), which is all `main_processes` uses: a runtime's hundred shims
# would otherwise outgrow a command's output cap. The body reads paths relative to the host's
# root, so a snapshot served as a host runs it from there (`hosts.files.rooted_script`).
RUNNING_BODY = _running_body()
RUNNING_SCRIPT = rooted_script(RUNNING_BODY)


def running_command(unit: str) -> tuple[str, ...]:
    return ("sh", "-c", RUNNING_SCRIPT, "sh", unit)


def running_output(unit: str, processes: list[Process]) -> bytes:
    """What `running_command(unit)` prints for `processes`, as the script reads them (a
    snapshot's emulation): trailing newlines dropped as `$(cat)` drops them."""
    out = [b"U\0" + unit.encode() + b"\0"]
    shown: set[str] = set()
    for p in processes:
        comm = p.comm.rstrip("\n")
        limits = b""
        if p.limits is not None and comm not in shown:
            limits = b"L" + p.limits.rstrip("\n").encode() + b"\n"
            shown.add(comm)
        out.append(b"P\0%s\0%s\0%s\0" % (p.pid.encode(), comm.encode(), limits))
    return b"".join(out)


def running_processes(files: Files, unit: str) -> list[Process] | None:
    """The processes of `unit`'s cgroup, in its order (empty: not running); None where the
    command failed or printed what it never prints: the running limits are unknown."""
    answer = files.output(running_command(unit))
    if answer.status != 0:
        return None
    fields = answer.stdout.decode("utf-8", "replace").split("\0")
    if fields[:2] != ["U", unit] or fields[-1] != "":
        return None
    found = []
    rest = fields[2:-1]
    while rest:
        if len(rest) < 4 or rest[0] != "P" or not (rest[1].isascii() and rest[1].isdigit()):
            return None
        limits = rest[3]
        if limits and not limits.startswith("L"):
            return None
        found.append(Process(rest[1], rest[2], limits[1:] if limits else None))
        rest = rest[4:]
    return found


def running_request(unit: str) -> Request:
    """What `main_processes` needs: the running-limits command for `unit`."""
    return Request.of(commands=[running_command(unit)])


def main_processes(files: Files, unit: Unit) -> list[Process] | None:
    """The unit's main program among its cgroup's processes: those whose `comm` is the
    program's, else the first (None: unknown). A container runtime's cgroup also holds the
    shims it started (KillMode=process keeps them across a restart, with the limits they
    started with), which a restart of the service never changes."""
    processes = running_processes(files, unit.name)
    if processes is None:
        return None
    command = main_command(files, unit)
    named = [p for p in processes if p.comm == command]
    return named or processes[:1]


# logind.conf(5): the main file, then `*.conf` drop-ins of these directories, by file name.
LOGIND_CONF = "/etc/systemd/logind.conf"
LOGIND_DIRS = (
    "/etc/systemd/logind.conf.d",
    "/run/systemd/logind.conf.d",
    "/usr/local/lib/systemd/logind.conf.d",
    "/usr/lib/systemd/logind.conf.d",
)
LOGIND_DROPIN = f"{LOGIND_DIRS[0]}/{OWN_DROPIN}"
LOGIND_DEFAULTS = "/usr/lib/systemd/logind.conf"  # systemd 256+ ships its defaults here


def logind_request() -> Request:
    return Request.of(LOGIND_CONF, LOGIND_DEFAULTS, *(f"{d}/*.conf" for d in LOGIND_DIRS))


def logind_setting(files: Files, key: str) -> str | None:
    """The value logind reads for `key` of `[Login]`: the last assignment in its main file
    (`/etc`, else the one in `/usr/lib`) and then its drop-ins."""
    main = LOGIND_CONF if files.read(LOGIND_CONF) is not None else LOGIND_DEFAULTS
    value = None
    for path in (main, *conf_files(files, LOGIND_DIRS)):
        for name, found in parse(files.text(path) or "").get("Login", []):
            if name == key:
                value = found or None
    return value


def link_targets(files: Files, unit: Unit) -> list[str]:
    """The directories `systemctl enable` links `unit` into (`multi-user.target.wants`), from
    the `[Install]` section of its unit file."""
    found = []
    text = files.text(unit.path) if unit.path is not None else None
    for key, value in parse(text or "").get("Install", []):
        if key in LINK_KINDS:
            found += [f"{target}.{LINK_KINDS[key]}" for target in value.split()]
    return list(dict.fromkeys(found))


def unit_state(files: Files, unit: Unit) -> str | None:
    """As `systemctl is-enabled` says it: `masked`, `enabled` (linked from a `.wants` or
    `.requires` directory in /etc), `static` (nothing in `[Install]` to enable it) or
    `disabled`; None when the unit is not installed."""
    if not unit.exists:
        return None
    if unit.masked:
        return "masked"
    if any(files.node_paths(f"{ADMIN}/*.{k}/{unit.name}") for k in LINK_KINDS.values()):
        return "enabled"
    return "disabled" if link_targets(files, unit) else "static"
