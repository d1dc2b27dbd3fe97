"""`tune apply`, `tune rollback` and `tune history`: the commands that write, and the record."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..apply.journal import DamagedJournal, Run, every_run, rollback_chain
from ..apply.pending import PendingBoot
from ..boot.verify import BootVerdict
from ..core.changes import Phase
from ..core.errors import ApplyFailed, ExitCode, JournalError, UsageError
from ..core.printable import printable
from ..flow.orchestration import ApplyJob, Done, Show
from ..hosts.base import Host, ReadableHost
from ..hosts.directory import open_host
from ..kinds import boot_kind
from ..plan import saved as saved_plans
from ..render import documents
from ..render.apply import applied_part, dry_run_text
from ..steps.ops import BootTool, Command, DeleteFile, PutFile
from .consent import confirm, dry_run_option, yes_option
from .exits import exits
from .options import profile_digest_option
from .output import Output, output_options
from .remote import RemoteOptions, no_root, one_host_options, remote_options
from .rollout import RolloutOptions, rollout_options

if TYPE_CHECKING:
    from ..apply.engine import RollbackResult, Work
    from ..apply.engines import ApplyResult, Engine
    from ..flow.orchestration import BootHeld
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
    ExitCode.BOOT_CONFIG_UNKNOWN,
    ExitCode.USAGE,
    ExitCode.INVALID_PROFILE,
    ExitCode.NO_SPACE,
)
@click.command()
@click.argument("target", required=False, metavar="[PROFILE|PLAN.json]")
@profile_digest_option
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
@click.option(
    "--restart-services",
    is_flag=True,
    help="After the apply, restart the services still running with limits other than their "
    "configured ones (and systemd-logind when its settings changed); asks first.",
)
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
    "--skip-missing",
    is_flag=True,
    help="Leave out, with a line for each, a change that needs what the host does not have (a "
    'module its kernel lacks: modprobe\'s "not found") instead of refusing the run.',
)
@click.option(
    "--keep-on-regression", is_flag=True, help="Keep the changes even when a probe gate fails."
)
@rollout_options
@output_options("text", "json")
@remote_options
def apply(
    target: str | None,
    profile_digest: str | None,
    runtime_only: bool,
    reboot_phase: bool,
    reboot: bool,
    reboot_timeout: float,
    restart_containers: bool,
    restart_services: bool,
    root: str | None,
    yes: bool,
    dry_run: bool,
    no_persist: bool,
    after_interrupted: bool,
    no_probes: bool,
    skip_missing: bool,
    keep_on_regression: bool,
    waves: RolloutOptions,
    out: Output,
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

    \b
    Over several hosts (-H ... or --inventory), --reboot rolls the boot
    configuration out in waves (--serial, --canary first and alone, then a
    question); per host: write it, --before-reboot, reboot, wait, verify,
    --after-verify. A host that fails is rolled back and counted; past
    --max-fail the rollout stops before the next wave. The rollout is
    journaled on this machine: `tune rollout status|resume`.
    """
    from ..flow.orchestration import apply_one
    from ..profile.bundled import resolve
    from ..profile.load import load_profile
    from ..profile.source import is_url, path_of_url

    if target is not None and is_url(target):
        target = path_of_url(target)  # a saved plan may be named by its URL too
    if runtime_only and reboot_phase:
        raise UsageError("--runtime-only and --reboot-phase exclude each other.")
    if reboot and runtime_only:
        raise UsageError("--reboot needs the boot configuration: drop --runtime-only.")
    if restart_containers and runtime_only:
        raise UsageError(
            "--restart-containers follows the boot configuration: drop --runtime-only."
        )
    if restart_services and remote.is_fleet:
        raise UsageError("--restart-services restarts one host's services: name one host.")
    if waves.asked and not remote.wanted:
        raise UsageError("--serial, --canary, --max-fail and the hooks roll out over -H hosts.")
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
        profile_path = resolve(target)
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
        profile_path = resolve(target)
    job = ApplyJob(
        load_profile(profile_path, profile_digest),
        runtime_only=runtime_only,
        reboot_phase=reboot_phase,
        reboot=reboot,
        reboot_timeout=reboot_timeout,
        reboot_poll=waves.poll,
        with_persistence=with_persistence,
        saved=saved,
        after_interrupted=after_interrupted,
        dry_run=dry_run,
        probes=not no_probes,
        keep_on_regression=keep_on_regression,
        restart_containers=restart_containers,
        restart_services=restart_services,
        skip_missing=skip_missing,
    )
    if remote.is_fleet or waves.asked:
        no_root(root)
        return _apply_fleet(job, yes, remote, waves, out)
    engine = _engine(root, remote)
    terminal = Terminal(yes, out)
    try:
        done = apply_one(engine, job, terminal)
        restarted = _restart_services(engine, job, done, yes, terminal)
    finally:
        engine.host.close()
    code = max(_applied(done, engine, job, terminal), restarted)
    if out.json:
        out.document(apply_document(done, engine.host, job))
    return code


