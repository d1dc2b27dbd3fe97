"""`tune apply`, `tune rollback` and `tune history`: the commands that write, and the record."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..apply.journal import LOCK, Run, before_apply, check_state, every_run, read_run
from ..boot.verify import PENDING, BootVerdict, PendingBoot, pending_of
from ..errors import ApplyFailed, ExitCode, JournalError, UsageError
from ..hosts.base import Host
from ..hosts.directory import open_host
from ..kinds import lxc
from ..plan import saved as saved_plans
from ..render.apply import applied_part, dry_run_text
from ..render.printable import printable
from .options import format_option
from .remote import RemoteOptions, no_root, remote_options

if TYPE_CHECKING:
    from ..apply.engine import Work
    from ..boot.reboot import AfterBoot
    from ..boot.tryonce import Boot
    from ..probes.phase import GateFailure, PhaseProbes
    from ..profile.load import LoadedProfile

ROOT_HELP = "Apply to a snapshot directory laid out like the host's / instead of this machine."
RESTART_HELP = (
    "After the boot is verified, restart the profile's containers and check that they see "
    "/dev/nvidia*."
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
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation on a terminal.")
@click.option("--dry-run", is_flag=True, help="Print the exact operations; write nothing.")
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
    Without TARGET, applies the plan `tune plan` saved in .tune/plan.json,
    after re-observing the host: a plan whose observed values moved is refused.
    Each change is journaled on the host before it is written and read back
    after; any failure (or Ctrl-C) restores every change made, and exits 3.
    With probes in the profile, they run before the first write and after the
    last; a gate that fails afterwards rolls the changes back (exit 3) unless
    --keep-on-regression. `tune report` shows the numbers. A run that was
    interrupted (killed, power lost) blocks the next apply (exit 5) until
    `tune rollback` restores it, or --after-interrupted applies over it.
    """
    from ..apply.engine import execute, prepare, store_profile
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
    if remote.wanted:
        return _apply_remote(
            target,
            Phases(runtime_only, reboot_phase, reboot, reboot_timeout),
            root,
            yes,
            dry_run,
            no_persist,
            remote,
            no_probes=no_probes,
            keep_on_regression=keep_on_regression,
            fmt=fmt,
            after_interrupted=after_interrupted,
        )
    saved = None
    with_persistence = not no_persist
    if target is None or saved_plans.is_saved_plan(target):
        saved = saved_plans.load(target or saved_plans.DEFAULT)
        root = _plan_root(saved, root)
        profile_path = saved.profile_path
        with_persistence = with_persistence and saved.persist
    else:
        profile_path = target
    loaded = load_profile(profile_path)
    host = open_host(root)
    phase = "runtime" if runtime_only else "reboot" if reboot_phase else "all"

    def work_now() -> Work:
        return prepare(
            host,
            loaded,
            runtime_only=runtime_only,
            reboot_phase=reboot_phase,
            with_persistence=with_persistence,
            saved=saved,
        )

    if dry_run:
        work = work_now()
        click.echo(_dry_run(work, reboot, host), nl=False)
        return ExitCode.IN_SYNC
    host.check_privileges()
    pending = None
    with host.lock(LOCK):
        before_apply(host, after_interrupted=after_interrupted)
        work = work_now()
        if not work.steps:
            store_profile(host, None, loaded)
            click.echo(f"In sync: nothing to change on {host.describe()}.")
            return ExitCode.IN_SYNC
        boot = _boot(work, reboot)
        click.echo(summary(work), nl=False)
        if not yes and sys.stdin.isatty():
            click.confirm(f"Apply {len(work.steps)} changes to {host.describe()}?", abort=True)
        around = None if no_probes else _probes(host, loaded, phase, root, keep_on_regression)
        run_id = execute(host, replace(work, steps=boot.now), loaded, phase=phase, around=around)
        containers = [entry.config for entry in loaded.profile.spec(lxc.KIND) or ()]
        pending = _pending(run_id, work, boot, containers, restart_containers)
        if pending is not None:
            host.put_file(PENDING, pending.to_json().encode(), 0o600)
    skipped = _skipped(host, run_id)
    click.echo(
        f"Applied {len(boot.now) - len(skipped)} changes to {host.describe()} (run {run_id})."
    )
    _kept(around.failures if around is not None else [])
    if pending is not None and reboot:
        from ..boot.reboot import LocalTarget

        click.echo(f"Rebooting {host.describe()}; after the boot, run `tune verify`.")
        LocalTarget(host).reboot()
    elif pending is not None:
        click.echo(
            "The boot configuration changed: it takes effect at the next boot. Reboot, then "
            "run `tune verify`."
        )
    elif reboot:
        click.echo("No boot configuration changed: not rebooting.")
    return ExitCode.IN_SYNC


