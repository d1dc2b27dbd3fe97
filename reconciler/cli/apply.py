"""`tune apply`, `tune rollback` and `tune history`: the commands that write, and the record."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..apply.journal import Run, every_run, rollback_chain
from ..apply.orchestration import ApplyJob, Done, Show
from ..apply.steps import BootTool, Command, DeleteFile, PutFile
from ..boot.verify import BootVerdict, PendingBoot
from ..errors import ApplyFailed, ExitCode, JournalError, UsageError
from ..hosts.base import Host, ReadableHost
from ..hosts.directory import open_host
from ..kinds import boot_kind
from ..plan import saved as saved_plans
from ..plan.model import Phase
from ..render.apply import applied_part, dry_run_text
from ..render.printable import printable
from .consent import confirm, dry_run_option, yes_option
from .exits import exits
from .options import format_option
from .remote import RemoteOptions, no_root, remote_options

if TYPE_CHECKING:
    from ..apply.engine import Work
    from ..apply.engines import ApplyResult, Engine
    from ..probes.phase import GateFailure, PhaseProbes

ROOT_HELP = "Apply to a snapshot directory laid out like the host's / instead of this machine."
RESTART_HELP = (
    "After the boot is verified, restart the profile's containers and check that they see "
    "/dev/nvidia*."
)


@exits(
    ExitCode.IN_SYNC,
    ExitCode.HOST_ERROR,
    ExitCode.APPLY_FAILED,
    ExitCode.REBOOT_TIMEOUT,
    ExitCode.UNFINISHED_RUN,
    ExitCode.JOURNAL,
    ExitCode.NOT_CONFIRMED,
    ExitCode.USAGE,
    ExitCode.INVALID_PROFILE,
    ExitCode.NO_SPACE,
)
@click.command()
@click.argument("target", required=False, metavar="[PROFILE|PLAN.json]")
@click.option("--runtime-only", is_flag=True, help="Only live settings; never boot configuration.")
@click.option(
    "--reboot-phase", is_flag=True, help="Only boot configuration; never writes live settings."
)
@click.option(
    "--reboot",
    is_flag=True,
    help="Reboot into the new boot configuration (once, where the boot loader allows), wait, "
    "verify; roll it back if the boot did not bring it.",
)
@click.option(
    "--reboot-timeout",
    type=click.FloatRange(min=1),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="How long --reboot waits for the host to come back.",
)
@click.option("--restart-containers", is_flag=True, help=RESTART_HELP)
@click.option("--root", metavar="DIR", help=ROOT_HELP)
@yes_option
@dry_run_option
@click.option("--no-persist", is_flag=True, help="Do not write tune's boot-time files.")
@click.option(
    "--after-interrupted",
    is_flag=True,
    help="Apply even though the last run was interrupted; `tune rollback` then undoes both.",
)
@click.option("--no-probes", is_flag=True, help="Do not run the profile's probes around the phase.")
@click.option(
    "--keep-on-regression", is_flag=True, help="Keep the changes even when a probe gate fails."
)
@format_option("text", "json", help="json: one object per host (several hosts only).")
@remote_options
def apply(
    target: str | None,
    runtime_only: bool,
    reboot_phase: bool,
    reboot: bool,
    reboot_timeout: float,
    restart_containers: bool,
    root: str | None,
    yes: bool,
    dry_run: bool,
    no_persist: bool,
    after_interrupted: bool,
    no_probes: bool,
    keep_on_regression: bool,
    fmt: str,
    remote: RemoteOptions,
) -> int:
    """Make the host match a profile, or a plan saved by `tune plan`.

    \b
    Without TARGET, applies the plan `tune plan` saved in .tune/plan.json (the
    phases it covers), after re-observing the host: a plan whose observed values
    moved, or made for another host, is refused. Asks first (the question names
    the boot configuration it changes); without a terminal, only --yes goes on.
    Each change is journaled on the host before it is written and read back
    after; any failure (or Ctrl-C) restores every change made, and exits 3.
    With probes in the profile, they run before the first write and after the
    last; a gate that fails afterwards rolls the changes back (exit 3) unless
    --keep-on-regression. `tune report` shows the numbers. A run that was
    interrupted (killed, power lost) blocks the next apply (exit 5) until
    `tune rollback` restores it, or --after-interrupted applies over it.
    """
    from ..apply.orchestration import apply_one
    from ..profile.load import load_profile

    if runtime_only and reboot_phase:
        raise UsageError("--runtime-only and --reboot-phase exclude each other.")
    if fmt == "json" and not remote.is_fleet:
        raise UsageError(
            "--format json is for several hosts (-H ... -H ... or --inventory); one host's run "
            "is in `tune history --format json`."
        )
    if reboot and runtime_only:
        raise UsageError("--reboot needs the boot configuration: drop --runtime-only.")
    if restart_containers and runtime_only:
        raise UsageError(
            "--restart-containers follows the boot configuration: drop --runtime-only."
        )
    if restart_containers and remote.wanted:
        raise UsageError("--restart-containers works on this machine's containers, not over -H.")
    if reboot and root is not None:
        raise UsageError(
            "--reboot is refused on a snapshot (--root): there is no machine to reboot; "
            "the boot-tool commands are recorded in the run's journal."
        )
    saved = None
    with_persistence = not no_persist
    if remote.wanted:
        if target is None or saved_plans.is_saved_plan(target):
            raise UsageError("over SSH, tune apply takes a profile, not a saved plan.")
        profile_path = target
    elif target is None or saved_plans.is_saved_plan(target):
        saved = saved_plans.load(target or saved_plans.DEFAULT)
        root = _plan_root(saved, root)
        profile_path = saved.profile_path
        with_persistence = with_persistence and saved.persist
        phases = saved.phases_for(runtime_only, reboot_phase)
        runtime_only = phases == (Phase.RUNTIME,)
        reboot_phase = phases == (Phase.REBOOT,)
        if runtime_only and (reboot or restart_containers):
            raise UsageError(
                f"{saved.path} covers the runtime phase only: --reboot and "
                "--restart-containers need the boot configuration; run tune plan again."
            )
        click.echo(saved.described(time.time()), err=True)
    else:
        profile_path = target
    job = ApplyJob(
        load_profile(profile_path),
        runtime_only=runtime_only,
        reboot_phase=reboot_phase,
        reboot=reboot,
        reboot_timeout=reboot_timeout,
        with_persistence=with_persistence,
        saved=saved,
        after_interrupted=after_interrupted,
        dry_run=dry_run,
        probes=not no_probes,
        keep_on_regression=keep_on_regression,
        restart_containers=restart_containers,
    )
    if remote.is_fleet:
        no_root(root)
        return _apply_fleet(job, yes, remote, fmt)
    engine = _engine(root, remote)
    try:
        done = apply_one(engine, job, Terminal(yes))
    finally:
        engine.host.close()
    return _applied(done, engine, job)


def _engine(root: str | None, remote: RemoteOptions) -> Engine:
    """The engine of the one host the options name: a -H host, a snapshot, or this machine."""
    from ..apply.engines import engine_for

    host = _one_remote(root, remote) if remote.wanted else open_host(root)
    return engine_for(host, root=root, timeout=remote.command_timeout)


class Terminal(Show):
    """One host's apply on the terminal: what will change, the question, what it came to."""

    def __init__(self, yes: bool) -> None:
        self.yes = yes

    def dry_run(self, host: Host, work: Work) -> None:
        _reboot_why(work)
        text = dry_run_text(work.steps, host, plan=work.plan)
        if work.promote:
            text += dry_run_text(
                work.promote, host, "Once the boot is verified, appended to the run", work.plan
            )
        click.echo(text, nl=False)

    def confirm(self, host: Host, work: Work) -> None:
        _reboot_why(work)
        click.echo(summary(work), nl=False)
        question = f"Apply {len(work.planned)} changes to {host.describe()}"
        boot = boot_configuration(work)
        if boot:  # the reboot phase: what the next boot, or a container's restart, takes up
            question += f", the boot configuration among them ({', '.join(boot)})"
        confirm(printable(question + "?"), yes=self.yes, command="tune apply")

    def probes(self, around: PhaseProbes) -> None:
        names = ", ".join(around.probes)
        if around.measured_after_boot:
            click.echo(
                f"Probes {names} run before the first change; `tune verify` runs them again "
                "after the boot."
            )
        else:
            click.echo(f"Probes {names} run before the first change and after the last.")

    def applied(self, host: Host, applied: ApplyResult, kept: list[GateFailure]) -> None:
        for line in applied.unsupported:
            click.echo(printable(line))  # it names the knob: a host's file name, maybe
        click.echo(
            f"Applied {applied.changes} changes to {host.describe()} (run {applied.run_id})."
        )
        _kept(kept)

    def rebooting(self, host: Host, wait: float | None) -> None:
        if wait is None:
            click.echo(f"Rebooting {host.describe()}; after the boot, run `tune verify`.")
        else:
            click.echo(f"Rebooting {host.describe()}; waiting up to {wait:g} s for it.")


