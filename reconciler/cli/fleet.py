"""`tune apply --runtime-only -H h1 -H h2 ...` on the terminal: what every host will change,
one question for the whole fleet, what each host came to (`apply.orchestration.apply_fleet`
does the work, each host through the stages one host goes through)."""

from __future__ import annotations

from collections.abc import Sequence

import click

from ..apply.engines import engine_for
from ..apply.work import Work
from ..core.changes import Plan
from ..core.printable import printable
from ..core.words import counted
from ..flow.orchestration import ApplyJob, apply_fleet
from ..hosts.base import Host
from ..hosts.fleet import HostResult, fleet_exit_code
from ..render import RENDERERS
from ..render import fleet as fleet_render
from ..render.apply import applied_part, dry_run_text, step_entries
from ..render.documents import failed
from ..render.folding import changes_and_writes
from .consent import confirm
from .output import Output
from .remote import progress_on_terminal


def apply_hosts(
    hosts: Sequence[Host],
    job: ApplyJob,
    *,
    timeout: float,
    forks: int,
    yes: bool,
    out: Output,
    verbose: bool = False,
) -> int:
    """Apply `job` to every host; exit code 1 if any host failed, else 0. In JSON, the output
    is one array (a document per host) and nothing else; a confirmation question goes to
    standard error. `timeout`: each host's command timeout."""
    show = FleetTerminal(hosts, job.dry_run, yes=yes, out=out, verbose=verbose)
    try:
        done = apply_fleet(
            [engine_for(host, timeout=timeout) for host in hosts],
            job,
            show.confirm,
            forks=forks,
            progress=progress_on_terminal(out),
        )
    finally:
        for host in hosts:
            host.close()
    if not show.asked:
        show.prepared(done.prepared)
    if job.dry_run:
        return fleet_exit_code(done.prepared, lambda _: True)
    if out.json:
        out.echo(fleet_render.applied_json(done.applied, show.plans), nl=not done.ran)
    elif not done.ran:
        out.echo("Nothing to apply.")
    else:
        recap = fleet_render.applied(done.applied, out.color, show.plans, verbose=verbose)
        out.echo("\n" + recap, nl=False)
    return fleet_exit_code(done.applied, lambda _: True)


class FleetTerminal:
    """The plans table (or, for a dry run in JSON, the plans), a dry run's operations, and
    the one question."""

    def __init__(
        self,
        hosts: Sequence[Host],
        dry_run: bool,
        *,
        yes: bool,
        out: Output,
        verbose: bool = False,
    ) -> None:
        self.hosts = hosts
        self.verbose = verbose
        self.dry_run = dry_run
        self.yes = yes
        self.out = out
        self.plans: list[HostResult[Plan]] = []
        self.asked = False  # the question said what each host will change already

    def prepared(self, prepared: Sequence[HostResult[Work]]) -> None:
        self.plans = [
            HostResult(r.name, value=applied_part(r.value, checks=True), error=r.error)
            if r.value is not None
            else HostResult(r.name, error=r.error)
            for r in prepared
        ]
        out = self.out
        skipped = {r.name: r.value.skipped for r in prepared if r.value is not None}
        for name, left_out in skipped.items():
            for one in left_out:
                # Beside the JSON document, where the operator reads; the document lists them.
                click.echo(printable(f"{name}: {one.line}"), err=out.json or out.to_file)
        if out.json:
            if self.dry_run:
                documents = [
                    (
                        fleet_render.applied_document(r.name, None, r.value, skipped[r.name])
                        if r.value is not None
                        else failed("apply", r.name, r.error)
                    )
                    | {"target": r.name}
                    for r in self.plans
                ]
                out.document(documents)
            return
        shown = fleet_render.text(self.plans, out.color, RENDERERS["text"], verbose=self.verbose)
        out.echo(shown, nl=False)
        if not self.dry_run:
            return
        works = {r.name: r.value for r in prepared if r.value is not None}
        for host in self.hosts:
            work = works.get(host.name)
            if work is not None and work.steps:
                shown = dry_run_text(work.steps, host, plan=work.plan, color=out.color)
                out.echo(f"\n{shown}", nl=False)

    def confirm(self, prepared: Sequence[HostResult[Work]], writes: int, hosts: int) -> None:
        """`flow.FleetConfirm`: what each host will change, then the one question."""
        self.asked = True
        self.prepared(prepared)
        works = [r.value for r in prepared if r.value is not None and r.value.steps]
        made = sum(step_entries(work.planned, work.plan) for work in works)
        self.ask(changes_and_writes(made, writes), hosts)

    def ask(self, changes: str, hosts: int) -> None:
        """`changes`: as `folding.changes_and_writes` says them, summed over the hosts."""
        question = f"Apply {changes} to {counted(hosts, 'host')}?"
        on_stderr = self.out.json or self.out.to_file
        confirm(
            question if on_stderr else f"\n{question}",
            yes=self.yes,
            command="tune apply",
            err=on_stderr,
        )
