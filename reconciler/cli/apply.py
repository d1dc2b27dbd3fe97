"""`tune apply`: make one host, or a fleet, match a profile or a saved plan."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..core.changes import Phase
from ..core.errors import ExitCode, UsageError
from ..core.printable import printable
from ..flow.orchestration import ApplyJob, Done
from ..hosts.base import Host
from ..kinds import boot_kind
from ..plan import saved as saved_plans
from ..render.apply import applied_part, counted_steps, dry_run_text, step_entries
from ..render.folding import changes_and_writes
from ..steps.ops import BootTool, Command, DeleteFile, PutFile
from .complete import profiles, roots
from .consent import confirm, dry_run_option, yes_option
from .exits import exits
from .helptext import UNTUNED, examples
from .one_host import RESTART_HELP, ROOT_HELP, engine_of, kept_lines, verified_lines
from .options import profile_digest_option, verbose_option
from .output import Output, output_options
from .remote import RemoteOptions, no_root, remote_options
from .rollout import RolloutOptions, rollout_options

if TYPE_CHECKING:
    from ..apply.engines import ApplyResult, Engine
    from ..apply.work import Work
    from ..probes.phase import GateFailure, PhaseProbes


@examples(
    (
        "The exact writes of the live settings, writing nothing",
        f"tune apply blackwell-8x --root {UNTUNED} --runtime-only --dry-run",
    ),
    (
        "Apply them without asking (this writes the snapshot: try it on a copy)",
        f"tune apply blackwell-8x --root {UNTUNED} --runtime-only --yes",
    ),
    (
        "Roll the boot configuration out to a fleet in waves, a canary first",
        "tune apply blackwell-8x --reboot -i hosts.ini --canary gpu1 --serial 1,25%",
    ),
)
@exits(
    ExitCode.IN_SYNC,
    ExitCode.HOST_ERROR,
    ExitCode.CHANGES,  # --reboot: the boot held, a runtime knob it applied no longer does
    ExitCode.APPLY_FAILED,
    ExitCode.REBOOT_TIMEOUT,
    ExitCode.UNFINISHED_RUN,
    ExitCode.JOURNAL,
    ExitCode.NOT_CONFIRMED,
    ExitCode.BOOT_CONFIG_UNKNOWN,
    ExitCode.NO_TRY_ONCE,
    ExitCode.USAGE,
    ExitCode.INVALID_PROFILE,
    ExitCode.NO_SPACE,
)
@click.command()
@click.argument("target", required=False, metavar="[PROFILE|PLAN.json]", shell_complete=profiles)
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
    "--arm",
    is_flag=True,
    help="With --reboot-phase: arrange the next boot as --reboot would (the new command line "
    "once, the old one as fallback) and record it for `tune verify`, but do not reboot; "
    "whoever reboots runs `tune verify` after the boot. Exits 11 where the boot loader "
    "cannot boot a line once, writing nothing.",
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
@click.option("--root", metavar="DIR", shell_complete=roots, help=ROOT_HELP)
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
@verbose_option
@remote_options
def apply(
    target: str | None,
    profile_digest: str | None,
    runtime_only: bool,
    reboot_phase: bool,
    reboot: bool,
    arm: bool,
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
    verbose: bool,
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
    --reboot-phase --arm is for an engine that owns the reboot (Slurm's
    RebootProgram, kured, Ansible): the boot is arranged as --reboot arranges it
    and recorded in /var/lib/tune/pending.json (marked armed), and the command
    exits 0 without rebooting. After whoever reboots, `tune verify` promotes or
    rolls back (exit 10 while the host has not rebooted yet). Where the boot
    loader cannot boot the new command line once (GRUB_DEFAULT other than saved,
    grubby, proxmox-boot-tool keeping GRUB, no systemd-boot entry), it writes
    nothing and exits 11. One host at a time (a fleet's --arm is refused).
    `tune verify` also checks that the profile's live settings hold after the
    boot, and --reboot-phase writes only the boot configuration: apply the
    live settings first (--runtime-only).

    \b
    Over several hosts (-H ... or --inventory), --reboot rolls the boot
    configuration out in waves (--serial, --canary first and alone, then a
    question); per host: write it, --before-reboot, reboot, wait, verify,
    --after-verify. A host that fails is rolled back and counted; past
    --max-fail the rollout stops before the next wave. The rollout is
    journaled on this machine: `tune rollout status|resume`.
    """
    from ..flow.orchestration import after_run, apply_one
    from ..profile.bundled import resolve
    from ..profile.load import load_profile
    from ..profile.source import is_url, path_of_url

    if target is not None and is_url(target):
        target = path_of_url(target)  # a saved plan may be named by its URL too
    if runtime_only and reboot_phase:
        raise UsageError("--runtime-only and --reboot-phase exclude each other.")
    if arm and (reboot or runtime_only or not reboot_phase):
        raise UsageError(
            "--arm arranges the boot of a reboot-phase apply without rebooting: it takes "
            "--reboot-phase, and neither --reboot nor --runtime-only."
        )
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
        arm=arm,
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
        return _apply_fleet(job, yes, remote, waves, out, verbose)
    engine = engine_of(root, remote)
    terminal = Terminal(yes, out)
    try:
        done = apply_one(engine, job, terminal.confirm, terminal.progress)
        terminal.ran(engine.host, done, job.dry_run)
        if done.reboots(job):
            # Said first: this process may not see the reboot return (`outlives_reboot`).
            wait = job.reboot_timeout if engine.outlives_reboot else None
            terminal.rebooting(engine.host, wait)
            done = after_run(engine, job, done, terminal.progress)
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


