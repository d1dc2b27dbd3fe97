"""LXC container configs (Proxmox `/etc/pve/lxc/<id>.conf` or a plain LXC `config`), the
character-device majors in `/proc/devices` that their `devices.allow` lines refer to, and the
`/dev/nvidia*` nodes their `mount.entry` lines bind into the container."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

PROC_DEVICES = "/proc/devices"
# Proxmox's containers, by id, and plain LXC's, by name.
PVE_CONFIGS = "/etc/pve/lxc/*.conf"
LXC_CONFIGS = "/var/lib/lxc/*/config"
ALLOW = "lxc.cgroup2.devices.allow"
MEMLOCK = "lxc.prlimit.memlock"
MOUNT = "lxc.mount.entry"
# Observed by name and type only (`Request.nodes`); a directory ends with "/".
NVIDIA_NODES = "/dev/nvidia*"

_ITEM = re.compile(r"\s*([A-Za-z0-9_.-]+)\s*[:=]\s?(.*?)\s*$")
_SECTION = re.compile(r"\s*\[[^\]]+\]\s*$")
# The bind source of an NVIDIA node directly under /dev (nvidia0, nvidia-uvm, nvidia-caps); a
# mount of something deeper (one capability under nvidia-caps/) is the user's own.
_NVIDIA_SOURCE = re.compile(r"/dev/nvidia[^/\s]*")
_DEVICE_RULE = re.compile(r"([abc])\s+(\d+|\*):(\d+|\*)\s+([rwm]+)")


# Where LXC and Proxmox keep container configs, in directories only root can change:
# Proxmox's cluster file system (this node's view, and every node's), LXC's lxcpath for root,
# and /etc/lxc (default.conf, the template of new containers). A config anywhere else must read
# as one; an unprivileged user's lxcpath (~/.local/share/lxc) too, as that user decides what
# its names are (a link to /etc/shadow there made apply copy the file into the user's home).
STANDARD_PLACES = re.compile(
    r"/etc/pve/(nodes/[^/]+/)?lxc/[0-9]+\.conf"
    r"|/var/lib/lxc/[^/]+/config"
    r"|/etc/lxc/[^/]+"
    r"|/root/\.local/share/lxc/[^/]+/config"
)
# A line of a config: LXC's `lxc.key = value`, or Proxmox's `key: value` (its own keys and
# `lxc.*` ones), a snapshot section `[name]`, a comment or nothing.
_CONFIG_LINE = re.compile(
    r"\s*(lxc\.[A-Za-z0-9_.-]+\s*=.*|[a-z][a-z0-9_.-]*: .*|\[[^\]]+\]|#.*|)\s*"
)


def proxmox_config(container: str) -> str:
    """The config of the Proxmox container `container` (an id) on this node."""
    return PVE_CONFIGS.replace("*", container)


def is_standard_place(path: str) -> bool:
    return STANDARD_PLACES.fullmatch(path) is not None


def foreign_line(text: str) -> int | None:
    """The 1-based number of the first line that no LXC or Proxmox config holds (`root:x:0:0`
    of /etc/passwd), 0 for a file with no setting at all, None for a config."""
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if not _CONFIG_LINE.fullmatch(line):
            return number
    return None if items(text) else 0


@dataclass(frozen=True)
class Item:
    key: str
    value: str
    line: int  # 0-based index in the file's lines


def main_section(text: str) -> list[str]:
    """The lines that configure the container now: everything before the first `[snapshot]`."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if _SECTION.match(line):
            return lines[:index]
    return lines


@lru_cache(maxsize=16)
def items(text: str) -> tuple[Item, ...]:
    """The main section's `key: value` items (parsed once per text; a plan asks ~4 times)."""
    found = []
    for index, line in enumerate(main_section(text)):
        if line.lstrip().startswith("#"):
            continue
        match = _ITEM.match(line)
        if match:
            found.append(Item(match.group(1), match.group(2), index))
    return tuple(found)


def last(text: str, key: str) -> str | None:
    values = [i.value for i in items(text) if i.key == key]
    return values[-1] if values else None


def mounts_nvidia(text: str) -> bool:
    """Whether the main section bind-mounts NVIDIA device nodes into the container."""
    return any(i.key == MOUNT and i.value.startswith("/dev/nvidia") for i in items(text))


def nvidia_mount_lines(text: str) -> list[str]:
    """The main section's mount entries of NVIDIA nodes, in `node_order`."""
    lines = {
        i.value.strip()
        for i in items(text)
        if i.key == MOUNT and _NVIDIA_SOURCE.fullmatch(mount_source(i.value))
    }
    return sorted(lines, key=node_order)


def mount_source(value: str) -> str:
    """The bind source of a mount entry (its first field)."""
    fields = value.split()
    return fields[0] if fields else ""


def mount_line(node: str) -> str:
    """The entry that binds `node` (`/dev/nvidia0`, or `/dev/nvidia-caps/` for a directory)
    at the same place in the container; `optional` so a node missing at start is skipped
    rather than failing the container."""
    path = node.rstrip("/")
    create = "dir" if node.endswith("/") else "file"
    return f"{path} {path.lstrip('/')} none bind,optional,create={create}"