@dataclass(frozen=True)
class Phases:
    """Which phases an apply writes, and whether it reboots after them."""

    runtime_only: bool
    reboot_phase: bool
    reboot: bool = False
    reboot_timeout: float = 600.0

    @property
    def name(self) -> str:
        return "runtime" if self.runtime_only else "reboot" if self.reboot_phase else "all"


def _boot(work: Work, reboot: bool) -> Boot:
    """The steps of the run, with a one-time boot in place of the command-line steps when
    rebooting and the boot loader allows it; says which before the user confirms."""
    from ..boot.tryonce import Boot, arrange

    if not reboot:
        return Boot(None, "", work.steps)
    boot = arrange(work.steps, work.observation.files)
    click.echo(f"Reboot: {boot.why}.")
    return boot


def _pending(
    run_id: str,
    work: Work,
    boot: Boot,
    containers: Sequence[str] = (),
    restart_containers: bool = False,
) -> PendingBoot | None:
    pending = pending_of(run_id, work.plan.host.boot_id, work.steps, containers, restart_containers)
    if pending is None:
        return None
    return replace(pending, try_once=boot.try_once, promote=boot.promote)


def _dry_run(work: Work, reboot: bool, host: Host) -> str:
    boot = _boot(work, reboot)
    text = dry_run_text(boot.now, host)
    if boot.promote:
        text += dry_run_text(boot.promote, host, "Once the boot is verified, appended to the run")
    return text


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
    from ..boot.reboot import BootTarget, LocalTarget, RemoteTarget, conclude
    from ..boot.verify import read_pending
    from ..hosts.shell import ShellHost

    target: BootTarget
    lock: contextlib.AbstractContextManager[None]
    kept: list[GateFailure] = []
    if remote.wanted:
        if restart_containers:
            raise UsageError(
                "--restart-containers works on this machine's containers, not over -H."
            )
        host = _one_remote(root, remote)
        assert isinstance(host, ShellHost)
        target, lock = RemoteTarget(host), contextlib.nullcontext()  # its scripts lock
        slack = remote.command_timeout
        after_boot = _after_boot(host, None, keep_on_regression, kept, False, slack)
    else:
        host = open_host(root)
        host.check_privileges()
        target, lock = LocalTarget(host), host.lock(LOCK)
        after_boot = _after_boot(host, root, keep_on_regression, kept, restart_containers)
    try:
        with lock:
            check_state(host, PENDING)
            pending = read_pending(host)
            if pending is None:
                click.echo(
                    f"Nothing to verify on {host.describe()}: no reboot-phase apply pending."
                )
                return ExitCode.IN_SYNC
            verdict = conclude(target, pending, after_boot)
    finally:
        host.close()
    return _verified(verdict, pending, host, kept)


def _after_boot(
    host: Host,
    root: str | None,
    keep_on_regression: bool,
    kept: list[GateFailure],
    restart_containers: bool,
    slack: float = 0.0,
) -> AfterBoot:
    """Once the boot checks pass: the containers restarted (when asked, here or at apply),
    then the probes of the run measured again on `host`; kept failures go to `kept`."""
    from ..boot.containers import restart_after_boot
    from ..boot.verify import probe_after_boot
    from ..probes.remote import executor_for

    execute, env = executor_for(host, root, slack)

    def after_boot(pending: PendingBoot, verdict: BootVerdict) -> None:
        if restart_containers or pending.restart_containers:
            restart_after_boot(host, pending, verdict)
        kept.extend(probe_after_boot(host, pending, verdict, execute, env, keep_on_regression))

    return after_boot


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


