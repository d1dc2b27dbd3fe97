"""`tune apply`, `tune rollback` and `tune history`: the commands that write, and the record."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from . import saved as saved_plans
from .errors import ApplyFailed, ExitCode, UsageError
from .host import Host, open_host
from .journal import LOCK, STATE, read_run, run_ids
from .remote import RemoteOptions, remote_options
from .verify import PENDING, pending_of

if TYPE_CHECKING:
    from .apply import Work
    from .probes.phase import PhaseProbes
    from .profile import LoadedProfile
    from .steps import Step

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
@click.option("--reboot", is_flag=True, help="Reboot into the new configuration (not yet).")
@click.option("--restart-containers", is_flag=True, help=RESTART_HELP)
@click.option("--root", metavar="DIR", help=ROOT_HELP)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation on a terminal.")
@click.option("--dry-run", is_flag=True, help="Print the exact operations; write nothing.")
@click.option("--no-persist", is_flag=True, help="Do not write tune's boot-time files.")
@click.option("--no-probes", is_flag=True, help="Do not run the profile's probes around the phase.")
@click.option(
    "--keep-on-regression", is_flag=True, help="Keep the changes even when a probe gate fails."
)
@remote_options
def apply(
    target: str | None,
    runtime_only: bool,
    reboot_phase: bool,
    reboot: bool,
    restart_containers: bool,
    root: str | None,
    yes: bool,
    dry_run: bool,
    no_persist: bool,
    no_probes: bool,
    keep_on_regression: bool,
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
    --keep-on-regression. `tune report` shows the numbers.
    """
    from .apply import execute, prepare, store_profile
    from .profile import load_profile

    if runtime_only and reboot_phase:
        raise UsageError("--runtime-only and --reboot-phase exclude each other.")
    if reboot and runtime_only:
        raise UsageError("--reboot needs the boot configuration: drop --runtime-only.")
    if restart_containers and runtime_only:
        raise UsageError(
            "--restart-containers follows the boot configuration: drop --runtime-only."
        )
    if reboot and root is not None:
        raise UsageError(
            "--reboot is refused on a snapshot (--root): there is no machine to reboot; "
            "the boot-tool commands are recorded in the run's journal."
        )
    if reboot:
        raise UsageError(
            "--reboot is not implemented yet: apply with --reboot-phase, reboot, then run "
            "`tune verify`."
        )
    if remote.wanted:
        probes = (
            not no_probes
            and target is not None
            and not saved_plans.is_saved_plan(target)
            and load_profile(target).profile.probes
        )
        if probes:
            raise UsageError(
                "probes run on this machine, not on the -H host; add --no-probes "
                "(or run tune probe on the host)."
            )
        return _apply_remote(target, runtime_only, root, yes, dry_run, no_persist, remote)
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
        click.echo(dry_run_text(work.steps, host), nl=False)
        return ExitCode.IN_SYNC
    host.check_privileges()
    pending = None
    with host.lock(LOCK):
        work = work_now()
        if not work.steps:
            store_profile(host, None, loaded)
            click.echo(f"In sync: nothing to change on {host.describe()}.")
            return ExitCode.IN_SYNC
        click.echo(_summary(work), nl=False)
        if not yes and sys.stdin.isatty():
            click.confirm(f"Apply {len(work.steps)} changes to {host.describe()}?", abort=True)
        around = _probes(loaded, phase, root, keep_on_regression) if not no_probes else None
        if around is not None:
            names = ", ".join(around.probes)
            click.echo(f"Probes {names} run before the first change and after the last.")
        run_id = execute(host, work, loaded, phase=phase, around=around)
        pending = pending_of(
            run_id,
            work.plan.host.boot_id,
            work.steps,
            [entry.config for entry in loaded.profile.lxc],
            restart_containers,
        )
        if pending is not None:
            host.put_file(PENDING, pending.to_json().encode(), 0o600)
    click.echo(f"Applied {len(work.steps)} changes to {host.describe()} (run {run_id}).")
    for failure in around.failures if around is not None else []:
        click.echo(f"gate failed, kept: {failure.probe}: {failure.verdict.message}", err=True)
    if pending is not None:
        click.echo(
            "The boot configuration changed: it takes effect at the next boot. Reboot, then "
            "run `tune verify`."
        )
    return ExitCode.IN_SYNC


