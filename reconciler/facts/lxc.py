"""LXC container configs (Proxmox `/etc/pve/lxc/<id>.conf` or a plain LXC `config`), read as
their own reader reads them, the character-device majors in `/proc/devices` that their
`devices.allow` lines refer to, and the `/dev/nvidia*` nodes their `mount.entry` lines bind
into the container.

Two readers, two syntaxes. Proxmox's `parse_pct_config` (pve-container
`src/PVE/LXC/Config.pm`) reads `key: value` (and `lxc.key = value` for raw LXC keys), a
`#` comment only at the start of a line, and sections `[snapshot]` / `[pve:pending]` after the
main one. LXC's `parse_line` (lxc/lxc `src/lxc/confile.c`) reads `lxc.key = value` and nothing
else: it skips blank lines, comments after blanks and lines that do not begin with `lxc.`, and
refuses the whole config on an `lxc.` line without `=` ("Invalid configuration line") or with a
key it does not know ("Unsupported config key"); it has no sections. What a value means is LXC's
either way: Proxmox hands its `lxc.*` items to LXC unchanged.
"""

from __future__ import annotations

import re
from enum import Enum
from functools import lru_cache
from typing import NamedTuple

from . import numbers
from .lxc_keys import KEYS

PROC_DEVICES = "/proc/devices"
# Proxmox's containers, by id, and plain LXC's, by name.
PVE_CONFIGS = "/etc/pve/lxc/*.conf"
LXC_CONFIGS = "/var/lib/lxc/*/config"
ALLOW = "lxc.cgroup2.devices.allow"
MEMLOCK = "lxc.prlimit.memlock"
MOUNT = "lxc.mount.entry"
# Observed by name and type only (`Request.nodes`); a directory ends with "/".
NVIDIA_NODES = "/dev/nvidia*"

# The bind source of an NVIDIA node directly under /dev (nvidia0, nvidia-uvm, nvidia-caps); a
# mount of something deeper (one capability under nvidia-caps/) is the user's own.
_NVIDIA_SOURCE = re.compile(r"/dev/nvidia[^/\s]*")

_PROXMOX_PLACE = re.compile(r"/etc/pve/(nodes/[^/]+/)?lxc/[0-9]+\.conf")
_LXC_PLACE = re.compile(
    r"/var/lib/lxc/[^/]+/config|/etc/lxc/[^/]+|/root/\.local/share/lxc/[^/]+/config"
)
# Where LXC and Proxmox keep container configs, in directories only root can change:
# Proxmox's cluster file system (this node's view, and every node's), LXC's lxcpath for root,
# and /etc/lxc (default.conf, the template of new containers). A config anywhere else must read
# as one; an unprivileged user's lxcpath (~/.local/share/lxc) too, as that user decides what
# its names are (a link to /etc/shadow there made apply copy the file into the user's home).
STANDARD_PLACES = re.compile(f"{_PROXMOX_PLACE.pattern}|{_LXC_PLACE.pattern}")
# A line of a config: LXC's `lxc.key = value`, or Proxmox's `key: value` (its own keys and
# `lxc.*` ones), a snapshot section `[name]`, a comment or nothing.
_CONFIG_LINE = re.compile(
    r"\s*(lxc\.[A-Za-z0-9_.-]+\s*=.*|[a-z][a-z0-9_.-]*: .*|\[[^\]]+\]|#.*|)\s*"
)

# parse_pct_config's patterns, in the order it tries them.
_PVE_PENDING = re.compile(r"\[pve:pending\]\s*", re.IGNORECASE)
_PVE_SECTION = re.compile(r"\[[a-z][a-z0-9_\-]+\]\s*", re.IGNORECASE)
_PVE_LXC_ITEM = re.compile(r"(lxc\.[a-z0-9_\-.]+)(:|\s*=)\s*(.*?)\s*")
_PVE_ITEM = re.compile(r"([a-z][a-z_]*\d*):\s*(.+?)\s*")
_PVE_OTHER = re.compile(r"(description|delete):\s*(.*)|.*snapstate:\s*(prepare|delete)\s*")
# An `lxc.` line in the syntax of the other reader, for the note that says which it is.
_LXC_FORM = re.compile(r"[ \t]*lxc\.[^\s=:]+[ \t]*=")


