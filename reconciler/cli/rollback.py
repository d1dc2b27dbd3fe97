"""`tune rollback`: restore the values a run recorded, newest run first."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from ..apply.journal import Run, rollback_chain
from ..core.changes import Phase
from ..core.errors import ApplyFailed, ExitCode, JournalError
from ..core.few import first_few
from ..core.printable import printable
from ..core.words import counted
from ..hosts.base import Host
from ..plan.entries import journaled_entries
from ..render import documents
from ..render.apply import dry_run_text
from ..render.folding import changes_and_writes
from ..steps.records import StepRecord
from .complete import roots, run_ids
from .consent import confirm, dry_run_option, yes_option
from .exits import exits
from .helptext import UNTUNED, examples
from .one_host import ROOT_HELP, engine_of
from .output import Output, output_options
from .remote import RemoteOptions, one_host_options

if TYPE_CHECKING:
    from ..apply.restored import RollbackResult


@examples(
    (
        "What undoing the newest run would restore, writing nothing",
        f"tune rollback --root {UNTUNED} --dry-run",
    ),
    (
        "Undo it without asking",
        f"tune rollback --root {UNTUNED} --yes",
    ),
)
@exits(
    ExitCode.IN_SYNC,
    ExitCode.HOST_ERROR,
    ExitCode.APPLY_FAILED,
    ExitCode.JOURNAL,
    ExitCode.NOT_CONFIRMED,
    ExitCode.USAGE,
)
@click.command()
@click.argument("run_id", required=False, shell_complete=run_ids)
@click.option("--root", metavar="DIR", shell_complete=roots, help=ROOT_HELP)
@yes_option
@dry_run_option
@output_options("text", "json")
@one_host_options
def rollback(
    run_id: str | None,
    root: str | None,
    yes: bool,
    dry_run: bool,
    out: Output,
    remote: RemoteOptions,
) -> int:
    """Restore the values a run recorded, in reverse order: by default the newest run, and
    the interrupted runs right before it (a run applied with --after-interrupted over one).
    Asks first; without a terminal, only --yes goes on. A damaged journal: the steps
    recorded before the damage are restored, then exit 6 with the line that is damaged and
    what is left to check by hand."""
    from ..flow.orchestration import roll_back

    engine = engine_of(root, remote)
    host = engine.host
    try:
        if dry_run:
            for run in rollback_chain(host, run_id):  # read without the lock: no write
                out.echo(_undo_text(run, host), nl=False)
            return ExitCode.IN_SYNC

        chain: list[Run] = []

        def approve(runs: list[Run]) -> None:
            chain.extend(runs)
            undone = [run for run in runs if run.outcome != "rolled-back" and run.steps]
            if not undone:
                return  # each is rolled back already: nothing to ask about
            made = changes_and_writes(
                sum(journaled_entries(run.of_type(StepRecord)) for run in undone),
                sum(len(run.steps) for run in undone),
            )
            ids = ", ".join(run.run_id for run in undone)
            question = f"Roll back {made} of run {ids} on {host.describe()}?"
            confirm(printable(question), yes=yes, command="tune rollback")

        done = roll_back(engine, run_id, approve)
        booted = _booted_with(host, chain, done)
    finally:
        host.close()
    if out.json:  # the whole outcome first, failures included; the exit code follows below
        out.document(rollback_document(host, done))
    for one in done:
        result = one.result
        if one.already:
            if not out.json:
                out.echo(f"Run {one.run_id} is already rolled back; nothing to do.")
            continue
        if one.damage is not None and not one.damage.readable.records:
            continue  # nothing was read, nothing restored: the damage says so below
        if result.failures:
            raise ApplyFailed(
                f"rollback of run {one.run_id} left {counted(len(result.failures), 'write')} "
                "not restored: " + first_few(result.failures) + " (`--format json` lists each)"
            )
        if not out.json:
            out.echo(
                f"Rolled back run {one.run_id} on {host.describe()}: {result.restored} "
                f"restored, {result.unchanged} already at their prior value."
            )
    if booted and not out.json:
        out.echo(printable(_until_reboot(booted)))
    damaged = [one.damage for one in done if one.damage is not None]
    if damaged:  # what was readable is restored; what was not, the operator must see
        raise JournalError(*damaged[0].problems_after_rollback())
    return ExitCode.IN_SYNC


def _booted_with(host: Host, runs: list[Run], done: Sequence[RollbackResult]) -> list[str]:
    """The knobs of the boot configuration (kinds a host's reboot takes up) that this rollback
    restored and that the running kernel booted with: the runs' boot is not the one running
    now. One read of the boot id, only where a run restored some."""
    from ..core.files import Request
    from ..facts.kernel import BOOT_ID
    from ..kinds import named

    restored = {one.run_id for one in done if not one.already and one.result.restored}
    boot = {
        run.run_id: [
            step.id
            for _, step in run.steps
            if (kind := named(step.kind)) is not None
            and kind.phase is Phase.REBOOT
            and kind.takes_effect.startswith("reboot the host")
        ]
        for run in runs
        if run.run_id in restored and run.header is not None
    }
    if not any(boot.values()):
        return []
    now = host.fetch(Request.of(BOOT_ID)).value(BOOT_ID)
    made_in = {run.run_id: run.header.boot_id for run in runs if run.header is not None}
    return [knob for run_id, knobs in boot.items() if made_in.get(run_id) != now for knob in knobs]


def _until_reboot(knobs: list[str]) -> str:
    return (
        f"The running kernel still has the {len(knobs)} rolled-back boot settings "
        f"({first_few(knobs)}) until the next boot: reboot to take the prior configuration up; "
        "`tune check` shows them pending a reboot."
    )


def rollback_document(host: Host, done: Sequence[RollbackResult]) -> dict[str, Any]:
    def status(one: RollbackResult) -> str:
        if one.already:
            return "already-rolled-back"
        return "failed" if one.result.failures else "rolled-back"

    runs = [
        {
            "run": one.run_id,
            "status": status(one),
            "restored": one.result.restored,
            "unchanged": one.result.unchanged,
            "failures": list(one.result.failures),
        }
        for one in done
    ]
    return documents.document("rollback", documents.named(host.name), {"runs": runs})


def _undo_text(run: Run, host: Host) -> str:
    """What rolling back `run` would write: its steps undone, newest first."""
    if run.outcome == "rolled-back" or not run.steps:
        return f"Run {run.run_id} is already rolled back; nothing to do.\n"
    undo = tuple(
        dataclasses.replace(step, prior=step.desired, desired=step.prior, do=step.undo)
        for _, step in reversed(run.steps)
    )
    title = f"Dry run of the rollback of run {run.run_id} on {host.describe()}, nothing written"
    return dry_run_text(undo, host, title)
