"""Persistence: the files tune owns so that runtime values survive a reboot.

Each knob kind says which lines it needs (`Kind.persist`); this module owns the files, their
header and contents, and the warning about other sysctl.d files. `kinds/files.py` turns them
into ordinary changes of kind `file` (`file:/etc/sysctl.d/90-tune.conf`): planned, journaled,
read back and rolled back like any knob. tune owns each file entirely and never edits a file
it does not own (`/etc/sysctl.conf` in particular, which Debian 13 no longer reads).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.changes import Note
from ..core.files import Files
from ..facts.systemd import conf_files

SYSCTL = "/etc/sysctl.d/90-tune.conf"
MODULES_LOAD = "/etc/modules-load.d/tune.conf"
MODPROBE = "/etc/modprobe.d/tune.conf"
TMPFILES = "/etc/tmpfiles.d/tune.conf"
UDEV = "/etc/udev/rules.d/90-tune-pci.rules"
# NVML forgets GPU settings at every boot: the daemon keeps persistence mode, a oneshot the rest.
# Not `90-tune.conf`: that is the `services` kind's drop-in for a unit's limits, which a
# profile may give nvidia-persistenced too (one file for both, each write loses the other's).
PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/90-tune-gpus.conf"
GPU_UNIT = "/etc/systemd/system/tune-gpus.service"
OWNED = (SYSCTL, MODULES_LOAD, MODPROBE, TMPFILES, UDEV, PERSISTENCED_DROPIN, GPU_UNIT)
# The NVIDIA driver's NVreg_ options: written by the reboot-phase kind `nvreg` itself, with the
# initramfs rebuilt after, not by the runtime phase with the files above.
NVREG = "/etc/modprobe.d/tune-nvidia.conf"

# systemd-sysctl reads *.conf from these directories sorted by file name; a name in an earlier
# directory hides the same name in a later one, and for one key the last file read wins.
SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d")

WHY = {
    SYSCTL: "sets the sysctls at boot (systemd-sysctl)",
    MODULES_LOAD: "loads the modules at boot (systemd-modules-load)",
    MODPROBE: "module options and blacklist, read by modprobe",
    TMPFILES: "writes the sysfs, huge page, cpufreq and cpuidle values at boot (systemd-tmpfiles)",
    UDEV: "repeats the PCIe writes whenever a matching device is added or bound (udev)",
    PERSISTENCED_DROPIN: "starts nvidia-persistenced with the persistence mode (and tune-gpus)",
    GPU_UNIT: "sets the GPUs' power limits and compute modes at boot, after nvidia-persistenced",
}


@dataclass(frozen=True)
class Persisted:
    """One line a knob needs in one of the owned files."""

    file: str
    line: str
    # The change whose value the line keeps at boot ("module:nvidia_peermem"), where a run can
    # leave that change out (`apply --skip-missing`): then the line is left out with it.
    knob: str = ""


def modprobe_options(module: str, params: Mapping[str, str]) -> str:
    """The modprobe.d line that gives `module` its `params`; a value with whitespace in quotes,
    which the kernel's parse_args takes off."""
    words = (
        f'{k}="{v}"' if any(c.isspace() for c in v) or not v else f"{k}={v}"
        for k, v in params.items()
    )
    return f"options {module} {' '.join(words)}"


def tmpfiles_write(path: str, value: str, knob: str = "") -> Persisted:
    """A tmpfiles.d `w` line that writes `value` to `path` (a glob) at boot.

    systemd-tmpfiles expands specifiers in the path and the argument (`%a` becomes `x86-64`,
    an unknown one such as `%q` makes it refuse the line): `%%` is a literal `%`. The argument
    is the rest of the line, whitespace included, except for whitespace before it, which only
    a C escape keeps."""
    argument = value.replace("%", "%%")
    stripped = argument.lstrip(" \t")
    lead = "".join(f"\\x{ord(c):02x}" for c in argument[: len(argument) - len(stripped)])
    return Persisted(TMPFILES, f"w {path.replace('%', '%%')} - - - - {lead}{stripped}", knob)


def header(profile: str) -> str:
    return f"# Written by tune for profile {profile}. tune owns this file: edits are overwritten.\n"


def contents(
    profile: Any, files: Files, leaving_out: frozenset[str] = frozenset()
) -> dict[str, str]:
    """The text each owned file should hold for `profile`, less the lines of the changes
    `leaving_out` names (a run that skips them must not load them at the next boot); files
    with no line are absent."""
    lines: dict[str, list[str]] = {}
    for kind, spec in profile.sections():
        for item in kind.persist(spec, files):
            if item.knob in leaving_out:
                continue
            lines.setdefault(item.file, [])
            if item.line not in lines[item.file]:
                lines[item.file].append(item.line)
    return {
        path: header(profile.name) + "".join(f"{line}\n" for line in lines[path])
        for path in OWNED
        if lines.get(path)
    }


def sysctl_key(raw: str) -> str:
    """sysctl.d keys may use `/` as the separator (then a `.` is part of a name)."""
    key = raw.strip().lstrip("-")
    slash, dot = key.find("/"), key.find(".")
    if slash != -1 and (dot == -1 or slash < dot):
        return ".".join(p.replace(".", "/") for p in key.split("/"))
    return key


def assignments(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#;" or "=" not in stripped:
            continue
        key, _, value = stripped.partition("=")
        found[sysctl_key(key)] = value.strip()
    return found


def later_sysctl_files(ours: str, files: Files) -> list[Note]:
    """Warn about every other sysctl.d file that sets one of our keys and is read after ours."""
    ours_name = posixpath.basename(SYSCTL)
    keys = assignments(ours)
    notes = []
    for path in conf_files(files, SYSCTL_DIRS):
        if posixpath.basename(path) <= ours_name or path == SYSCTL:
            continue
        for key, value in assignments(files.text(path) or "").items():
            if key in keys:
                notes.append(
                    Note(
                        f"{path} also sets {key} = {value} and is read after {SYSCTL}: "
                        "its value wins at boot.",
                        f"sysctl:{key}",
                    )
                )
    return notes
