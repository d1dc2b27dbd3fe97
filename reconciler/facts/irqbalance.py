"""irqbalance: how systemd starts it, and how it asks a policy script about each IRQ.

The distributions' units start it as `ExecStart=/usr/sbin/irqbalance --foreground
$IRQBALANCE_ARGS`, the arguments coming from an environment file the administrator owns
(`/etc/default/irqbalance` on Debian, `/etc/sysconfig/irqbalance` on Fedora and RHEL).
`--policyscript=PATH` makes irqbalance run PATH once for each IRQ it finds, through /bin/sh as
`exec PATH DEVICE IRQ` (classify.c, run_script_for_policy): DEVICE is the sysfs directory of
the IRQ's PCI function (`/sys/bus/pci/devices/0000:c2:00.0`; `/sys` for an IRQ without one),
and a `ban=true` line on its output makes irqbalance leave that IRQ where it is. Output of a
script that exits non-zero is ignored. It runs again for each IRQ that appears later (a driver
reload numbers its IRQs anew) and for all of them when irqbalance restarts, so a ban by device
address survives both, where `--banirq=N` does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..core.files import Files, Request
from ..core.quoting import quoted
from . import systemd
from .pci import ADDRESS

UNIT = "irqbalance.service"
POLICY = "/etc/tune/irqbalance-policy"
# After services' 90-tune.conf, so that this drop-in's ExecStart is the one systemd keeps.
DROPIN = f"{systemd.ADMIN}/{UNIT}.d/91-tune-irqbalance.conf"
OPTION = f"--policyscript={POLICY}"
# The environment files the units name (Debian's and upstream's defaults, Fedora's and RHEL's
# sysconfig, upstream's meson defaults with prefix /usr and /): where IRQBALANCE_ARGS is set.
ENV_FILES = (
    "/etc/default/irqbalance",
    "/etc/sysconfig/irqbalance",
    "/usr/lib/irqbalance/defaults.env",
    "/usr/etc/default/irqbalance.env",
    "/etc/default/irqbalance.env",
)
_ARGS = re.compile(r"\s*(?:export\s+)?IRQBALANCE_ARGS\s*=(.*)")


def request() -> Request:
    return systemd.request(UNIT) | Request.of(POLICY, *ENV_FILES)


def exec_start(files: Files, unit: systemd.Unit) -> str | None:
    """The command line systemd starts irqbalance with, leaving tune's own drop-in out (it
    replaces this line): the last `ExecStart=` after the last empty one that resets the list;
    None when there is none."""
    start: str | None = None
    for path, key, value in systemd.assignments(files, unit, "Service"):
        if key == "ExecStart" and path != DROPIN:
            start = value or None
    return start


def _names_policy(arguments: str) -> bool:
    """Whether irqbalance's `arguments` give it a policy script (`--policyscript=X`, `-l X`,
    `-lX`); a word is read without the quotes an environment file may put around it."""
    words = (w.strip("\"'") for w in arguments.split())
    return any(w.startswith(("--policyscript", "-l")) for w in words)


def own_policy(files: Files, unit: systemd.Unit) -> str | None:
    """The file that already gives irqbalance a policy script of its own (a command line in
    the unit or a drop-in other than tune's, or IRQBALANCE_ARGS in an environment file the unit
    reads); None when none does. irqbalance keeps only the last one it is given."""
    for path, key, value in systemd.assignments(files, unit, "Service"):
        if path == DROPIN:
            continue
        if key == "ExecStart" and _names_policy(value):
            return path
        if key == "EnvironmentFile":
            named = value.removeprefix("-")
            for line in (files.text(named) or "").splitlines():
                found = _ARGS.fullmatch(line)
                if found and _names_policy(found.group(1)):
                    return named
    return None


def dropin_text(start: str) -> str:
    """tune's drop-in: the unit's own command line, and tune's policy script last, so that it
    is the one irqbalance keeps whatever `$IRQBALANCE_ARGS` says."""
    return (
        "# Written by tune: irqbalance asks tune's policy script which IRQs to leave alone.\n"
        "# tune owns this file.\n"
        "[Service]\n"
        "ExecStart=\n"
        f"ExecStart={start} {OPTION}\n"
    )


def policy_script(addresses: Iterable[str]) -> str:
    """The policy script that bans every IRQ of the PCI functions at `addresses`. It compares
    its first argument's last component with fixed words and executes nothing it is given."""
    chosen = sorted(set(addresses))
    if not chosen:
        raise ValueError("no PCI address to ban")
    for address in chosen:
        if not ADDRESS.fullmatch(address):
            raise ValueError(f"not a PCI address: {address!r}")
    pattern = "|".join(quoted(a) for a in chosen)
    return (
        "#!/bin/sh\n"
        "# Written by tune; tune owns this file. irqbalance runs it for each IRQ as\n"
        "# SCRIPT DEVICE_SYSFS_PATH IRQ; ban=true leaves the IRQ where tune put it.\n"
        f'case "${{1##*/}}" in\n{pattern}) echo ban=true ;;\nesac\n'
        "exit 0\n"
    )