class Syntax(Enum):
    PROXMOX = "key: value"
    LXC = "key = value"

    def line(self, key: str, value: str) -> str:
        """`key` set to `value` as a line this syntax's reader takes."""
        return f"{key}: {value}\n" if self is Syntax.PROXMOX else f"{key} = {value}\n"


def syntax_of(path: str, text: str | None) -> Syntax:
    """Proxmox's for its own places, LXC's for LXC's; elsewhere what the file already holds:
    Proxmox's when it has a `key:` item and no `lxc.key =` line, LXC's otherwise."""
    if _PROXMOX_PLACE.fullmatch(path):
        return Syntax.PROXMOX
    if _LXC_PLACE.fullmatch(path) or text is None:
        return Syntax.LXC
    lines = [line.rstrip("\n") for line in _lines(text)]
    proxmox = any(_PVE_ITEM.fullmatch(line) or _PVE_LXC_ITEM.fullmatch(line) for line in lines)
    lxc = any(_LXC_FORM.match(line) for line in lines)
    return Syntax.PROXMOX if proxmox and not lxc else Syntax.LXC


def proxmox_config(container: str) -> str:
    """The config of the Proxmox container `container` (an id) on this node."""
    return PVE_CONFIGS.replace("*", container)


def is_standard_place(path: str) -> bool:
    return STANDARD_PLACES.fullmatch(path) is not None


class Item(NamedTuple):
    key: str
    value: str  # as the reader passes it on: trimmed, LXC's surrounding quotes removed
    line: int  # 0-based index in the file's lines


class RefusedLine(NamedTuple):
    line: int  # 0-based
    message: str  # the reader's own words


class Config(NamedTuple):
    """A config as its reader takes it: the items of its main section, and the lines the reader
    refuses (LXC then refuses to start the container; Proxmox warns and skips them)."""

    syntax: Syntax
    lines: tuple[str, ...]  # the file's lines, each with its newline
    items: tuple[Item, ...]
    main_end: int  # index of the first line after the main section
    unreadable: tuple[RefusedLine, ...]

    def values(self, key: str) -> list[str]:
        return [i.value for i in self.items if i.key == key]

    def last(self, key: str) -> str | None:
        values = self.values(key)
        return values[-1] if values else None


def _lines(text: str) -> list[str]:
    """Lines split at "\\n" only, as both readers split them, each keeping its newline."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def read(path: str, text: str) -> Config:
    """The config at `path` holding `text`, read in its syntax."""
    return parse(text, syntax_of(path, text))


# A plan reads one config several times (allow lines, mounts, notes): parsed once per text.
@lru_cache(maxsize=32)
def parse(text: str, syntax: Syntax) -> Config:
    lines = tuple(_lines(text))
    if syntax is Syntax.PROXMOX:
        return _parse_proxmox(lines)
    return _parse_lxc(lines)


def _parse_proxmox(lines: tuple[str, ...]) -> Config:
    items: list[Item] = []
    unreadable: list[RefusedLine] = []
    for index, physical in enumerate(lines):
        line = physical.rstrip("\n")
        if not line.strip() or line.startswith("#"):
            continue
        if _PVE_PENDING.fullmatch(line) or _PVE_SECTION.fullmatch(line):
            return Config(Syntax.PROXMOX, lines, tuple(items), index, tuple(unreadable))
        raw = _PVE_LXC_ITEM.fullmatch(line)
        own = _PVE_ITEM.fullmatch(line)
        if raw:
            items.append(Item(raw.group(1), raw.group(3), index))
        elif _PVE_OTHER.fullmatch(line):
            continue
        elif own:
            items.append(Item(own.group(1), own.group(2), index))
        else:
            unreadable.append(RefusedLine(index, f"unable to parse config: {line}"))
    return Config(Syntax.PROXMOX, lines, tuple(items), len(lines), tuple(unreadable))


def _parse_lxc(lines: tuple[str, ...]) -> Config:
    """LXC's `parse_line`, line by line (lxc-5.0.2 `src/lxc/confile.c`)."""
    items: list[Item] = []
    unreadable: list[RefusedLine] = []
    for index, physical in enumerate(lines):
        line = physical.rstrip("\n")
        if not line.strip(" \t\r\f\0"):
            continue  # lxc_is_line_empty
        line = line.lstrip(" \t")  # lxc_char_left_gc
        if line.startswith("#") or not line.startswith("lxc."):
            continue  # a comment, or a "martian option": skipped, not refused
        key, equals, value = line.partition("=")
        if not equals:
            unreadable.append(RefusedLine(index, f"Invalid configuration line: {line}"))
            continue
        key = key.rstrip(" \t\0")  # lxc_char_right_gc
        value = value.lstrip(" \t").rstrip(" \t\0")
        if len(value) > 1 and value[0] in "'\"" and value[-1] == value[0]:
            value = value[1:-1]
        if not known_key(key):
            unreadable.append(RefusedLine(index, f'Unsupported config key "{key}"'))
            continue
        items.append(Item(key, value, index))
    return Config(Syntax.LXC, lines, tuple(items), len(lines), tuple(unreadable))


