"""A rollout: the hosts in waves, each wave's hosts in parallel, the next wave only once the
last one ended within the failure budget.

Each host of a reboot-phase rollout goes: the boot configuration written (a run journaled on
the host, as `tune apply --reboot-phase` writes it, with the pending record), `--before-reboot`,
the reboot (try-once where the host supports it), the wait for a new boot id, `conclude` (verify,
restart the containers when asked, promote or roll back), `--after-verify`. A runtime-only
rollout's host goes through its run alone. Every transition is in the rollout journal
(`rollout.journal`) before the step it announces, so `tune rollout resume` finds each host in
flight in its true state by asking it (`resume_host`): its pending record, its run journal, and
its boot id against the one recorded before the reboot. A host is never rebooted twice and
never left waiting for a reboot nobody asked for: the request marks the host's pending record
with the boot id it asks from before it asks, so resume finds a new boot id (rebooted: verify),
the same one with the mark (asked: wait) or without it (never asked: ask now, once).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..apply.journal import new_run_id, read_run, rolled_back_run
from ..apply.pending import PendingBoot, read_pending
from ..boot.reboot import POLL_S, BootFailed, boot_id_of
from ..core.errors import ApplyFailed, ExitCode, RebootTimeout, TuneError
from ..core.few import LINE, cut
from ..core.files import Request
from ..core.words import counted
from ..flow.orchestration import (
    ApplyJob,
    after_boot,
    concluded,
    prepare_host,
    probes_around,
    run_work,
)
from ..flow.status import after_apply, previous
from ..plan.entries import step_entries
from ..steps.status import STATUS, Status
from .hooks import HookContext, run_hook
from .journal import DONE, FAILED, IN_FLIGHT, NOT_STARTED, ROLLED_BACK, HostEntry, Rollout
from .pool import Steps, Waiting, run_pool
from .waves import FailureBudget

if TYPE_CHECKING:
    from ..apply.engines import Engine
    from ..apply.work import Work
    from ..probes.phase import GateFailure


@dataclass(frozen=True)
class Pace:
    """How the rollout moves between hosts and waves."""

    forks: int
    budget: FailureBudget
    pause_between: float = 0.0  # seconds between two waves
    poll: float = POLL_S  # how often a rebooting host's boot id is read
    before_reboot: str | None = None
    after_verify: str | None = None
    hook_timeout: float = 600.0
    canaries: bool = False  # the first wave is the canaries: the rest waits for a confirmation


class RolloutShow:
    """What the operator sees during a rollout, and is asked. This one shows nothing."""

    def changed(self, name: str, entry: HostEntry, step: str) -> None:
        """A host reached `step` ("applying", "rebooting", "verifying", or its final state);
        called from the host's worker thread."""

    def wave_done(self, index: int, rollout: Rollout) -> None:
        """A wave ended (`index`: 0-based)."""

    def canaries_verified(self, names: Sequence[str]) -> None:
        """The canaries held; raise (`NotConfirmed`) to stop before the rest."""

    def pausing(self, seconds: float) -> None:
        """The pause between two waves starts."""


class Stopped(TuneError):
    """The rollout stopped before a wave: more hosts failed than `--max-fail` allows."""

    exit_code = ExitCode.HOST_ERROR