@click.command()
@click.option("--root", metavar="DIR", help="Verify a snapshot directory instead of this machine.")
@click.option("--restart-containers", is_flag=True, help=RESTART_HELP)
def verify(root: str | None, restart_containers: bool) -> int:
    """After the reboot that a reboot-phase apply prepared: check that the boot brought what it
    must (kernel parameters, NVIDIA majors of each container, the runtime part still held).

    \b
    With --restart-containers (or when the apply asked for it), then restarts
    each container of the profile and checks it sees every /dev/nvidia* node.
    On failure, rolls the boot configuration back, says what did not hold, exits 3.
    """
    from .apply import rollback as roll_back
    from .containers import restart_after_boot
    from .verify import read_pending
    from .verify import verify as check_boot

    host = open_host(root)
    host.check_privileges()
    with host.lock(LOCK):
        pending = read_pending(host)
        if pending is None:
            click.echo(f"Nothing to verify on {host.describe()}: no reboot-phase apply pending.")
            return ExitCode.IN_SYNC
        verdict = check_boot(host, pending)
        if restart_containers or pending.restart_containers:
            restart_after_boot(host, pending, verdict)
        if verdict.failed:
            done = roll_back(host, pending.run_id, boot_only=True)
            host.delete_file(PENDING)
            undone = (
                f"{len(done.result.failures)} not restored: " + "; ".join(done.result.failures)
                if done.result.failures
                else f"rolled back {done.result.restored} boot-configuration changes"
            )
            raise ApplyFailed(
                f"after the boot, {len(verdict.failed)} things did not hold: "
                + "; ".join(verdict.failed)
                + f". Run {pending.run_id}: {undone}; reboot again to boot the prior configuration."
            )
        host.delete_file(PENDING)
    for line in verdict.held:
        click.echo(f"ok  {line}")
    click.echo(f"Verified run {pending.run_id} after the boot on {host.describe()}.")
    return ExitCode.IN_SYNC


def _one_remote(root: str | None, remote: RemoteOptions) -> Host:
    if root is not None:
        raise UsageError("--root and -H/--inventory name different hosts; give one.")
    if remote.is_fleet:
        raise UsageError("this command works on one -H host at a time.")
    return remote.open()[0]


def _apply_remote(
    target: str | None,
    runtime_only: bool,
    root: str | None,
    yes: bool,
    dry_run: bool,
    no_persist: bool,
    remote: RemoteOptions,
) -> int:
    """The apply runs on the target as one detached sh script; see `reconciler.remote_apply`."""
    from .apply import prepare
    from .profile import load_profile
    from .remote_apply import apply_remote
    from .shell import ShellHost

    if target is None or saved_plans.is_saved_plan(target):
        raise UsageError("over SSH, tune apply takes a profile, not a saved plan.")
    if not runtime_only:
        raise UsageError("over SSH, tune apply needs --runtime-only (boot configuration is local).")
    loaded = load_profile(target)
    host = _one_remote(root, remote)
    assert isinstance(host, ShellHost)
    try:
        work = prepare(
            host,
            loaded,
            runtime_only=True,
            with_persistence=not no_persist,
            preflight_here=False,
        )
        if dry_run:
            click.echo(dry_run_text(work.steps, host), nl=False)
            return ExitCode.IN_SYNC
        if not work.steps:
            click.echo(f"In sync: nothing to change on {host.describe()}.")
            return ExitCode.IN_SYNC
        click.echo(_summary(work), nl=False)
        if not yes and sys.stdin.isatty():
            click.confirm(f"Apply {len(work.steps)} changes to {host.describe()}?", abort=True)
        done = apply_remote(host, work, loaded, phase="runtime", timeout=remote.command_timeout)
    finally:
        host.close()
    click.echo(f"Applied {done.changes} changes to {host.describe()} (run {done.run_id}).")
    return ExitCode.IN_SYNC