def known_key(key: str) -> bool:
    """Whether LXC's `lxc_get_config` finds `key` in its table."""
    return any(key == name if strict else key.startswith(name) for name, strict in KEYS)


def foreign_line(text: str) -> int | None:
    """The 1-based number of the first line that no LXC or Proxmox config holds (`root:x:0:0`
    of /etc/passwd), 0 for a file with no setting at all, None for a config."""
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if not _CONFIG_LINE.fullmatch(line):
            return number
    has_item = any(parse(text, syntax).items for syntax in Syntax)
    return None if has_item else 0


# --- What a value means to LXC ---------------------------------------------------------------


class DeviceRule(NamedTuple):
    """A `devices.allow`/`.deny` rule as LXC's `device_cgroup_rule_parse` (cgfsng.c) reads it:
    type, major:minor (None for `*`) and access; it reads at most three access letters and
    ignores whatever follows them (`c 195:* rwm # note`)."""

    type: str
    major: int | None
    minor: int | None
    access: frozenset[str]

    def __str__(self) -> str:
        if self.type == "a" and self.major is None and self.minor is None and not self.access:
            return "a"
        numbers = ":".join("*" if n is None else str(n) for n in (self.major, self.minor))
        return f"{self.type} {numbers} {''.join(c for c in 'rwm' if c in self.access)}"


_RULE = re.compile(r"([abc])\s(\*|\d+):(\*|\d+)\s([rwm]{0,3})")


def device_rule(value: str) -> DeviceRule | None:
    """None for a rule LXC refuses. LXC passes exactly one blank between the fields."""
    if value == "a":
        return DeviceRule("a", None, None, frozenset())
    match = _RULE.match(value)
    if not match:
        return None
    rest = value[match.end() :]
    if len(match.group(4)) < 3 and rest:
        return None  # fewer than three letters must end the value
    major, minor = (None if g == "*" else int(g) for g in match.group(2, 3))
    return DeviceRule(match.group(1), major, minor, frozenset(match.group(4)))


class MountEntry(NamedTuple):
    """An `lxc.mount.entry` as LXC reads it: one fstab line (glibc's `getmntent`), fields split
    on blanks, `\\040`-style escapes decoded, a missing dump or pass field 0, the options a set
    (`mount_options`)."""

    source: str
    target: str
    fstype: str
    options: str
    freq: int = 0
    passno: int = 0

    def __str__(self) -> str:
        fields = [_escape(f) for f in (self.source, self.target, self.fstype, self.options)]
        if (self.freq, self.passno) != (0, 0):
            fields += [str(self.freq), str(self.passno)]
        return " ".join(fields)


_ESCAPES = {"\\040": " ", "\\011": "\t", "\\012": "\n", "\\134": "\\"}


def _escape(field: str) -> str:
    for code, char in reversed(_ESCAPES.items()):
        field = field.replace(char, code)
    return field


def _unescape(field: str) -> str:
    return re.sub(r"\\(040|011|012|134)", lambda m: _ESCAPES[m.group(0)], field)


def mount_entry(value: str) -> MountEntry | None:
    """None for an entry with no target (LXC cannot mount it) or a comment."""
    fields = [f for f in re.split(r"[ \t]+", value) if f]
    if len(fields) < 2 or fields[0].startswith("#"):
        return None
    # fstab's dump and pass fields: anything but a number reads as 0, as getmntent's atoi.
    counts = [numbers.unsigned(f) or 0 for f in fields[4:6]]
    counts += [0] * (2 - len(counts))
    text = [_unescape(f) for f in fields[:4]] + [""] * (4 - min(len(fields), 4))
    return MountEntry(text[0], text[1], text[2], mount_options(text[3]), counts[0], counts[1])