def _apply_remote(
    target: str | None,
    phases: Phases,
    root: str | None,
    yes: bool,
    dry_run: bool,
    no_persist: bool,
    remote: RemoteOptions,
    *,
    no_probes: bool,
    keep_on_regression: bool,
    fmt: str,
    after_interrupted: bool,
) -> int:
    """The apply runs on the target as one detached sh script; see `reconciler.apply.sh_engine`.
    With --reboot, tune then reboots the target, waits for its new boot id and verifies it."""
    from ..apply.engine import prepare
    from ..apply.journal import new_run_id
    from ..apply.sh_engine import apply_remote
    from ..apply.steps import PutFile
    from ..boot.reboot import RemoteTarget, conclude, wait_for_new_boot
    from ..hosts.shell import ShellHost
    from ..profile.load import load_profile

    if target is None or saved_plans.is_saved_plan(target):
        raise UsageError("over SSH, tune apply takes a profile, not a saved plan.")
    loaded = load_profile(target)
    if remote.is_fleet:
        no_root(root)
        return _apply_fleet(
            loaded, phases, yes, dry_run, no_persist, remote, no_probes, fmt, after_interrupted
        )
    host = _one_remote(root, remote)
    assert isinstance(host, ShellHost)
    try:
        if not dry_run:
            before_apply(host, after_interrupted=after_interrupted, locked=False)
        work = prepare(
            host,
            loaded,
            runtime_only=phases.runtime_only,
            reboot_phase=phases.reboot_phase,
            with_persistence=not no_persist,
            preflight_here=False,
        )
        if dry_run:
            click.echo(_dry_run(work, phases.reboot, host), nl=False)
            return ExitCode.IN_SYNC
        if not work.steps:
            click.echo(f"In sync: nothing to change on {host.describe()}.")
            return ExitCode.IN_SYNC
        boot = _boot(work, phases.reboot)
        click.echo(summary(work), nl=False)
        if not yes and sys.stdin.isatty():
            click.confirm(f"Apply {len(work.steps)} changes to {host.describe()}?", abort=True)
        slack = remote.command_timeout
        around = (
            None
            if no_probes
            else _probes(host, loaded, phases.name, None, keep_on_regression, slack)
        )
        run_id = new_run_id()
        pending = _pending(run_id, work, boot)
        record = () if pending is None else (PutFile(PENDING, pending.to_json().encode(), 0o600),)
        done = apply_remote(
            host,
            replace(work, steps=boot.now),
            loaded,
            phase=phases.name,
            timeout=remote.command_timeout,
            around=around,
            run_id=run_id,
            after=record,
        )
        for line in done.unsupported:
            click.echo(printable(line))  # it names the knob: a host's file name, maybe
        changes = done.changes - len(done.unsupported)
        click.echo(f"Applied {changes} changes to {host.describe()} (run {done.run_id}).")
        _kept(around.failures if around is not None else [])
        if pending is None:
            if phases.reboot:
                click.echo("No boot configuration changed: not rebooting.")
            return ExitCode.IN_SYNC
        if not phases.reboot:
            click.echo(
                "The boot configuration changed: it takes effect at the next boot. Reboot, "
                f"then run `tune verify -H {host.name}`."
            )
            return ExitCode.IN_SYNC
        reboot_target = RemoteTarget(host)
        reboot_target.reboot()
        click.echo(
            f"Rebooting {host.describe()}; waiting up to {phases.reboot_timeout:g} s for it."
        )
        wait_for_new_boot(host, pending.boot_id, phases.reboot_timeout)
        kept: list[GateFailure] = []
        after_boot = _after_boot(host, None, keep_on_regression, kept, False, slack)
        verdict = conclude(reboot_target, pending, after_boot)
    finally:
        host.close()
    return _verified(verdict, pending, host, kept)


