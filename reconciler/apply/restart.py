"""`tune apply --restart-services`: after the apply, restart each service whose running
limits are not yet the ones its configuration sets (the plan's pending restarts), and
systemd-logind when the run changed its settings; then read the new main process's limits
back. Each command and what it said is recorded in the run's journal. A restart is not undone
by a rollback: a rolled-back drop-in shows as a pending restart again."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from functools import reduce
from operator import or_

from ..core.changes import Pending
from ..core.files import Request
from ..hosts.base import Host
from ..kinds import in_profile, services_to_restart
from ..profile.load import LoadedProfile
from ..steps.ops import Step
from ..steps.records import ServiceRan
from .engines import Engine
from .journal import Journal, run_ids


@dataclass
class Restarted:
    held: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def pending_restarts(host: Host, loaded: LoadedProfile) -> list[Pending]:
    """The restarts the profile waits for, from one read of the sections whose kinds may find
    one (`Kind.waits_for_restarts`) alone: this runs twice per `--restart-services`."""
    profile = loaded.profile
    specs = [(k, profile.spec(k)) for k in in_profile(profile, False) if k.waits_for_restarts]
    specs = [(kind, spec) for kind, spec in specs if spec]
    if not specs:
        return []
    files = host.fetch(reduce(or_, (kind.request(spec) for kind, spec in specs), Request()))
    found = [p for kind, spec in specs for p in kind.compare(spec, files).pending]
    return [p for p in found if p.restart]


def to_restart(pending: list[Pending], steps: tuple[Step, ...]) -> list[str]:
    """The units to restart, once each: those `pending` waits for, and those whose kinds say
    `steps` changed what they read only when they start (`Kind.services_to_restart`)."""
    units = [p.restart for p in pending if p.restart] + services_to_restart(steps)
    return list(dict.fromkeys(units))


def restart_services(
    engine: Engine, loaded: LoadedProfile, units: list[str], run_id: str | None
) -> Restarted:
    """Restart each of `units` through the host's engine (over SSH, a script with each word
    quoted), then check that none still waits for its restart. Each command goes to the
    journal of run `run_id` (by default the host's newest; none on a host without runs), which
    then ends `applied` again: its records follow the end the apply wrote."""
    host = engine.host
    if run_id is None:
        runs = run_ids(host)
        run_id = runs[-1] if runs else None
    journal = Journal(host, run_id) if run_id else None
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
    if journal is not None:
        journal.end("applied")
    return done