# LXC's mount options are a set: parse_mntopts_legacy ORs the flags of each comma-separated
# part (empty parts skipped) and LXC finds its own (`optional`, `create=`) with hasmntopt. One
# order for equal sets: the flags and LXC's own options in the order tune writes them, then
# every other option sorted.
_OPTION_ORDER = ("bind", "rbind", "optional", "create=dir", "create=file")


def mount_options(options: str) -> str:
    parts = {part for part in options.split(",") if part}
    known = [o for o in _OPTION_ORDER if o in parts]
    return ",".join(known + sorted(parts - set(known)))


# --- Limits: `lxc.prlimit.NAME` ---------------------------------------------------------------

PRLIMIT = "lxc.prlimit"
RLIM_INFINITY = 2**64 - 1  # RLIM_INFINITY on Linux: (rlim_t)-1
_ULLONG = 2**64
_C_SPACE = " \t\n\v\f\r"


def _strtoull(text: str) -> tuple[int, str] | None:
    """glibc's strtoull(text, &end, 10): the value and what follows it; None on ERANGE. Blanks
    and a sign may lead; `-N` is N negated in unsigned arithmetic (`-1` is the largest value);
    no digits at all reads 0 and consumes nothing."""
    rest = text.lstrip(_C_SPACE)
    sign = rest[:1] if rest[:1] in ("+", "-") else ""
    digits = re.match(r"[0-9]*", rest[len(sign) :])
    number = digits.group(0) if digits else ""
    if not number:
        return 0, text
    # Past 20 digits (leading zeros aside) it is out of range, and never converted: a host's
    # text may hold a digit string too long for int().
    if len(number.lstrip("0")) > 20:
        return None
    magnitude = int(number.lstrip("0") or "0")
    if magnitude >= _ULLONG:
        return None
    value = (-magnitude) % _ULLONG if sign == "-" else magnitude
    return value, rest[len(sign) + len(number) :]


def _limit_value(text: str) -> tuple[int, str] | None:
    """confile.c's parse_limit_value: `unlimited` (its first nine letters), else strtoull."""
    if text.startswith("unlimited"):
        return RLIM_INFINITY, text[len("unlimited") :]
    return _strtoull(text)


def limit(value: str) -> str | None:
    """A `lxc.prlimit.*` value as LXC holds it, printed as LXC prints it (`get_config_prlimit`:
    `unlimited` or a number, `soft:hard` where the halves differ); None where LXC refuses it
    (set_config_prlimit's EINVAL: the container does not start). `-1`, `18446744073709551615`
    and `unlimited:unlimited` are all `unlimited`; `65536 : 65536` is `65536`."""
    soft = _limit_value(value)
    if soft is None:
        return None
    cur, rest = soft
    rest = rest.lstrip(_C_SPACE)
    if rest.startswith(":"):
        rest = rest[1:]
    elif rest:
        return None
    rest = rest.lstrip(_C_SPACE)
    high = cur
    if rest:
        hard = _limit_value(rest)
        if hard is None or hard[1].strip(_C_SPACE):
            return None
        high = hard[0]

    def text(number: int) -> str:
        return "unlimited" if number == RLIM_INFINITY else str(number)

    return text(cur) if cur == high else f"{text(cur)}:{text(high)}"


def prlimit(config: Config, key: str) -> str | None:
    """The value of the limit `key` (`lxc.prlimit.memlock`) LXC holds after reading `config`'s
    main section, as the config writes it: each line replaces the one before, and an empty
    value clears it, as does an empty `lxc.prlimit` (lxc_clear_limits); None when unset."""
    value = None
    for item in config.items:
        if item.key == key:
            value = item.value or None
        elif item.key == PRLIMIT and not item.value:
            value = None
    return value


def meaning(key: str, value: str) -> str:
    """`value` of `key` as LXC reads it, written the one way tune writes it: equal meanings
    give equal text. A value LXC cannot read stays as it is."""
    parsed: DeviceRule | MountEntry | None = None
    if key == MOUNT:
        parsed = mount_entry(value)
    elif key.startswith("lxc.cgroup2.devices.") or key.startswith("lxc.cgroup.devices."):
        parsed = device_rule(value)
    elif key.startswith(PRLIMIT + "."):
        return limit(value) or value
    return value if parsed is None else str(parsed)