def _apply_fleet(
    loaded: LoadedProfile,
    phases: Phases,
    yes: bool,
    dry_run: bool,
    no_persist: bool,
    remote: RemoteOptions,
    no_probes: bool,
    fmt: str,
    after_interrupted: bool,
) -> int:
    """Several hosts: the live settings only, each host through `reconciler.cli.fleet`."""
    from .fleet import RemoteApply, apply_hosts

    if not phases.runtime_only:
        raise UsageError(
            "over several hosts, tune apply needs --runtime-only: apply boot configuration "
            "(and --reboot) one -H host at a time."
        )
    if loaded.profile.probes and not no_probes:
        raise UsageError(
            "probes run on one -H host at a time; add --no-probes to apply over several hosts."
        )
    job = RemoteApply(loaded, not no_persist, remote.command_timeout, after_interrupted, dry_run)
    return apply_hosts(
        remote.open(), job, forks=remote.forks, yes=yes, dry_run=dry_run, as_json=fmt == "json"
    )


def _skipped(host: Host, run_id: str) -> list[str]:
    """Print, and return, the optional knobs the kernel refused in the run."""
    run = read_run(host, run_id)
    lines = run.unsupported if run is not None else []
    for line in lines:
        click.echo(printable(line))  # it names the knob: a host's file name, maybe
    return lines


def _probes(
    host: Host,
    loaded: LoadedProfile,
    phase: str,
    root: str | None,
    keep_on_regression: bool,
    slack: float = 0.0,
) -> PhaseProbes | None:
    """The profile's probes around the phase, running where `host` is (see `executor_for`)."""
    from ..probes.phase import PhaseProbes
    from ..probes.remote import executor_for

    if not loaded.profile.probes:
        return None
    execute, env = executor_for(host, root, slack)
    around = PhaseProbes(loaded.profile.probes, phase, env, keep_on_regression, execute)
    names = ", ".join(around.probes)
    if around.measured_after_boot:
        click.echo(
            f"Probes {names} run before the first change; `tune verify` runs them again "
            "after the boot."
        )
    else:
        click.echo(f"Probes {names} run before the first change and after the last.")
    return around


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


@click.command()
@click.argument("run_id", required=False)
@click.option("--root", metavar="DIR", help=ROOT_HELP)
@remote_options
def rollback(run_id: str | None, root: str | None, remote: RemoteOptions) -> int:
    """Restore the values a run recorded, in reverse order: by default the newest run, and
    the interrupted runs right before it (a run applied with --after-interrupted over one).
    A damaged journal: the steps recorded before the damage are restored, then exit 6 with
    the line that is damaged and what is left to check by hand."""
    from ..apply.engine import RollbackResult, restore_run, roll_back_chain

    done: list[RollbackResult]
    if remote.wanted:
        from ..apply.sh_engine import restore_remote
        from ..hosts.shell import ShellHost

        host = _one_remote(root, remote)
        assert isinstance(host, ShellHost)
        try:
            done = roll_back_chain(host, run_id, restore_remote)
        finally:
            host.close()
    else:
        host = open_host(root)
        host.check_privileges()
        with host.lock(LOCK):
            done = roll_back_chain(host, run_id, restore_run)
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


@click.command()
@click.option("--root", metavar="DIR", help="Read a snapshot directory instead of this machine.")
@format_option("text", "json")
@remote_options
def history(root: str | None, fmt: str, remote: RemoteOptions) -> int:
    """List the runs journaled on the host: time, profile, outcome, number of changes. A
    damaged journal's run is listed as far as it reads, outcome "damaged"; then exit 6."""
    host = _one_remote(root, remote) if remote.wanted else open_host(root)
    try:
        runs, damaged = every_run(host)
    finally:
        host.close()
    _history_table(host, runs, {d.readable.run_id for d in damaged}, fmt)
    if damaged:  # after the table: the other runs are still worth seeing
        raise JournalError(*(p for d in damaged for p in d.problems()))
    return ExitCode.IN_SYNC


def _history_table(host: Host, runs: list[Run], damaged: set[str], fmt: str) -> None:
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
