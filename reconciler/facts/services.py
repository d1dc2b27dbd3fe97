"""Other tuning daemons that set the knobs tune sets: tuned, power-profiles-daemon and cpupower's
service. Whichever is active puts its own value back (tuned and cpupower when they start or
switch profile, power-profiles-daemon whenever the power profile changes), so a plan that sets
the same knob says so, with the fix.

Read from files, in the same batch as everything else: systemd's link for a running unit
(`/run/systemd/units/invocation:NAME.service`, listed, never opened), tuned's pid file, and for
tuned its active profile and the profiles' `tuned.conf` files (their `[sysctl]`, `[cpu]`, `[vm]`
and `[sysfs]` sections, and `include=`).
"""

from __future__ import annotations

import fnmatch
import re
from typing import TYPE_CHECKING, NamedTuple

from ..core.files import Files, Request
from .cpu import GOVERNOR
from .sysctl import key_of, path_of

if TYPE_CHECKING:
    import configparser

INVOCATION = "/run/systemd/units/invocation:{}.service"
TUNED_PID = "/run/tuned/tuned.pid"
TUNED_ACTIVE = "/etc/tuned/active_profile"
# tuned 2.23 moved profiles into profiles/; /etc overrides /usr/lib.
TUNED_PROFILES = (
    "/usr/lib/tuned/*/tuned.conf",
    "/usr/lib/tuned/profiles/*/tuned.conf",
    "/etc/tuned/*/tuned.conf",
    "/etc/tuned/profiles/*/tuned.conf",
)
THP = "/sys/kernel/mm/transparent_hugepage/enabled"
# What each daemon's fix is: stopping it for good, since a stopped daemon starts at the next boot.
FIXES = {
    "tuned": "tuned-adm off && systemctl disable --now tuned, or drop the setting from its profile",
    "power-profiles-daemon": "systemctl mask --now power-profiles-daemon",
    "cpupower": "systemctl disable --now cpupower",
}


# Options of any tuned unit, not settings of its plugin (tuned/units/unit.py).
UNIT_OPTIONS = {
    "type",
    "enabled",
    "replace",
    "drop",
    "devices",
    "devices_udev_regex",
    "cpuinfo_regex",
    "uname_regex",
    "script_pre",
    "script_post",
    "priority",
}
# tuned's vm plugin writes a dirty limit as bytes or as a ratio (`40%`), and the kernel zeroes
# the other of each pair.
_DIRTY = ("vm.dirty_bytes", "vm.dirty_ratio")
_BACKGROUND = ("vm.dirty_background_bytes", "vm.dirty_background_ratio")
VM_SYSCTLS = {
    "dirty_bytes": _DIRTY,
    "dirty_ratio": _DIRTY,
    "dirty_background_bytes": _BACKGROUND,
    "dirty_background_ratio": _BACKGROUND,
}


def request() -> Request:
    units = [INVOCATION.format(name) for name in FIXES]
    return Request.of(TUNED_PID, TUNED_ACTIVE, *TUNED_PROFILES, nodes=units)


class Manager(NamedTuple):
    """An active daemon and the knobs it sets: sysctl keys dotted, kernel file paths."""

    name: str
    detail: str
    sysctl: frozenset[str]
    paths: frozenset[str]

    def sets_sysctl(self, key: str) -> bool:
        return dotted(key) in self.sysctl

    def sets_path(self, path: str) -> bool:
        """`path` (a kernel file, or tune's own glob of them) is one this daemon writes."""
        return any(path == p or fnmatch.fnmatchcase(path, p) for p in self.paths)

    def note(self, knob: str) -> str:
        return (
            f"{self.name}{self.detail} is active and sets {knob} too: it will put its own value "
            f"back. Fix: {FIXES[self.name]}."
        )


def dotted(key: str) -> str:
    """A sysctl name in either form (`net/ipv4/conf/eth0.100/rp_filter`) as dotted."""
    return key_of(path_of(key))


def _running(files: Files, name: str) -> bool:
    return bool(files.node_paths(INVOCATION.format(name)))


def _tuned_confs(files: Files) -> dict[str, configparser.ConfigParser]:
    import configparser  # only where tuned is there to read: a plan of no such host skips it

    confs = {}
    for pattern in TUNED_PROFILES:  # later directories override earlier ones
        for path in files.glob(pattern):
            parser = configparser.ConfigParser(interpolation=None, strict=False)
            parser.optionxform = str  # type: ignore[assignment,method-assign]
            try:
                parser.read_string(files.text(path) or "")
            except configparser.Error:
                continue
            confs[path.rsplit("/", 2)[1]] = parser
    return confs


def _tuned(files: Files) -> Manager | None:
    active = (files.value(TUNED_ACTIVE) or "").split()
    if not active or not (_running(files, "tuned") or files.read(TUNED_PID) is not None):
        return None
    confs = _tuned_confs(files)
    sysctl: set[str] = set()
    paths: set[str] = set()
    seen: set[str] = set()
    pending = list(active)
    while pending:
        name = pending.pop()
        conf = confs.get(name)
        if name in seen or conf is None:
            continue
        seen.add(name)
        pending += re.split(r"[\s,]+", conf.get("main", "include", fallback="").strip())
        for section in conf.sections():
            # A unit's plugin is its `type`, else its name (`[sysctl.thunderx]` says type=sysctl).
            plugin = conf.get(section, "type", fallback=section)
            options = set(conf.options(section)) - UNIT_OPTIONS
            if plugin == "sysctl":
                sysctl.update(dotted(k) for k in options)
            elif plugin == "sysfs":
                paths.update(options)
            elif plugin == "cpu" and "governor" in options:
                paths.add(GOVERNOR)
            elif plugin == "vm":
                sysctl.update(s for option in options for s in VM_SYSCTLS.get(option, ()))
                if options & {"transparent_hugepages", "transparent_hugepage"}:
                    paths.add(THP)
    return Manager("tuned", f" (profile {' '.join(active)})", frozenset(sysctl), frozenset(paths))


def managers(files: Files) -> list[Manager]:
    """The daemons active on the host, with the knobs each sets."""
    found = []
    tuned = _tuned(files)
    if tuned is not None:
        found.append(tuned)
    for name in ("power-profiles-daemon", "cpupower"):
        if _running(files, name):
            found.append(Manager(name, "", frozenset(), frozenset({GOVERNOR})))
    return found
