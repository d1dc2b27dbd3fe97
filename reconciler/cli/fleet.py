"""`tune apply --runtime-only -H h1 -H h2 ...`: a fleet, each host through the stages one host
goes through (`reconciler.apply.orchestration`).

Every host is prepared (`prepare_host`: tune's state checked, observe in one round trip, the
steps decided; a host in sync stores the profile) and, once the fleet is confirmed, its work run
(`run_work`: the target runs the steps detached and the controller polls its journal). Between
the two the controller shows what will change on every host and asks once for the whole fleet,
keeping the connections open. Hosts are worked on `--forks` at a time; a host that cannot be
reached, or whose apply rolls back, is that host's result and never stalls the others.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence

import click

from ..apply.engine import Work
from ..apply.engines import ApplyResult, Engine, engine_for
from ..apply.orchestration import ApplyJob, Show, prepare_host, run_work
from ..hosts.base import Host
from ..hosts.fleet import HostResult, fleet_exit_code, for_each_host
from ..render import RENDERERS
from ..render import fleet as fleet_render
from ..render.apply import applied_part, dry_run_text
from .remote import progress_on_terminal


def apply_hosts(
    hosts: Sequence[Host],
    job: ApplyJob,
    *,
    timeout: float,
    forks: int,
    yes: bool,
    as_json: bool = False,
) -> int:
    """Apply `job` to every host; exit code 1 if any host failed, else 0. `as_json`: standard
    output is one JSON array (an object per host) and nothing else; a confirmation question
    goes to standard error. `timeout`: each host's command timeout."""
    engines = {host.name: engine_for(host, timeout=timeout) for host in hosts}
    with contextlib.ExitStack() as held:
        try:
            return _fleet(hosts, engines, held, job, forks=forks, yes=yes, as_json=as_json)
        finally:
            for host in hosts:
                host.close()


def _fleet(
    hosts: Sequence[Host],
    engines: dict[str, Engine],
    held: contextlib.ExitStack,
    job: ApplyJob,
    *,
    forks: int,
    yes: bool,
    as_json: bool,
) -> int:
    """Exit code: 1 if any host failed (unreachable, refused, rolled back), else 0. `held`:
    what each engine holds from its host's preparation to its run (a lock)."""
    progress = progress_on_terminal()
    color = sys.stdout.isatty() and not as_json
    dry_run = job.dry_run

    def prepare(host: Host) -> Work:
        engine = engines[host.name]
        if not dry_run:
            # From a worker thread: entering only appends its exit to the stack's deque.
            held.enter_context(engine.session())
        return prepare_host(engine, job)

    prepared = for_each_host(hosts, prepare, forks, progress, keep_open=True)
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
    total = sum(len(works[h.name].planned) for h in changing)
    if not yes and sys.stdin.isatty():
        question = f"Apply {total} changes to {len(changing)} hosts?"
        click.confirm(question if as_json else f"\n{question}", abort=True, err=as_json)

    def run(host: Host) -> ApplyResult:
        return run_work(engines[host.name], job, works[host.name], Show())[0]

    done = {r.name: r for r in for_each_host(changing, run, forks, progress)}
    results = [_outcome(r, done) for r in prepared]
    if as_json:
        click.echo(fleet_render.applied_json(results, plans), nl=False)
    else:
        click.echo("\n" + fleet_render.applied(results, color), nl=False, color=color)
    return fleet_exit_code(results, lambda _: True)


def _outcome(
    prepared: HostResult[Work], applied: dict[str, HostResult[ApplyResult]]
) -> HostResult[ApplyResult]:
    if prepared.name in applied:
        return applied[prepared.name]
    if prepared.error is not None:
        return HostResult(prepared.name, error=prepared.error)
    return HostResult(prepared.name, value=ApplyResult(None, 0))