def boot_configuration(work: Work) -> list[str]:
    """What of the boot configuration `work` changes: the files it writes (the boot loader's,
    each container's config) and the boot tools it runs, in the order of the steps."""
    named: list[str] = []
    for step in work.steps:
        if not boot_kind(step.kind):
            continue
        for op in step.do:
            if isinstance(op, PutFile | DeleteFile):
                named.append(op.path)
            elif isinstance(op, BootTool | Command):
                named.append(op.argv[0])
    return list(dict.fromkeys(named))


def _reboot_why(work: Work) -> None:
    """How a rebooting apply reaches the new configuration, before anything is written."""
    if work.reboot_why:
        click.echo(f"Reboot: {work.reboot_why}.")


def _applied(done: Done, engine: Engine, job: ApplyJob) -> int:
    """What one host's apply says once it is over."""
    host = engine.host
    if done.applied is None:
        if not job.dry_run:
            click.echo(f"In sync: nothing to change on {host.describe()}.")
        return ExitCode.IN_SYNC
    if done.verdict is not None and done.pending is not None:
        return _verified(done.verdict, done.pending, host, done.kept)
    if done.pending is None and job.reboot:
        click.echo("No boot configuration changed: not rebooting.")
    elif done.pending is not None and not job.reboot:
        click.echo(
            "The boot configuration changed: it takes effect at the next boot. Reboot, then "
            f"run `{engine.verify_command()}`."
        )
    return ExitCode.IN_SYNC