def _restart_services(
    engine: Engine, job: ApplyJob, done: Done, yes: bool, terminal: Terminal
) -> int:
    """`--restart-services` once the apply is over (not on a dry run): exit 3 when a restart
    failed or did not bring the configured limits."""
    from ..apply.restart import pending_restarts, restart_services, to_restart

    if not job.restart_services or job.dry_run:
        return ExitCode.IN_SYNC
    host = engine.host
    loaded = job.loaded
    units = to_restart(pending_restarts(host, loaded), done.work.steps)
    if not units:
        return ExitCode.IN_SYNC
    question = f"Restart {', '.join(units)} on {host.describe()}?"
    confirm(printable(question), yes=yes, command="tune apply --restart-services")
    run_id = done.applied.run_id if done.applied is not None else None
    result = restart_services(engine, loaded, units, run_id)
    for line in result.held:
        terminal.say(f"ok  {printable(line)}")
    for line in result.failed:
        terminal.say(f"FAILED {printable(line)}")
    return ExitCode.APPLY_FAILED if result.failed else ExitCode.IN_SYNC


def _engine(root: str | None, remote: RemoteOptions) -> Engine:
    """The engine of the one host the options name: a -H host, a snapshot, or this machine."""
    from ..apply.engines import engine_for

    host = _one_remote(root, remote) if remote.wanted else open_host(root)
    return engine_for(host, root=root, timeout=remote.command_timeout)


class Terminal(Show):
    """One host's apply: what will change, the question, what it came to. In text, the output
    (`-o`); with --format json, standard output is the one document at the end and these
    sentences go to standard error. The question, and what it is about, go where the operator
    reads: standard output on a terminal, else standard error."""

    def __init__(self, yes: bool, out: Output) -> None:
        self.yes = yes
        self.out = out
        self.asks_on_stderr = out.json or out.to_file
        self.waiting = out.progress()

    def say(self, text: str, nl: bool = True) -> None:
        self.waiting.clear()
        if self.out.json:
            click.echo(text, nl=nl, err=True)
        else:
            self.out.echo(text, nl=nl)

    def skipped(self, host: Host, work: Work) -> None:
        for skipped in work.skipped:
            self.say(printable(skipped.line))  # in the host's words

    def dry_run(self, host: Host, work: Work) -> None:
        self._reboot_why(work)
        text = dry_run_text(work.steps, host, plan=work.plan, color=self.out.color)
        if work.promote:
            text += dry_run_text(
                work.promote,
                host,
                "Once the boot is verified, appended to the run",
                work.plan,
                color=self.out.color,
            )
        self.say(text, nl=False)

    def confirm(self, host: Host, work: Work) -> None:
        self._reboot_why(work)
        err = self.asks_on_stderr
        color = self.out.stderr_color if err else self.out.color
        self.waiting.clear()
        click.echo(summary(work, color), nl=False, err=err, color=color)
        question = f"Apply {len(work.planned)} changes to {host.describe()}"
        boot = boot_configuration(work)
        if boot:  # the reboot phase: what the next boot, or a container's restart, takes up
            question += f", the boot configuration among them ({', '.join(boot)})"
        confirm(printable(question + "?"), yes=self.yes, command="tune apply", err=err)

    def probes(self, around: PhaseProbes) -> None:
        names = ", ".join(around.probes)
        if around.measured_after_boot:
            self.say(
                f"Probes {names} run before the first change; `tune verify` runs them again "
                "after the boot."
            )
        else:
            self.say(f"Probes {names} run before the first change and after the last.")

    def applied(self, host: Host, applied: ApplyResult, kept: list[GateFailure]) -> None:
        for line in applied.unsupported:
            self.say(printable(line))  # it names the knob: a host's file name, maybe
        self.say(f"Applied {applied.changes} changes to {host.describe()} (run {applied.run_id}).")
        _kept(kept)

    def progress(self, text: str) -> None:
        self.waiting(text)

    def rebooting(self, host: Host, wait: float | None) -> None:
        if wait is None:
            self.say(f"Rebooting {host.describe()}; after the boot, run `tune verify`.")
        else:
            self.say(f"Rebooting {host.describe()}; waiting up to {wait:g} s for it.")

    def _reboot_why(self, work: Work) -> None:
        """How a rebooting apply reaches the new configuration, before anything is written."""
        if work.reboot_why:
            self.say(f"Reboot: {work.reboot_why}.")


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