def run_rollout(
    engines: dict[str, Engine],
    job: ApplyJob,
    rollout: Rollout,
    pace: Pace,
    show: RolloutShow,
    *,
    canary_confirmed: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> Rollout:
    """Every wave not done yet, in order. Stops (journaled in `rollout.stopped`) before a wave
    when the failures exceed the budget, or when the canaries were not confirmed (the
    confirmation's `NotConfirmed` propagates, the rest not started)."""
    allowed = pace.budget.allowed(len(rollout.hosts))
    ran_one = False
    for index, wave in enumerate(rollout.waves):
        todo = [name for name in wave if rollout.hosts[name].state in (NOT_STARTED, IN_FLIGHT)]
        if todo:
            if ran_one and pace.pause_between > 0:
                show.pausing(pace.pause_between)
                sleep(pace.pause_between)
            steps = [
                (
                    engines[name].host,
                    functools.partial(roll_host, engines[name], job, rollout, index, pace, show),
                )
                for name in todo
            ]
            # `forks` threads however wide the wave: a host waiting for its reboot holds none.
            run_pool(steps, pace.forks)
            ran_one = True
            show.wave_done(index, rollout)
        failed = sum(e.state in (FAILED, ROLLED_BACK) for e in rollout.hosts.values())
        last = index == len(rollout.waves) - 1
        if failed > allowed and not last:
            why = (
                f"{counted(failed, 'host')} failed, more than --max-fail allows "
                f"({pace.budget}): stopped after wave {index + 1} of {len(rollout.waves)}; "
                f"`tune rollout resume {rollout.rollout_id} --max-fail {failed}` goes on."
            )
            rollout.stop(why)
            raise Stopped(why)
        if index == 0 and pace.canaries and not last and not canary_confirmed:
            rollout.stop("waiting for the canaries to be confirmed (tune rollout resume)")
            show.canaries_verified(wave)
            canary_confirmed = True
    rollout.stop(None)
    return rollout


def roll_host(
    engine: Engine, job: ApplyJob, rollout: Rollout, wave: int, pace: Pace, show: RolloutShow
) -> Steps:
    """One host of a wave, from where the journal left it, yielding where it waits for its
    reboot (`pool`). Its outcome is journaled, never raised: one host's failure is counted, it
    never stops the others of its wave."""
    name = engine.host.name
    entry = rollout.hosts[name]
    pinned = entry.identity()
    if pinned is not None:
        engine.host.pin(pinned)
    try:
        if entry.state == IN_FLIGHT:
            yield from _resume_host(engine, job, rollout, wave, pace, show)
        else:
            yield from _start_host(engine, job, rollout, wave, pace, show)
    except RebootTimeout as exc:
        _end(
            rollout,
            show,
            name,
            FAILED,
            why=reason(exc),
            code=exc.exit_code,
            configuration="pending",
        )
    except ApplyFailed as exc:
        _end(rollout, show, name, ROLLED_BACK, why=reason(exc), code=exc.exit_code)
    except TuneError as exc:
        known = rollout.hosts[name].state == NOT_STARTED
        _end(
            rollout,
            show,
            name,
            FAILED,
            why=reason(exc),
            code=exc.exit_code,
            configuration="prior" if known else "unknown",
        )


def _start_host(
    engine: Engine, job: ApplyJob, rollout: Rollout, wave: int, pace: Pace, show: RolloutShow
) -> Steps:
    name = engine.host.name
    show.changed(name, rollout.hosts[name], "applying")
    with engine.session():
        work = prepare_host(engine, job)
        if not work.steps:
            _end(rollout, show, name, DONE, configuration="new")
            return
        run_id = new_run_id()
        identity = engine.host.identity()
        host_key = None if identity is None else identity.host_key
        # Before the first write: resume looks for this run on the host, on this machine.
        entry = rollout.update(
            name,
            state=IN_FLIGHT,
            run_id=run_id,
            boot_id=work.plan.host.boot_id,
            changes=step_entries(work.planned, work.plan.compared),
            writes=len(work.planned),
            started=time.time(),
            host_key=host_key,
        )
        pinned = entry.identity()
        if pinned is not None:
            engine.host.pin(pinned)  # the reconnection after the reboot is held to its key
        _, pending = run_work(engine, job, work, probes_around(engine, job), run_id=run_id)
    if pending is None or not job.reboot:
        _end(rollout, show, name, DONE, configuration="new" if pending is None else "pending")
        return
    changes = _changes(work)
    # What status.json says once the run is in: the verdict after the boot is written over it.
    before = after_apply(
        previous(work.observation.files), job.loaded, work, pending.run_id, pending
    )
    # The host's observation and plan are not needed past here: a wave's hosts wait for their
    # reboots together, and holding each one's until it ends was most of a wide wave's memory.
    del work
    yield from _reboot(engine, job, rollout, wave, pace, show, pending, changes, before=before)


def _resume_host(
    engine: Engine, job: ApplyJob, rollout: Rollout, wave: int, pace: Pace, show: RolloutShow
) -> Steps:
    """A host the journal has in flight: asked where it is, it goes on from there."""
    host = engine.host
    entry = rollout.hosts[host.name]
    pending = read_pending(host)
    if pending is not None and pending.run_id == entry.run_id:
        now = boot_id_of(host)
        if now != entry.boot_id or pending.reboot_asked_in == now:  # rebooted, or asked to
            show.changed(host.name, entry, "rebooting")
            yield from _after_reboot(engine, job, rollout, wave, pace, show, pending)
        else:  # never asked (the controller died before its request reached the host)
            hooked = entry.rebooting  # journaled after --before-reboot ran
            yield from _reboot(engine, job, rollout, wave, pace, show, pending, (), hooked=hooked)
        return
    if pending is not None:
        raise TuneError(
            f"{host.describe()} awaits the boot of run {pending.run_id}, not this rollout's "
            f"run {entry.run_id}: run `tune verify -H {host.name}` first."
        )
    run = read_run(host, entry.run_id) if entry.run_id else None
    if run is None:  # the controller died before the run began: nothing was written
        rollout.update(host.name, state=NOT_STARTED, run_id=None, boot_id=None)
        yield from _start_host(engine, job, rollout, wave, pace, show)
    elif run.outcome == "applied":  # concluded (verified, promoted) before the controller died
        _verified(engine, rollout, wave, pace, show)
    elif run.outcome in ("boot-rolled-back", "rolled-back"):
        _end(rollout, show, host.name, ROLLED_BACK, why=f"run {run.run_id} was rolled back.")
    else:
        raise TuneError(
            f"run {run.run_id} on {host.describe()} is {run.outcome}: see `tune history -H "
            f"{host.name}`, then `tune rollback -H {host.name}`."
        )


def _reboot(
    engine: Engine,
    job: ApplyJob,
    rollout: Rollout,
    wave: int,
    pace: Pace,
    show: RolloutShow,
    pending: PendingBoot,
    changes: tuple[dict[str, str], ...],
    *,
    hooked: bool = False,
    before: Status | None = None,
) -> Steps:
    """`hooked`: --before-reboot already ran for this reboot (a resume asking for it);
    `before`: status.json as the run left it (None: read it after the boot)."""
    name = engine.host.name
    if pace.before_reboot and not hooked:
        context = _context(engine, rollout, wave, pending.run_id, changes)
        try:
            run_hook("--before-reboot", pace.before_reboot, context, pace.hook_timeout)
        except TuneError as exc:
            _undo(engine, pending.run_id)
            raise ApplyFailed(
                f"{exc} Its boot configuration is rolled back, not rebooted."
            ) from None
    # Journaled before the reboot is asked for; the request marks pending.json on the host
    # before it asks, so resume tells "asked" (wait) from "never asked" (ask now).
    show.changed(name, rollout.update(name, rebooting=True), "rebooting")
    engine.reboot(pending)
    yield from _after_reboot(engine, job, rollout, wave, pace, show, pending, before)


def _after_reboot(
    engine: Engine,
    job: ApplyJob,
    rollout: Rollout,
    wave: int,
    pace: Pace,
    show: RolloutShow,
    pending: PendingBoot,
    before: Status | None = None,
) -> Steps:
    """The boot waited for, then verified as `tune verify` does, status.json recording the
    verdict (`before`: as the run left it; read here for a host a resume found in flight)."""
    name = engine.host.name
    # Waited for with no thread of its own (`pool`): `RebootTimeout` is thrown in here.
    yield Waiting(engine.host, pending.boot_id, job.reboot_timeout, pace.poll)
    show.changed(name, rollout.hosts[name], "verifying")
    kept: list[GateFailure] = []
    after = after_boot(
        engine, job.keep_on_regression, kept, job.restart_containers, probes=job.probes
    )
    if before is None:
        before = previous(engine.host.fetch(Request.of(whole=[STATUS])))
    verdict = concluded(engine, pending, after, before, job.loaded)
    # Runtime knobs never applied are no news; those that drifted never roll the boot back
    # (`boot.verify`), but the host's line says so.
    drifted = len(verdict.drifted)
    note = f"verified; {drifted} runtime knobs drifted: tune check -H {name}" if drifted else None
    _verified(engine, rollout, wave, pace, show, note)


def _verified(
    engine: Engine,
    rollout: Rollout,
    wave: int,
    pace: Pace,
    show: RolloutShow,
    note: str | None = None,
) -> None:
    name = engine.host.name
    if pace.after_verify:
        context = _context(engine, rollout, wave, rollout.hosts[name].run_id, ())
        try:
            run_hook("--after-verify", pace.after_verify, context, pace.hook_timeout)
        except TuneError as exc:
            _end(
                rollout,
                show,
                name,
                FAILED,
                why=reason(exc),
                code=exc.exit_code,
                configuration="new",
            )
            return
    _end(rollout, show, name, DONE, why=note, configuration="new")


def reason(exc: TuneError) -> str:
    """Why a host failed, in one short line of the rollout's table: a boot that did not hold
    names the first few things (`BootFailed.reason`); the rest is in `tune history`."""
    if isinstance(exc, BootFailed):
        return exc.reason
    return cut(exc.problems()[0] if exc.problems() else str(exc), LINE)


def _undo(engine: Engine, run_id: str) -> None:
    """The run's boot configuration restored before any reboot, its pending record cleared."""
    run = rolled_back_run(engine.host, run_id)
    engine.rollback(run, boot_only=True)
    engine.clear_pending()


def _end(
    rollout: Rollout,
    show: RolloutShow,
    name: str,
    state: str,
    *,
    why: str | None = None,
    code: int | None = None,
    configuration: str = "prior",
) -> None:
    entry = rollout.update(
        name,
        state=state,
        why=why,
        exit_code=code,
        configuration=configuration,
        finished=time.time(),
    )
    show.changed(name, entry, state)


def _context(
    engine: Engine,
    rollout: Rollout,
    wave: int,
    run_id: str | None,
    changes: tuple[dict[str, str], ...],
) -> HookContext:
    host = engine.host
    target = getattr(host, "target", None)
    address = getattr(target, "host", host.name)
    return HookContext(host.name, str(address), wave + 1, rollout.rollout_id, run_id, changes)


def _changes(work: Work) -> tuple[dict[str, str], ...]:
    return tuple({"id": step.id, "kind": step.kind, "target": step.target} for step in work.planned)