def _probes(
    loaded: LoadedProfile, phase: str, root: str | None, keep_on_regression: bool
) -> PhaseProbes | None:
    from .probes.phase import PhaseProbes

    if not loaded.profile.probes:
        return None
    # Probes run on this machine; for a snapshot they get its directory to measure.
    env = {"TUNE_ROOT": str(Path(root).resolve())} if root else {}
    return PhaseProbes(loaded.profile.probes, phase, env, keep_on_regression)


def _plan_root(saved: saved_plans.SavedPlan, root: str | None) -> str | None:
    if root is None:
        return saved.root
    if saved.root is None or Path(root).resolve() != Path(saved.root):
        made_for = saved.root or "this machine"
        raise UsageError(f"{saved.path} was made for {made_for}, not {root}.")
    return root


def _summary(work: Work) -> str:
    from .render.text import render

    ids = {s.id for s in work.steps}
    plan = replace(
        work.plan,
        compared=tuple(c for c in work.plan.compared if c.id in ids),
        pending=(),
        checks=(),
        notes=(),
    )
    color = sys.stdout.isatty()
    lines = render(plan, color).splitlines()
    return "\n".join(lines[:-1]) + "\n"


def dry_run_text(steps: tuple[Step, ...], host: Host) -> str:
    from .model import Value

    def show(value: Value) -> str:
        if isinstance(value, tuple):
            return f"{len(value)} lines"
        return "(absent)" if value is None else repr(value)

    lines = [
        f"Dry run on {host.describe()}: {len(steps)} changes, nothing written.",
        f"Each change is journaled under {STATE}/runs/ before its write, with {LOCK} held.",
    ]
    for step in steps:
        lines.append(f"{step.id}: {show(step.prior)} -> {show(step.desired)}")
        lines.extend(f"    {op.describe()}" for op in step.do)
        if not step.do:
            lines.append("    (made by the step before it)")
    return "\n".join(lines) + "\n"


@click.command()
@click.argument("run_id", required=False)
@click.option("--root", metavar="DIR", help=ROOT_HELP)
@remote_options
def rollback(run_id: str | None, root: str | None, remote: RemoteOptions) -> int:
    """Restore the values a run recorded (the newest run by default), in reverse order."""
    from .apply import RollbackResult
    from .apply import rollback as roll_back

    done: RollbackResult
    if remote.wanted:
        from .remote_apply import rollback_remote
        from .shell import ShellHost

        host = _one_remote(root, remote)
        assert isinstance(host, ShellHost)
        try:
            done = rollback_remote(host, run_id)
        finally:
            host.close()
    else:
        host = open_host(root)
        host.check_privileges()
        with host.lock(LOCK):
            done = roll_back(host, run_id)
    if done.already:
        click.echo(f"Run {done.run_id} is already rolled back; nothing to do.")
        return ExitCode.IN_SYNC
    result = done.result
    if result.failures:
        raise ApplyFailed(
            f"rollback of run {done.run_id} left {len(result.failures)} changes not restored: "
            + "; ".join(result.failures)
        )
    click.echo(
        f"Rolled back run {done.run_id} on {host.describe()}: {result.restored} restored, "
        f"{result.unchanged} already at their prior value."
    )
    return ExitCode.IN_SYNC


@click.command()
@click.option("--root", metavar="DIR", help="Read a snapshot directory instead of this machine.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@remote_options
def history(root: str | None, fmt: str, remote: RemoteOptions) -> int:
    """List the runs journaled on the host: time, profile, outcome, number of changes."""
    host = _one_remote(root, remote) if remote.wanted else open_host(root)
    rows = []
    try:
        runs = [read_run(host, run_id) for run_id in run_ids(host)]
    finally:
        host.close()
    for run in runs:
        if run is None:
            continue
        run_id = run.run_id
        rows.append(
            {
                "run_id": run_id,
                "started": run.header.get("started"),
                "finished": run.finished,
                "profile": run.header.get("profile"),
                "phase": run.header.get("phase"),
                "outcome": run.outcome,
                "changes": len(run.steps),
            }
        )
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return ExitCode.IN_SYNC
    if not rows:
        click.echo(f"No tune runs on {host.describe()}.")
        return ExitCode.IN_SYNC
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
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return ExitCode.IN_SYNC