# --- NVIDIA's lines --------------------------------------------------------------------------


def mounts_nvidia(config: Config) -> bool:
    """Whether the main section bind-mounts NVIDIA device nodes into the container."""
    return any(
        i.key == MOUNT and mount_source(i.value).startswith("/dev/nvidia") for i in config.items
    )


def nvidia_mount_lines(config: Config) -> list[str]:
    """The main section's mount entries of NVIDIA nodes, as LXC reads them, in `node_order`."""
    lines = {
        meaning(MOUNT, i.value)
        for i in config.items
        if i.key == MOUNT and _NVIDIA_SOURCE.fullmatch(mount_source(i.value))
    }
    return sorted(lines, key=node_order)


def mount_source(value: str) -> str:
    """The bind source of a mount entry (its first field)."""
    entry = mount_entry(value)
    return entry.source if entry else ""


def mount_target(value: str) -> str:
    entry = mount_entry(value)
    return entry.target if entry else ""


def mount_line(node: str) -> str:
    """The entry that binds `node` (`/dev/nvidia0`, or `/dev/nvidia-caps/` for a directory)
    at the same place in the container; `optional` so a node missing at start is skipped
    rather than failing the container."""
    path = node.rstrip("/")
    create = "dir" if node.endswith("/") else "file"
    return f"{path} {path.lstrip('/')} none bind,optional,create={create}"


def node_order(text: str) -> list[tuple[int, str]]:
    """Numbers compare as numbers: nvidia2 before nvidia10. A run of digits compares by its
    length without leading zeros, then its digits: the order of the numbers, of any length,
    with no conversion (a device name is the host's text)."""
    return [
        (len(part.lstrip("0")), part.lstrip("0"))
        if part.isascii() and part.isdigit()
        else (-1, part)
        for part in re.split(r"([0-9]+)", text)
    ]


# One /proc/devices text is asked for several times per plan (allow lines, mounts, notes),
# and a fleet's hosts mostly share it: parsed once. The answers are shared, never changed.
@lru_cache(maxsize=16)
def char_majors(proc_devices: str) -> dict[int, list[str]]:
    """Major -> driver names, from the `Character devices:` part of /proc/devices."""
    majors: dict[int, list[str]] = {}
    in_char = False
    for line in proc_devices.splitlines():
        if line.strip().endswith("devices:"):
            in_char = line.strip() == "Character devices:"
            continue
        parts = line.split(None, 1)
        major = numbers.unsigned(parts[0]) if in_char and len(parts) == 2 else None
        if major is not None:
            majors.setdefault(major, []).append(parts[1].strip())
    return majors


@lru_cache(maxsize=16)
def nvidia_majors(proc_devices: str) -> dict[int, str]:
    return {
        major: next(n for n in names if n.startswith("nvidia"))
        for major, names in char_majors(proc_devices).items()
        if any(n.startswith("nvidia") for n in names)
    }


def rule_major(value: str) -> int | None:
    """The major of a `c 195:* rwm` rule; None for block or wildcard rules."""
    rule = device_rule(value)
    if rule is None or rule.type != "c":
        return None
    return rule.major


def allow_line(major: int) -> str:
    return f"c {major}:* rwm"


# The NVIDIA frontend is always 195; nvidia-uvm, nvidia-caps, nvidia-nvswitch get dynamic majors,
# which the kernel hands out from 254 down to 234 and then from 511 down to 384.
NVIDIA_STATIC = 195
DYNAMIC = (range(234, 255), range(384, 512))


def is_dynamic(major: int) -> bool:
    return any(major in r for r in DYNAMIC)


