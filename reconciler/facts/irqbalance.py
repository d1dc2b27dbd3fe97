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

from collections.abc import Iterable

from ..hosts.files import Files, Request
from ..hosts.shell import quoted
from . import systemd
from .pci import ADDRESS

UNIT = "irqbalance.service"
POLICY = "/etc/tune/irqbalance-policy"
# After services' 90-tune.conf, so that this drop-in's ExecStart is the one systemd keeps.
DROPIN = f"{systemd.ADMIN}/{UNIT}.d/91-tune-irqbalance.conf"
OPTION = f"--policyscript={POLICY}"


def request() -> Request:
    return systemd.request(UNIT) | Request.of(POLICY)


def exec_start(files: Files, unit: systemd.Unit) -> str | None:
    """The command line systemd starts irqbalance with, leaving tune's own drop-in out (it
    replaces this line): the last `ExecStart=` after the last empty one that resets the list;
    None when there is none."""
    start: str | None = None
    for path, key, value in systemd.assignments(files, unit, "Service"):
        if key == "ExecStart" and path != DROPIN:
            start = value or None
    return start


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
