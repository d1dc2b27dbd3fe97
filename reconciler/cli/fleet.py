"""`tune apply --runtime-only -H h1 -H h2 ...` on the terminal: what every host will change,
one question for the whole fleet, what each host came to (`apply.orchestration.apply_fleet`
does the work, each host through the stages one host goes through)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from ..apply.engine import Work
from ..apply.engines import engine_for
from ..apply.orchestration import ApplyJob, FleetShow, apply_fleet
from ..hosts.base import Host
from ..hosts.fleet import HostResult, fleet_exit_code
from ..plan.model import Plan
from ..render import RENDERERS
from ..render import fleet as fleet_render
from ..render.apply import applied_part, dry_run_text
from .consent import confirm
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
    show = FleetTerminal(hosts, job.dry_run, yes=yes, as_json=as_json)
    try:
        done = apply_fleet(
            [engine_for(host, timeout=timeout) for host in hosts],
            job,
            show,
            forks=forks,
            progress=progress_on_terminal(),
        )
    finally:
        for host in hosts:
            host.close()
    if job.dry_run:
        return fleet_exit_code(done.prepared, lambda _: True)
    if as_json:
        click.echo(fleet_render.applied_json(done.applied, show.plans), nl=not done.ran)
    elif not done.ran:
        click.echo("Nothing to apply.")
    else:
        color = show.color
        click.echo("\n" + fleet_render.applied(done.applied, color), nl=False, color=color)
    return fleet_exit_code(done.applied, lambda _: True)


class FleetTerminal(FleetShow):
    """The plans table (or, for a dry run in JSON, the plans), a dry run's operations, and
    the one question."""

    def __init__(self, hosts: Sequence[Host], dry_run: bool, *, yes: bool, as_json: bool) -> None:
        self.hosts = hosts
        self.dry_run = dry_run
        self.yes = yes
        self.as_json = as_json
        self.color = sys.stdout.isatty() and not as_json
        self.plans: list[HostResult[Plan]] = []

    def prepared(self, prepared: Sequence[HostResult[Work]]) -> None:
        self.plans = [
            HostResult(r.name, value=applied_part(r.value), error=r.error)
            if r.value is not None
            else HostResult(r.name, error=r.error)
            for r in prepared
        ]
        if self.as_json:
            if self.dry_run:
                click.echo(fleet_render.as_json(self.plans), nl=False)
            return
        color = self.color
        click.echo(fleet_render.text(self.plans, color, RENDERERS["text"]), nl=False, color=color)
        if not self.dry_run:
            return
        works = {r.name: r.value for r in prepared if r.value is not None}
        for host in self.hosts:
            work = works.get(host.name)
            if work is not None and work.steps:
                click.echo(f"\n{dry_run_text(work.steps, host)}", nl=False)

    def confirm(self, changes: int, hosts: int) -> None:
        question = f"Apply {changes} changes to {hosts} hosts?"
        if not self.as_json:
            question = f"\n{question}"
        confirm(question, yes=self.yes, command="tune apply", err=self.as_json)
