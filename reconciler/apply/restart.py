"""`tune apply --restart-services`: after the apply, restart each service whose running
limits are not yet the ones its configuration sets (the plan's pending restarts), and
systemd-logind when the run changed its settings; then read the new main process's limits
back. Each command and what it said is recorded in the run's journal. A restart is not undone
by a rollback: a rolled-back drop-in shows as a pending restart again."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from ..core.changes import Pending
from ..hosts.base import Host
from ..kinds.services import KIND as SERVICES
from ..kinds.services import LOGIND, restarts
from ..profile.load import LoadedProfile
from ..steps.ops import Step
from ..steps.records import ServiceRan
from .engines import Engine
from .journal import Journal


@dataclass
class Restarted:
    held: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def pending_restarts(host: Host, loaded: LoadedProfile) -> list[Pending]:
    """The restarts the profile's `services` wait for, from a read of that section alone: no
    other kind's knob waits for a restart, and this runs twice per `--restart-services`."""
    spec = loaded.profile.spec(SERVICES)
    if not spec:
        return []
    found = SERVICES.compare(spec, host.fetch(SERVICES.request(spec))).pending
    return [p for p in found if p.restart]


def to_restart(pending: list[Pending], steps: tuple[Step, ...]) -> list[str]:
    """The units to restart: those `pending` waits for, and logind when `steps` set one of
    its settings (what it runs with cannot be read from a file)."""
    units = restarts(pending)
    if any(s.id.startswith("service:logind:") for s in steps):
        units.append(LOGIND)
    return units


def restart_services(
    engine: Engine, loaded: LoadedProfile, units: list[str], journal: Journal | None
) -> Restarted:
    """Restart each of `units` through the host's engine (over SSH, a script with each word
    quoted), then check that none still waits for its restart."""
    host = engine.host
    done = Restarted()
    restarted = []
    for unit in units:
        argv = ("systemctl", "restart", unit)
        ran = engine.run_command(argv)
        if journal is not None:
            journal.record(ServiceRan(unit, argv, ran.returncode, ran.stdout, ran.stderr))
        if ran.returncode != 0:
            done.failed.append(f"`{shlex.join(argv)}` failed: {ran.said}")
        else:
            restarted.append(unit)
    still = pending_restarts(host, loaded)
    for unit in restarted:
        left = [p for p in still if p.restart == unit]
        if left:
            done.failed += [
                f"{unit} restarted, but its main process runs with {p.target.split(':', 1)[1]}="
                f"{p.running} (configured {p.configured})"
                for p in left
            ]
        else:
            done.held.append(f"{unit} restarted with its configured limits")
    return done