@exits(
    ExitCode.IN_SYNC, ExitCode.HOST_ERROR, ExitCode.APPLY_FAILED, ExitCode.JOURNAL, ExitCode.USAGE
)
@click.command()
@click.option("--root", metavar="DIR", help="Verify a snapshot directory instead of this machine.")
@click.option(
    "--keep-on-regression",
    is_flag=True,
    help="Keep the boot configuration even when a probe gate fails after the boot.",
)
@click.option("--restart-containers", is_flag=True, help=RESTART_HELP)
@remote_options
def verify(
    root: str | None, keep_on_regression: bool, restart_containers: bool, remote: RemoteOptions
) -> int:
    """After the reboot that a reboot-phase apply prepared: check that the boot brought what it
    must (kernel parameters, NVIDIA majors of each container, the runtime part still held).

    \b
    With --restart-containers (or when the apply asked for it), then restarts
    each container of the profile and checks it sees every /dev/nvidia* node.
    Then the probes the apply measured before run again; a gate that fails
    counts as a failed check unless --keep-on-regression. On failure, rolls
    the boot configuration back, says what did not hold, exits 3. After a
    one-time boot (`tune apply --reboot`), success makes the new configuration
    the default.
    """
    from ..apply.orchestration import verify_one

    if remote.wanted and restart_containers:
        raise UsageError("--restart-containers works on this machine's containers, not over -H.")
    engine = _engine(root, remote)
    try:
        verified = verify_one(
            engine, keep_on_regression=keep_on_regression, restart_containers=restart_containers
        )
    finally:
        engine.host.close()
    if verified is None:
        click.echo(f"Nothing to verify on {engine.host.describe()}: no reboot-phase apply pending.")
        return ExitCode.IN_SYNC
    return _verified(verified.verdict, verified.pending, engine.host, verified.kept)


def _verified(
    verdict: BootVerdict, pending: PendingBoot, host: Host, kept: list[GateFailure]
) -> int:
    """What a verification that held says: each check, a promotion, the gates kept failing."""
    for line in verdict.held:
        click.echo(f"ok  {printable(line)}")  # a value read back from the host
    if pending.promote:
        click.echo("The new boot configuration is now the default.")
    click.echo(f"Verified run {pending.run_id} after the boot on {host.describe()}.")
    _kept(kept)
    return ExitCode.IN_SYNC


def _one_remote(root: str | None, remote: RemoteOptions) -> Host:
    no_root(root)
    if remote.is_fleet:
        raise UsageError("this command works on one -H host at a time.")
    return remote.open()[0]


def _apply_fleet(job: ApplyJob, yes: bool, remote: RemoteOptions, fmt: str) -> int:
    """Several hosts: the live settings only, each host through `reconciler.cli.fleet`."""
    from .fleet import apply_hosts

    if not job.runtime_only:
        raise UsageError(
            "over several hosts, tune apply needs --runtime-only: apply boot configuration "
            "(and --reboot) one -H host at a time."
        )
    if job.loaded.profile.probes and job.probes:
        raise UsageError(
            "probes run on one -H host at a time; add --no-probes to apply over several hosts."
        )
    return apply_hosts(
        remote.open(),
        job,
        timeout=remote.command_timeout,
        forks=remote.forks,
        yes=yes,
        as_json=fmt == "json",
    )


def _kept(failures: list[GateFailure]) -> None:
    for failure in failures:
        # The verdict quotes what the probe measured on the host.
        message = printable(failure.verdict.message)
        click.echo(f"gate failed, kept: {failure.probe}: {message}", err=True)