def _applied(done: Done, engine: Engine, job: ApplyJob, terminal: Terminal) -> int:
    """What one host's apply says once it is over."""
    host = engine.host
    if done.applied is None:
        if not job.dry_run:
            terminal.say(f"In sync: nothing to change on {host.describe()}.")
        return ExitCode.IN_SYNC
    if done.verdict is not None and done.pending is not None:
        return _verified(done.verdict, done.pending, host, done.kept, terminal.say)
    if done.pending is None and job.reboot:
        terminal.say("No boot configuration changed: not rebooting.")
    elif done.pending is not None and not job.reboot:
        terminal.say(
            "The boot configuration changed: it takes effect at the next boot. Reboot, then "
            f"run `{engine.verify_command()}`."
        )
    return ExitCode.IN_SYNC


def apply_document(done: Done, host: Host, job: ApplyJob) -> dict[str, Any]:
    """One host's apply as JSON: the same document a fleet's apply has for each host, and
    whether a boot is still to come."""
    from ..apply.engines import ApplyResult
    from ..hosts.fleet import HostResult
    from ..render.fleet import applied_document

    result = None
    if not job.dry_run:
        value = done.applied or ApplyResult(run_id=None, changes=0)
        result = HostResult(host.name, value=value)
    document = applied_document(host.name, result, applied_part(done.work), done.work.skipped)
    return document | {"boot_pending": done.pending is not None and done.verdict is None}


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
@output_options("text", "json")
@one_host_options
def verify(
    root: str | None,
    keep_on_regression: bool,
    restart_containers: bool,
    out: Output,
    remote: RemoteOptions,
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
    from ..flow.orchestration import verify_one

    engine = _engine(root, remote)
    try:
        verified = verify_one(
            engine, keep_on_regression=keep_on_regression, restart_containers=restart_containers
        )
    finally:
        engine.host.close()
    host = engine.host
    if out.json:
        out.document(verify_document(host, verified))
        return ExitCode.IN_SYNC
    if verified is None:
        out.echo(f"Nothing to verify on {host.describe()}: no reboot-phase apply pending.")
        return ExitCode.IN_SYNC
    return _verified(verified.verdict, verified.pending, host, verified.kept, out.echo)


def verify_document(host: Host, verified: BootHeld | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": "nothing-pending",
        "run": None,
        "held": [],
        "promoted": False,
        "kept_gates": [],
    }
    if verified is not None:
        body = {
            "status": "verified",
            "run": verified.pending.run_id,
            "held": verified.verdict.held,
            "promoted": bool(verified.pending.promote),
            "kept_gates": [{"probe": f.probe, "message": f.verdict.message} for f in verified.kept],
        }
    return documents.document("verify", documents.named(host.name), body)


def _verified(
    verdict: BootVerdict,
    pending: PendingBoot,
    host: Host,
    kept: list[GateFailure],
    say: Callable[[str], None],
) -> int:
    """What a verification that held says: each check, a promotion, the gates kept failing."""
    for line in verdict.held:
        say(f"ok  {printable(line)}")  # a value read back from the host
    if pending.promote:
        say("The new boot configuration is now the default.")
    say(f"Verified run {pending.run_id} after the boot on {host.describe()}.")
    _kept(kept)
    return ExitCode.IN_SYNC


def _one_remote(root: str | None, remote: RemoteOptions) -> Host:
    no_root(root)
    return remote.open()[0]


def _apply_fleet(
    job: ApplyJob, yes: bool, remote: RemoteOptions, waves: RolloutOptions, out: Output
) -> int:
    """Several hosts: the live settings (`reconciler.cli.fleet`), or, with --reboot, a
    rollout in waves (`reconciler.cli.rollout`)."""
    from .fleet import apply_hosts
    from .rollout import start_rollout

    if not job.runtime_only and not job.reboot:
        raise UsageError(
            "over several hosts, tune apply needs --runtime-only, or --reboot to roll the boot "
            "configuration out in waves (--serial)."
        )
    if job.loaded.profile.probes and job.probes:
        raise UsageError(
            "probes run on one -H host at a time; add --no-probes to apply over several hosts."
        )
    if (waves.before_reboot or waves.after_verify) and not job.reboot:
        raise UsageError("--before-reboot and --after-verify run around a reboot: add --reboot.")
    if job.reboot or waves.asked:
        if job.dry_run:
            raise UsageError("a rollout has no --dry-run: `tune plan --reboot-phase` shows it.")
        return start_rollout(job, remote, waves, yes, out)
    return apply_hosts(
        remote.open(),
        job,
        timeout=remote.command_timeout,
        forks=remote.fleet_forks(),
        yes=yes,
        out=out,
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


def summary(work: Work, color: bool) -> str:
    from ..render.text import render

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

    engine = _engine(root, remote)
    host = engine.host
    try:
        if dry_run:
            for run in rollback_chain(host, run_id):  # read without the lock: no write
                out.echo(_undo_text(run, host), nl=False)
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
                f"rollback of run {one.run_id} left {len(result.failures)} changes not restored: "
                + "; ".join(result.failures)
            )
        if not out.json:
            out.echo(
                f"Rolled back run {one.run_id} on {host.describe()}: {result.restored} "
                f"restored, {result.unchanged} already at their prior value."
            )
    damaged = [one.damage for one in done if one.damage is not None]
    if damaged:  # what was readable is restored; what was not, the operator must see
        raise JournalError(*damaged[0].problems_after_rollback())
    return ExitCode.IN_SYNC


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


@exits(ExitCode.IN_SYNC, ExitCode.HOST_ERROR, ExitCode.JOURNAL, ExitCode.USAGE)
@click.command()
@click.option("--root", metavar="DIR", help="Read a snapshot directory instead of this machine.")
@output_options("text", "json")
@remote_options
def history(root: str | None, out: Output, remote: RemoteOptions) -> int:
    """List the runs journaled on the host(s): time, profile, outcome, number of changes. A
    damaged journal's run is listed as far as it reads, outcome "damaged"; then exit 6. Over
    several hosts, one table with a HOST column (JSON: one object per host)."""
    if remote.is_fleet:
        no_root(root)
        return _fleet_history(remote, out)
    # Read-only: only apply and rollback write (mypy holds it).
    host: ReadableHost = _one_remote(root, remote) if remote.wanted else open_host(root)
    try:
        runs, damaged = every_run(host)
    finally:
        host.close()
    _history_table(host, _history_rows(runs, damaged), out)
    if damaged:  # after the table: the other runs are still worth seeing
        raise JournalError(*(p for d in damaged for p in d.problems()))
    return ExitCode.IN_SYNC


HISTORY_KEYS = ("run_id", "started", "profile", "phase", "outcome", "changes")
HISTORY_HEADER = ["RUN", "STARTED", "PROFILE", "PHASE", "OUTCOME", "CHANGES"]


def _history_rows(runs: list[Run], damaged: list[DamagedJournal]) -> list[dict[str, Any]]:
    broken = {d.readable.run_id for d in damaged}
    return [
        {
            "run_id": run.run_id,
            "started": run.header.started if run.header else None,
            "finished": run.finished,
            "profile": run.header.profile if run.header else None,
            "phase": run.header.phase if run.header else None,
            "outcome": "damaged" if run.run_id in broken else run.outcome,
            "changes": len(run.steps),
        }
        for run in runs
    ]


def _fleet_history(remote: RemoteOptions, out: Output) -> int:
    """Every host's runs: one table, each row led by its host; unreachable hosts after it.
    JSON: one history document per host, as one host's."""
    from ..hosts.fleet import fleet_exit_code, for_each_host
    from ..render.fleet import problems
    from .remote import progress_on_terminal

    results = for_each_host(
        remote.open(), every_run, remote.fleet_forks(), progress_on_terminal(out)
    )
    damaged = [d for r in results if r.value is not None for d in r.value[1]]
    if out.json:

        def body(value: tuple[list[Run], list[DamagedJournal]]) -> dict[str, Any]:
            status = "damaged" if value[1] else "ok"
            return documents.versioned("history", {"status": status, "runs": _history_rows(*value)})

        # The journal does not name its host: the inventory's name is the host's here.
        listed = documents.fleet("history", results, body)
        out.document([{"host": documents.named(d["target"])} | d for d in listed])
    else:
        table: list[list[str]] = []
        for result in results:
            if result.value is None:
                table.append([result.name, "-", "-", "-", "-", "error", "-"])
                continue
            rows = _history_rows(*result.value)
            table += [[result.name, *(str(r[key]) for key in HISTORY_KEYS)] for r in rows]
            if not rows:
                table.append([result.name, "-", "-", "-", "-", "no runs", "-"])
        _table(["HOST", *HISTORY_HEADER], table, out)
        for result in results:
            if result.error is not None:
                out.echo(f"\n== {printable(result.name)}: error\n{problems(result)}")
    if damaged:
        raise JournalError(*(p for d in damaged for p in d.problems()))
    return fleet_exit_code(results, lambda _: True)


def _history_table(host: ReadableHost, rows: list[dict[str, Any]], out: Output) -> None:
    if out.json:
        out.document(documents.document("history", documents.named(host.name), {"runs": rows}))
    elif rows:
        _table(HISTORY_HEADER, [[str(r[key]) for key in HISTORY_KEYS] for r in rows], out)
    else:
        out.echo(f"No tune runs on {host.describe()}.")


def _table(header: list[str], rows: list[list[str]], out: Output) -> None:
    cells = [[printable(cell) for cell in row] for row in [header, *rows]]  # the journals' text
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        out.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