class Terminal:
    """One host's apply: what will change, the question, what it came to. In text, the output
    (`-o`); with --format json, standard output is the one document at the end and these
    sentences go to standard error. The question, and what it is about, go where the operator
    reads: standard output on a terminal, else standard error."""

    def __init__(self, yes: bool, out: Output) -> None:
        self.yes = yes
        self.out = out
        self.asks_on_stderr = out.json or out.to_file
        self.waiting = out.progress()
        self.asked = False  # the question said the skipped changes already

    def ran(self, host: Host, done: Done, dry_run: bool) -> None:
        """What `apply_one` came to, before a reboot: the skipped changes (unless the question
        said them), a dry run's operations, what the run changed and the gates it kept."""
        if not self.asked:
            self.skipped(host, done.work)
        if dry_run:
            self.dry_run(host, done.work)
        if done.applied is not None:
            self.applied(host, done.work, done.applied, done.kept_in_run)

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

    def confirm(self, host: Host, work: Work, around: PhaseProbes | None) -> None:
        """`flow.Confirm`: the skipped changes, what will change, the question; once agreed,
        the probes that run around the phase."""
        self.asked = True
        self.skipped(host, work)
        self._reboot_why(work)
        err = self.asks_on_stderr
        color = self.out.stderr_color if err else self.out.color
        self.waiting.clear()
        click.echo(summary(work, color), nl=False, err=err, color=color)
        question = f"Apply {counted_steps(work.planned, work.plan)} to {host.describe()}"
        boot = boot_configuration(work)
        if boot:  # the reboot phase: what the next boot, or a container's restart, takes up
            question += f", the boot configuration among them ({', '.join(boot)})"
        confirm(printable(question + "?"), yes=self.yes, command="tune apply", err=err)
        if around is not None:
            self.probes(around)

    def probes(self, around: PhaseProbes) -> None:
        names = ", ".join(around.probes)
        if around.measured_after_boot:
            self.say(
                f"Probes {names} run before the first change; `tune verify` runs them again "
                "after the boot."
            )
        else:
            self.say(f"Probes {names} run before the first change and after the last.")

    def applied(
        self, host: Host, work: Work, applied: ApplyResult, kept: list[GateFailure]
    ) -> None:
        for line in applied.unsupported:
            self.say(printable(line))  # it names the knob: a host's file name, maybe
        # What was made: an optional knob the kernel refused (its line above) is neither.
        made = tuple(
            step
            for step in work.planned
            if not any(
                line.startswith(f"{step.id} is not supported") for line in applied.unsupported
            )
        )
        said = changes_and_writes(step_entries(made, work.plan), applied.writes)
        self.say(f"Applied {said} to {host.describe()} (run {applied.run_id}).")
        kept_lines(kept)

    def progress(self, text: str) -> None:
        """`flow.Progress`: how a long wait is going, on the status line."""
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
        again = engine.verify_command().replace("tune verify", "tune apply PROFILE --runtime-only")
        return verified_lines(done.verdict, done.pending, host, done.kept, terminal.say, again)
    if done.pending is None and job.reboot:
        terminal.say("No boot configuration changed: not rebooting.")
    elif done.pending is not None and job.arm:
        how = (
            f"the next boot tries the new boot configuration once ({done.pending.try_once}), "
            "the old one stays the default"
            if done.pending.try_once
            else "the next boot takes up the new boot configuration"
        )
        terminal.say(
            f"Armed {host.describe()}: {how}. tune does not reboot it: after the reboot, run "
            f"`{engine.verify_command()}` to make it the default or roll it back."
        )
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
        value = done.applied or ApplyResult(run_id=None, writes=0)
        result = HostResult(host.name, value=value)
    document = applied_document(host.name, result, applied_part(done.work), done.work.skipped)
    pending = done.pending is not None and done.verdict is None
    # armed: that boot is arranged (try-once where the boot loader allows) for whoever reboots.
    return document | {"boot_pending": pending, "armed": pending and job.arm}


def _apply_fleet(
    job: ApplyJob,
    yes: bool,
    remote: RemoteOptions,
    waves: RolloutOptions,
    out: Output,
    verbose: bool,
) -> int:
    """Several hosts: the live settings (`reconciler.cli.fleet`), or, with --reboot, a
    rollout in waves (`reconciler.cli.rollout`)."""
    from .fleet import apply_hosts
    from .rollout import start_rollout

    if job.arm:
        raise UsageError(
            "--arm arranges one host's next boot: name one host (each host's engine runs "
            "`tune apply --reboot-phase --arm` on it)."
        )
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
        verbose=verbose,
    )


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
