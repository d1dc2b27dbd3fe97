"""`tune apply --runtime-only -H h1 -H h2 ...`: a fleet, each host through one per-host path.

Every host goes through the same two steps of `RemoteApply`: `prepare` (observe in one round
trip, turn the plan into steps) and `apply` (`sh_engine.apply_remote`: the target runs the
steps detached and the controller polls its journal). Between the two the controller shows what
will change on every host and asks once for the whole fleet, keeping the connections open.
Hosts are worked on `--forks` at a time; a host that cannot be reached, or whose apply rolls
back, is that host's result and never stalls the others. One -H host goes through
`cli.apply._apply_remote` instead, which also does the reboot phase, `--reboot` and probes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import click

from ..apply.engine import Work, prepare
from ..apply.journal import before_apply
from ..apply.sh_engine import apply_remote
from ..hosts.base import Host
from ..hosts.fleet import HostResult, fleet_exit_code, for_each_host
from ..hosts.shell import ShellHost
from ..profile.load import LoadedProfile
from ..render import RENDERERS
from ..render import fleet as fleet_render
from ..render.apply import applied_part, dry_run_text
from .remote import progress_on_terminal


@dataclass(frozen=True)
class HostApplied:
    """What an apply came to on one host."""

    run_id: str | None  # None: the host was already in sync, no run was started
    changes: int


@dataclass(frozen=True)
class RemoteApply:
    """The apply the command line asked for, the same for every host."""

    loaded: LoadedProfile
    with_persistence: bool
    timeout: float  # how long to wait for a host to finish its run
    after_interrupted: bool = False  # apply over a run that was interrupted (`tune apply`)
    dry_run: bool = False

    def prepare(self, host: Host) -> Work:
        """Observe and decide the steps; the target checks their requirements when it starts.
        As on one host, a host whose last run has no end is refused first, even one with
        nothing left to change: "in sync" would hide the changes that run left."""
        if not self.dry_run:
            before_apply(host, after_interrupted=self.after_interrupted, locked=False)
        return prepare(
            host,
            self.loaded,
            runtime_only=True,
            with_persistence=self.with_persistence,
            preflight_here=False,
        )

    def apply(self, host: Host, work: Work) -> HostApplied:
        """Run `work` on the host; `ApplyFailed` (exit 3) when the target rolled it back."""
        if not work.steps:
            return HostApplied(None, 0)
        assert isinstance(host, ShellHost)
        done = apply_remote(host, work, self.loaded, phase="runtime", timeout=self.timeout)
        return HostApplied(done.run_id, done.changes - len(done.unsupported))


def apply_hosts(
    hosts: Sequence[Host],
    job: RemoteApply,
    *,
    forks: int,
    yes: bool,
    dry_run: bool,
    as_json: bool = False,
) -> int:
    """Apply `job` to every host; exit code 1 if any host failed, else 0. `as_json`: standard
    output is one JSON array (an object per host) and nothing else; a confirmation question
    goes to standard error."""
    try:
        return _fleet(hosts, job, forks=forks, yes=yes, dry_run=dry_run, as_json=as_json)
    finally:
        for host in hosts:
            host.close()


def _fleet(
    hosts: Sequence[Host], job: RemoteApply, *, forks: int, yes: bool, dry_run: bool, as_json: bool
) -> int:
    """Exit code: 1 if any host failed (unreachable, refused, rolled back), else 0."""
    progress = progress_on_terminal()
    color = sys.stdout.isatty() and not as_json
    prepared = for_each_host(hosts, job.prepare, forks, progress, keep_open=True)
    works = {r.name: r.value for r in prepared if r.value is not None}
    plans = [
        HostResult(r.name, value=applied_part(r.value), error=r.error)
        if r.value is not None
        else HostResult(r.name, error=r.error)
        for r in prepared
    ]
    if as_json and dry_run:
        click.echo(fleet_render.as_json(plans), nl=False)
        return fleet_exit_code(prepared, lambda _: True)
    if not as_json:
        click.echo(fleet_render.text(plans, color, RENDERERS["text"]), nl=False, color=color)
    if dry_run:
        for host in hosts:
            work = works.get(host.name)
            if work is not None and work.steps:
                click.echo(f"\n{dry_run_text(work.steps, host)}", nl=False)
        return fleet_exit_code(prepared, lambda _: True)
    changing = [h for h in hosts if (w := works.get(h.name)) is not None and w.steps]
    if not changing:
        if as_json:
            click.echo(fleet_render.applied_json([_outcome(r, {}) for r in prepared], plans))
        else:
            click.echo("Nothing to apply.")
        return fleet_exit_code(prepared, lambda _: True)
    total = sum(len(works[h.name].steps) for h in changing)
    if not yes and sys.stdin.isatty():
        question = f"Apply {total} changes to {len(changing)} hosts?"
        click.confirm(question if as_json else f"\n{question}", abort=True, err=as_json)
    done = {
        r.name: r
        for r in for_each_host(changing, lambda h: job.apply(h, works[h.name]), forks, progress)
    }
    results = [_outcome(r, done) for r in prepared]
    if as_json:
        click.echo(fleet_render.applied_json(results, plans), nl=False)
    else:
        click.echo("\n" + fleet_render.applied(results, color), nl=False, color=color)
    return fleet_exit_code(results, lambda _: True)


def _outcome(
    prepared: HostResult[Work], applied: dict[str, HostResult[HostApplied]]
) -> HostResult[HostApplied]:
    if prepared.name in applied:
        return applied[prepared.name]
    if prepared.error is not None:
        return HostResult(prepared.name, error=prepared.error)
    return HostResult(prepared.name, value=HostApplied(None, 0))