def _plan_root(saved: saved_plans.SavedPlan, root: str | None) -> str | None:
    if root is None:
        return saved.root
    if saved.root is None or Path(root).resolve() != Path(saved.root):
        made_for = saved.root or "this machine"
        raise UsageError(f"{saved.path} was made for {made_for}, not {root}.")
    return root


def summary(work: Work) -> str:
    from ..render.text import render

    color = sys.stdout.isatty()
    lines = render(applied_part(work), color).splitlines()
    return "\n".join(lines[:-1]) + "\n"


@exits(
    ExitCode.IN_SYNC,
    ExitCode.HOST_ERROR,
    ExitCode.APPLY_FAILED,
    ExitCode.JOURNAL,
    ExitCode.NOT_CONFIRMED,
    ExitCode.USAGE,
)
@click.command()
@click.argument("run_id", required=False)
@click.option("--root", metavar="DIR", help=ROOT_HELP)
@yes_option
@dry_run_option
@remote_options
def rollback(
    run_id: str | None, root: str | None, yes: bool, dry_run: bool, remote: RemoteOptions
) -> int:
    """Restore the values a run recorded, in reverse order: by default the newest run, and
    the interrupted runs right before it (a run applied with --after-interrupted over one).
    Asks first; without a terminal, only --yes goes on. A damaged journal: the steps
    recorded before the damage are restored, then exit 6 with the line that is damaged and
    what is left to check by hand."""
    from ..apply.orchestration import roll_back

    engine = _engine(root, remote)
    host = engine.host
    try:
        if dry_run:
            for run in rollback_chain(host, run_id):  # read without the lock: no write
                click.echo(_undo_text(run, host), nl=False)
            return ExitCode.IN_SYNC

        def approve(runs: list[Run]) -> None:
            undone = [run for run in runs if run.outcome != "rolled-back" and run.steps]
            if not undone:
                return  # each is rolled back already: nothing to ask about
            changes = sum(len(run.steps) for run in undone)
            ids = ", ".join(run.run_id for run in undone)
            question = f"Roll back {changes} changes of run {ids} on {host.describe()}?"
            confirm(printable(question), yes=yes, command="tune rollback")

        done = roll_back(engine, run_id, approve)
    finally:
        host.close()
    for one in done:
        if one.already:
            click.echo(f"Run {one.run_id} is already rolled back; nothing to do.")
            continue
        result = one.result
        if result.failures:
            raise ApplyFailed(
                f"rollback of run {one.run_id} left {len(result.failures)} changes not restored: "
                + "; ".join(result.failures)
            )
        click.echo(
            f"Rolled back run {one.run_id} on {host.describe()}: {result.restored} restored, "
            f"{result.unchanged} already at their prior value."
        )
    damaged = [one.damage for one in done if one.damage is not None]
    if damaged:  # what was readable is restored; what was not, the operator must see
        raise JournalError(*damaged[0].problems_after_rollback())
    return ExitCode.IN_SYNC


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


@exits(ExitCode.IN_SYNC, ExitCode.HOST_ERROR, ExitCode.JOURNAL, ExitCode.USAGE)
@click.command()
@click.option("--root", metavar="DIR", help="Read a snapshot directory instead of this machine.")
@format_option("text", "json")
@remote_options
def history(root: str | None, fmt: str, remote: RemoteOptions) -> int:
    """List the runs journaled on the host: time, profile, outcome, number of changes. A
    damaged journal's run is listed as far as it reads, outcome "damaged"; then exit 6."""
    # Read-only: only apply and rollback write (mypy holds it).
    host: ReadableHost = _one_remote(root, remote) if remote.wanted else open_host(root)
    try:
        runs, damaged = every_run(host)
    finally:
        host.close()
    _history_table(host, runs, {d.readable.run_id for d in damaged}, fmt)
    if damaged:  # after the table: the other runs are still worth seeing
        raise JournalError(*(p for d in damaged for p in d.problems()))
    return ExitCode.IN_SYNC


def _history_table(host: ReadableHost, runs: list[Run], damaged: set[str], fmt: str) -> None:
    rows = [
        {
            "run_id": run.run_id,
            "started": run.header.started if run.header else None,
            "finished": run.finished,
            "profile": run.header.profile if run.header else None,
            "phase": run.header.phase if run.header else None,
            "outcome": "damaged" if run.run_id in damaged else run.outcome,
            "changes": len(run.steps),
        }
        for run in runs
    ]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"No tune runs on {host.describe()}.")
        return
    header = ("RUN", "STARTED", "PROFILE", "PHASE", "OUTCOME", "CHANGES")
    table = [header] + [
        (
            str(r["run_id"]),
            str(r["started"]),
            str(r["profile"]),
            str(r["phase"]),
            str(r["outcome"]),
            str(r["changes"]),
        )
        for r in rows
    ]
    cells = [[printable(cell) for cell in row] for row in table]  # the journals' own text
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