def replace_key(config: Config, key: str, owned: frozenset[str] | None, lines: list[str]) -> str:
    """The text of `config` with its main-section `key` items whose meaning is in `owned` (every
    `key` item when `owned` is None) made to read as `lines`: an item that already means one of
    `lines` keeps its bytes and its place, the others go, and each of `lines` no item means is
    written in the file's syntax after the last item kept, else at the first owned item's
    place, else at the end of the main section. In a plain LXC config a line of `key` in
    Proxmox's syntax (which LXC refuses, and which tune itself wrote before it knew better) goes
    when it says one of `owned` or `lines`: the line in LXC's syntax replaces it. Comments,
    order, other keys and snapshot sections keep every byte, so undoing an edit is putting the
    prior bytes back."""
    by_line = {i.line: i for i in config.items if i.key == key}
    misspelt = {i.line: i for i in _misspelt(config) if i.key == key}
    wanted = set(lines)
    kept: set[str] = set()
    at: int | None = None
    out: list[str] = []
    for index, line in enumerate(config.lines[: config.main_end]):
        item = by_line.get(index)
        read_as = None if item is None else meaning(key, item.value)
        wrong = misspelt.get(index)
        if wrong is not None and (owned is None or meaning(key, wrong.value) in owned | wanted):
            if at is None:
                at = len(out)
            continue
        if read_as is None or (owned is not None and read_as not in owned):
            out.append(line)
            continue
        if read_as in wanted:
            kept.add(read_as)
            out.append(line)
            at = len(out)
        elif at is None:
            at = len(out)
    new = [config.syntax.line(key, value) for value in lines if value not in kept]
    if at is None:
        at = len(out)
        while at > 0 and not out[at - 1].strip():
            at -= 1  # before the blank lines that separate the main section from a snapshot
    if at > 0 and not out[at - 1].endswith("\n") and new:
        out[at - 1] += "\n"
    return "".join(out[:at] + new + out[at:] + list(config.lines[config.main_end :]))


def _misspelt(config: Config) -> list[Item]:
    """The lines of a plain LXC config that LXC refuses and Proxmox would read as `lxc.*`
    items (`lxc.prlimit.memlock: unlimited`), as Proxmox reads them."""
    if config.syntax is not Syntax.LXC:
        return []
    found = []
    for refused in config.unreadable:
        match = _PVE_LXC_ITEM.fullmatch(config.lines[refused.line].rstrip("\n"))
        if match and match.group(2) == ":":
            found.append(Item(match.group(1), match.group(3), refused.line))
    return found


def nvidia_allow_lines(config: Config, proc_devices: str, mounts: bool | None = None) -> list[str]:
    """The allow lines in the main section that are NVIDIA's, as LXC reads them: for a major
    /proc/devices lists as `nvidia*`, for 195, and, in a container that mounts NVIDIA nodes, for
    a dynamic major no device has any more (what a kernel or driver upgrade leaves behind).
    `mounts` when the container will mount NVIDIA nodes whatever `config` says now."""
    majors = char_majors(proc_devices)
    nvidia = nvidia_majors(proc_devices)
    if mounts is None:
        mounts = mounts_nvidia(config)
    lines = []
    for item in config.items:
        major = rule_major(item.value) if item.key == ALLOW else None
        if major is None:
            continue
        stale = major not in majors and is_dynamic(major) and mounts
        if major in nvidia or major == NVIDIA_STATIC or stale:
            lines.append(meaning(ALLOW, item.value))
    return sorted(set(lines), key=_by_major)


def _by_major(line: str) -> tuple[int, str]:
    return (rule_major(line) or 0, line)


def device_lines(
    config: Config, devices: str, nodes: tuple[str, ...]
) -> dict[str, tuple[list[str], list[str]]]:
    """Key -> (NVIDIA's lines in `config` now, the lines wanted), each as LXC reads it, for the
    allow key and, when the host has any /dev/nvidia* node, the mount key: with none at all
    (nothing has created them yet, or a snapshot taken without /dev) the mounts are left as
    they are. A free dynamic major is judged by the mounts the edit leaves, so one apply
    converges."""
    lines: dict[str, tuple[list[str], list[str]]] = {}
    after = config
    if nodes:
        mounts = (nvidia_mount_lines(config), mount_lines(nodes))
        text = replace_key(config, MOUNT, frozenset(mounts[0]), mounts[1])
        after = parse(text, config.syntax)
        lines[MOUNT] = mounts
    lines[ALLOW] = (
        nvidia_allow_lines(config, devices, mounts_nvidia(after)),
        [allow_line(m) for m in sorted(nvidia_majors(devices))],
    )
    return dict(sorted(lines.items(), key=lambda item: item[0] != ALLOW))


def mount_lines(nodes: tuple[str, ...]) -> list[str]:
    """The NVIDIA mount entries a container needs for the host's `/dev/nvidia*` nodes."""
    return sorted((mount_line(node) for node in nodes), key=node_order)