def node_order(text: str) -> list[str | int]:
    """Numbers compare as numbers: nvidia2 before nvidia10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


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
        if in_char and len(parts) == 2 and parts[0].isdigit():
            majors.setdefault(int(parts[0]), []).append(parts[1].strip())
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
    match = _DEVICE_RULE.fullmatch(value.strip())
    if not match or match.group(1) != "c" or match.group(2) == "*":
        return None
    return int(match.group(2))


def allow_line(major: int) -> str:
    return f"c {major}:* rwm"


# The NVIDIA frontend is always 195; nvidia-uvm, nvidia-caps, nvidia-nvswitch get dynamic majors,
# which the kernel hands out from 254 down to 234 and then from 511 down to 384.
NVIDIA_STATIC = 195
DYNAMIC = (range(234, 255), range(384, 512))


def is_dynamic(major: int) -> bool:
    return any(major in r for r in DYNAMIC)


def _main_end(lines: list[str]) -> int:
    """Index of the first snapshot section header, or len(lines)."""
    for index, line in enumerate(lines):
        if _SECTION.match(line):
            return index
    return len(lines)


def _owned(line: str, key: str, values: frozenset[str] | None) -> bool:
    if line.lstrip().startswith("#"):
        return False
    match = _ITEM.match(line)
    if not match or match.group(1) != key:
        return False
    return values is None or match.group(2).strip() in values


def replace_key(text: str, key: str, owned: frozenset[str] | None, lines: list[str]) -> str:
    """`text` with the main-section `key` lines whose value is in `owned` (every `key` line when
    `owned` is None) replaced by `key: line` for each of `lines`, at the first one's place (else
    at the end of the main section). Comments, order, other keys and snapshot sections keep
    every byte, so undoing an edit is putting the prior bytes back."""
    kept = text.splitlines(keepends=True)
    end = _main_end([line.rstrip("\r\n") for line in kept])
    main, rest = kept[:end], kept[end:]
    at: int | None = None
    out: list[str] = []
    for line in main:
        if _owned(line.rstrip("\r\n"), key, owned):
            if at is None:
                at = len(out)
            continue
        out.append(line)
    new = [f"{key}: {value}\n" for value in lines]
    if at is None:
        at = len(out)
        while at > 0 and not out[at - 1].strip():
            at -= 1  # before the blank lines that separate the main section from a snapshot
        if at > 0 and not out[at - 1].endswith("\n"):
            out[at - 1] += "\n"
    return "".join(out[:at] + new + out[at:] + rest)


def nvidia_allow_lines(config: str, proc_devices: str, mounts: bool | None = None) -> list[str]:
    """The allow lines in the main section that are NVIDIA's: for a major /proc/devices lists
    as `nvidia*`, for 195, and, in a container that mounts NVIDIA nodes, for a dynamic major no
    device has any more (what a kernel or driver upgrade leaves behind). `mounts` when the
    container will mount NVIDIA nodes whatever `config` says now."""
    majors = char_majors(proc_devices)
    nvidia = nvidia_majors(proc_devices)
    if mounts is None:
        mounts = mounts_nvidia(config)
    lines = []
    for item in items(config):
        major = rule_major(item.value) if item.key == ALLOW else None
        if major is None:
            continue
        stale = major not in majors and is_dynamic(major) and mounts
        if major in nvidia or major == NVIDIA_STATIC or stale:
            lines.append(item.value.strip())
    return sorted(set(lines), key=_by_major)


def _by_major(line: str) -> tuple[int, str]:
    return (rule_major(line) or 0, line)


def device_lines(
    text: str, devices: str, nodes: tuple[str, ...]
) -> dict[str, tuple[list[str], list[str]]]:
    """Key -> (NVIDIA's lines in `text` now, the lines wanted) for the allow key and, when the
    host has any /dev/nvidia* node, the mount key: with none at all (nothing has created them
    yet, or a snapshot taken without /dev) the mounts are left as they are. A free dynamic
    major is judged by the mounts the edit leaves, so one apply converges."""
    lines: dict[str, tuple[list[str], list[str]]] = {}
    after = text
    if nodes:
        mounts = (nvidia_mount_lines(text), mount_lines(nodes))
        after = replace_key(text, MOUNT, frozenset(mounts[0]), mounts[1])
        lines[MOUNT] = mounts
    lines[ALLOW] = (
        nvidia_allow_lines(text, devices, mounts_nvidia(after)),
        [allow_line(m) for m in sorted(nvidia_majors(devices))],
    )
    return dict(sorted(lines.items(), key=lambda item: item[0] != ALLOW))


def mount_lines(nodes: tuple[str, ...]) -> list[str]:
    """The NVIDIA mount entries a container needs for the host's `/dev/nvidia*` nodes."""
    return sorted((mount_line(node) for node in nodes), key=node_order)
