"""`tune apply`, `tune verify` and `tune rollback`, written once for every engine.

This machine, a snapshot, one SSH host and each host of a fleet go through the same stages:
`prepare_host` (tune's state trusted, the last run ended, the work decided; a host with
nothing to change gets the profile stored as its last apply), then, once the operator
confirmed, `run_work` (probes around the phase, the pending record of a reboot phase written
inside the run), then `after_run` (`--reboot`: reboot, and where this process outlives the
reboot, wait for the new boot and verify it). A fleet (`apply_fleet`) prepares every host,
asks once, then runs the work of each host that has some. What differs between hosts is the
`Engine`'s alone.

The flow returns what each stage came to (`Done`, `FleetDone`), and the caller renders it; the
flow calls the caller only to ask what it must ask (`Confirm`, `FleetConfirm`: raise to write
nothing) and, while a long wait lasts (a probe's runs, the reboot), through one narrow live
report (`Progress`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..apply.engines import ApplyResult, Engine
from ..apply.journal import Run, before_apply, check_state, new_run_id
from ..apply.pending import PENDING, PendingBoot, pending_from, pending_of
from ..apply.restored import RollbackResult, roll_back_chain
from ..apply.tryonce import at_risk
from ..apply.work import Work, prepare, prepare_request
from ..boot.reboot import POLL_S, AfterBoot, conclude, wait_for_new_boot
from ..boot.verify import BootVerdict
from ..core.errors import HostError, NotRebooted, NoTryOnce
from ..core.files import Request
from ..hosts.base import Host
from ..hosts.fleet import HostResult, for_each_host
from ..kinds import containers_to_restart
from ..steps.ops import PutFile
from ..steps.status import STATUS, Status
from .status import (
    NOT_REBOOTED,
    after_apply,
    after_rollback,
    after_verify,
    pending_on,
    previous,
    saying_the_same,
    status_file,
)

if TYPE_CHECKING:
    from ..plan.saved import SavedPlan
    from ..probes.phase import GateFailure, PhaseProbes
    from ..profile.load import LoadedProfile


@dataclass(frozen=True)
class ApplyJob:
    """The apply the command line asked for, the same for every host."""

    loaded: LoadedProfile
    runtime_only: bool = False
    reboot_phase: bool = False
    reboot: bool = False
    reboot_timeout: float = 600.0
    reboot_poll: float = POLL_S  # how often a rebooting host's boot id is read
    with_persistence: bool = True
    saved: SavedPlan | None = None
    after_interrupted: bool = False  # apply over a run that was interrupted
    dry_run: bool = False
    probes: bool = True
    keep_on_regression: bool = False
    restart_containers: bool = False  # after the boot is verified
    restart_services: bool = False  # after the apply, those still running with old limits
    # Leave out changes the host lacks what they need for (a module it does not have).
    skip_missing: bool = False
    # --arm: arrange the next boot as --reboot would (try-once where the boot loader allows)
    # and record it in pending.json, but leave the reboot to whoever owns it (an engine).
    arm: bool = False

    @property
    def phase(self) -> str:
        return "runtime" if self.runtime_only else "reboot" if self.reboot_phase else "all"

    def pending(self, run_id: str, work: Work) -> PendingBoot | None:
        """What the next boot must bring, for `tune verify`; None when the run leaves nothing
        for it to check."""
        containers = containers_to_restart(self.loaded.profile)
        pending = pending_of(
            run_id, work.plan.host.boot_id, work.planned, containers, self.restart_containers
        )
        if pending is None:
            return None
        return replace(pending, try_once=work.try_once, promote=work.promote, armed=self.arm)


# The one question of one host's apply, asked with the host's lock held once `work` is decided
# and has steps, never on a dry run: return once the operator agreed to write `work` (the
# probes of `around` then run around the phase), raise (`NotConfirmed`) to write nothing.
Confirm = Callable[[Host, Work, "PhaseProbes | None"], None]

# The one live report: how a long wait (a probe's runs, the wait for a reboot) is going, as a
# line the next one replaces. What a stage came to is returned, never reported through it.
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Done:
    """What one host's apply came to."""

    work: Work
    applied: ApplyResult | None = None  # None: a dry run, or nothing to change
    pending: PendingBoot | None = None  # what the next boot must bring
    verdict: BootVerdict | None = None  # after the boot, when this process verified it
    kept: list[GateFailure] = field(default_factory=list)  # failed gates kept after the boot
    kept_in_run: list[GateFailure] = field(default_factory=list)  # and after the phase

    def reboots(self, job: ApplyJob) -> bool:
        """Whether `after_run` reboots: --reboot, and the run left something for the boot."""
        return self.pending is not None and job.reboot


def apply_one(
    engine: Engine, job: ApplyJob, confirm: Confirm, progress: Progress | None = None
) -> Done:
    """One host's apply, from the observation to the end of its run: the work decided (all a
    dry run does), confirmed, run. A `--reboot` goes on with `after_run`."""
    if job.dry_run:
        return Done(prepare_host(engine, job))
    with engine.session():
        work = prepare_host(engine, job)
        if not work.steps:
            return Done(work)
        around = probes_around(engine, job, progress)
        confirm(engine.host, work, around)
        applied, pending = run_work(engine, job, work, around)
    kept = list(around.failures) if around is not None else []
    return Done(work, applied, pending, kept_in_run=kept)


def prepare_host(engine: Engine, job: ApplyJob) -> Work:
    """Everything before the confirmation. Not for a dry run: tune's state is trusted and the
    last run ended (`journal.before_apply`: even a host with nothing left to change is refused
    after an interrupted run, whose changes "in sync" would hide), and a host with nothing to
    change stores the profile as the one last applied (`tune check` without a profile reads
    it), at no round trip when it is stored already (read in the observation's batch)."""
    host = engine.host
    fetched = None
    if not job.dry_run:
        # The observation in the journal check's batch: a round trip less a host.
        fetched = before_apply(
            host,
            after_interrupted=job.after_interrupted,
            wait_for_lock=engine.wait_for_lock,
            also=prepare_request(job.loaded, job.with_persistence),
        )
    work = prepare(
        host,
        job.loaded,
        runtime_only=job.runtime_only,
        reboot_phase=job.reboot_phase,
        reboot=job.reboot or job.arm,
        with_persistence=job.with_persistence,
        saved=job.saved,
        requirements=engine.preflight,
        unloadable=engine.unloadable if job.skip_missing else None,
        fetched=fetched,
    )
    if job.arm and work.try_once is None and at_risk(work.planned):
        # Without a one-time boot the new command line would be the default at once, and a
        # boot that does not come back would need its console: an engine's reboot, unwatched
        # by tune, must not take that risk. `--reboot-phase` alone writes it that way.
        raise NoTryOnce(
            f"{engine.host.describe()}: --arm needs a one-time boot for the new kernel command "
            f"line and there is none ({work.reboot_why.removeprefix('not try-once: ')}); "
            "nothing was written."
        )
    if not work.steps and not job.dry_run:
        # status.json with profile.yaml; not at all when it would say what it says (a pull
        # timer's apply in sync costs no write, and over SSH no round trip).
        files = work.observation.files
        before = previous(files)
        status = after_apply(before, job.loaded, work, None, pending_on(files))
        said = () if saying_the_same(status, before) else (status_file(status),)
        engine.store_profile(job.loaded, work.stored_profile, said)
    return work


def run_work(
    engine: Engine,
    job: ApplyJob,
    work: Work,
    around: PhaseProbes | None,
    run_id: str | None = None,
) -> tuple[ApplyResult, PendingBoot | None]:
    """The run, once confirmed: the probes `around` the phase (`probes_around`), and
    pending.json written inside the run, so that one that cannot be written rolls the run back
    (exit 3). Returns what the run came to and what the next boot must bring; the gates that
    failed but were kept are `around.failures`. `run_id`: the run's id when the caller
    journaled it before (a rollout), else a new one."""
    run_id = run_id or new_run_id()
    pending = job.pending(run_id, work)
    after: tuple[PutFile, ...] = ()
    if pending is not None:
        after = (PutFile(PENDING, pending.to_json().encode(), 0o600),)
    # status.json in the same run: in sync once it ends, and the boot this run left, else one
    # an earlier run left and this one did not touch.
    files = work.observation.files
    boot = pending if pending is not None else pending_on(files)
    status = after_apply(previous(files), job.loaded, work, run_id, boot)
    after += (status_file(status),)
    applied = engine.apply(
        work, job.loaded, phase=job.phase, run_id=run_id, around=around, after=after
    )
    return applied, pending


def probes_around(
    engine: Engine, job: ApplyJob, progress: Progress | None = None
) -> PhaseProbes | None:
    """The profile's probes around the phase, running where the engine runs them."""
    from ..probes.phase import PhaseProbes

    if not job.probes or not job.loaded.profile.probes:
        return None
    execute, env = engine.probe_executor()
    around = PhaseProbes(
        job.loaded.profile.probes,
        job.phase,
        env,
        job.keep_on_regression,
        execute,
        progress=progress,
    )
    return around


def after_run(engine: Engine, job: ApplyJob, done: Done, progress: Progress | None = None) -> Done:
    """`--reboot` after a run that left something for the boot (`Done.reboots`): reboot; where
    this process outlives the reboot, wait for the new boot and verify it
    (`boot.reboot.conclude`). The caller says the reboot starts before it calls: this process
    may not see the reboot return (`engine.outlives_reboot`)."""
    pending = done.pending
    if pending is None or not job.reboot:
        return done
    engine.reboot(pending)
    if not engine.outlives_reboot:
        return done
    wait_for_new_boot(
        engine.host,
        pending.boot_id,
        job.reboot_timeout,
        interval=job.reboot_poll,
        progress=progress,
    )
    kept: list[GateFailure] = []
    after = after_boot(
        engine, job.keep_on_regression, kept, job.restart_containers, probes=job.probes
    )
    before = after_apply(
        previous(done.work.observation.files), job.loaded, done.work, pending.run_id, pending
    )
    verdict = concluded(engine, pending, after, before, job.loaded)
    return replace(done, verdict=verdict, kept=kept)


@dataclass(frozen=True)
class BootHeld:
    """A boot that held (`tune verify`, or `tune apply --reboot` that waited for it)."""

    pending: PendingBoot
    verdict: BootVerdict
    kept: list[GateFailure]  # failed gates kept


def verify_one(
    engine: Engine, *, keep_on_regression: bool, restart_containers: bool
) -> BootHeld | None:
    """`tune verify`: the pending boot checked, then promoted or rolled back; None when no
    reboot-phase apply is pending."""
    kept: list[GateFailure] = []
    with engine.session():
        check_state(engine.host, PENDING)
        # The status.json it replaces, in the same batch: what it keeps of the last apply.
        files = engine.host.fetch(Request.of(whole=[PENDING, STATUS]))
        if PENDING in files.errors:
            raise HostError(f"{PENDING}: cannot read it ({files.errors[PENDING]}).")
        pending = pending_from(files.read(PENDING))
        if pending is None:
            return None
        before = previous(files)
        after = after_boot(engine, keep_on_regression, kept, restart_containers)
        verdict = concluded(engine, pending, after, before)
    return BootHeld(pending, verdict, kept)


def concluded(
    engine: Engine,
    pending: PendingBoot,
    after: AfterBoot,
    before: Status,
    applied: LoadedProfile | None = None,
) -> BootVerdict:
    """`conclude`, and status.json saying what it came to (`before`: the status until now),
    written with pending.json's removal (no round trip of its own); not rebooted yet, in a
    write of its own. `applied`: the profile the run stored, where this process applied it."""

    def said(verdict: str, boot_id: str | None) -> tuple[PutFile, ...]:
        return (status_file(after_verify(before, pending, verdict, boot_id)),)

    try:
        return conclude(engine, pending, after, said, applied)
    except NotRebooted as exc:
        status = after_verify(before, pending, NOT_REBOOTED, pending.boot_id)
        try:
            engine.write_files((status_file(status),), f"writing {STATUS}")
        except HostError as failed:  # said, under the exit code an engine waits on (10)
            raise NotRebooted(*exc.problems(), *failed.problems()) from None
        raise


def after_boot(
    engine: Engine,
    keep_on_regression: bool,
    kept: list[GateFailure],
    restart_containers: bool,
    probes: bool = True,
) -> AfterBoot:
    """Once the boot checks pass: the containers restarted (when asked, now or at the apply),
    then the probes of the run measured again where the engine runs them; gate failures that
    are kept go to `kept`. Without `probes` (the run measured none: --no-probes) the run is
    not read for them: a round trip a host saved."""
    from ..boot.containers import restart_after_boot
    from ..boot.verify import probe_after_boot

    execute, env = engine.probe_executor()
    host = engine.host

    def after(pending: PendingBoot, verdict: BootVerdict) -> None:
        if restart_containers or pending.restart_containers:
            restart_after_boot(host, pending, verdict, engine.run_command)
        if probes:
            kept.extend(probe_after_boot(host, pending, verdict, execute, env, keep_on_regression))

    return after


def roll_back(
    engine: Engine, run_id: str | None, approve: Callable[[list[Run]], None] | None = None
) -> Sequence[RollbackResult]:
    """`tune rollback`: the run `run_id` (by default the newest, and the interrupted runs right
    before it), newest first; stops at the first that leaves a change behind. `approve` sees
    those runs, with the host's lock held, and raises to restore none."""
    with engine.session():
        done = roll_back_chain(engine.host, run_id, engine.rollback, approve)
        if any(not one.already for one in done):
            _said_rolled_back(engine)
    return done


def _said_rolled_back(engine: Engine) -> None:
    """status.json after a rollback that restored something, read with pending.json in one
    batch and written in one script: an engine must not read "in sync" from a host whose
    values were just put back."""
    files = engine.host.fetch(
        Request(patterns=frozenset({STATUS, PENDING}), whole=frozenset({STATUS, PENDING}))
    )
    status = after_rollback(previous(files), pending_on(files))
    engine.write_files((status_file(status),), f"writing {STATUS}")


# The one question of a fleet's apply, asked once every host is prepared and some host has
# something to change, never on a dry run: `(prepared, writes, hosts)`, what each host will
# change (or why it cannot) and how many writes on how many hosts; raise to write nothing.
FleetConfirm = Callable[[Sequence[HostResult[Work]], int, int], None]


@dataclass(frozen=True)
class FleetDone:
    """What a fleet's apply came to, per host in the hosts' order."""

    prepared: list[HostResult[Work]]
    # Each host's run, None for one in sync, or its error; empty after a dry run.
    applied: list[HostResult[ApplyResult]] = field(default_factory=list)
    ran: bool = False  # whether any host had something to change


def apply_fleet(
    engines: Sequence[Engine],
    job: ApplyJob,
    confirm: FleetConfirm,
    *,
    forks: int,
    progress: Callable[[int, int], None] | None = None,
) -> FleetDone:
    """Every host prepared (`prepare_host`), `forks` at a time, its connection kept open; one
    confirmation for the whole fleet; then the work of each host that has some (`run_work`).
    A host that cannot be reached, or whose run rolls back, is that host's result and never
    stalls the others. The caller closes the hosts."""
    by_name = {engine.host.name: engine for engine in engines}
    hosts = [engine.host for engine in engines]
    with contextlib.ExitStack() as held:

        def prepare(host: Host) -> Work:
            engine = by_name[host.name]
            if not job.dry_run:
                # From a worker thread: entering only appends its exit to the stack's deque.
                held.enter_context(engine.session())
            return prepare_host(engine, job)

        prepared = for_each_host(hosts, prepare, forks, progress, keep_open=True)
        if job.dry_run:
            return FleetDone(prepared)
        works = {r.name: r.value for r in prepared if r.value is not None and r.value.steps}
        if works:
            confirm(prepared, sum(len(work.planned) for work in works.values()), len(works))

        def run(host: Host) -> ApplyResult:
            engine = by_name[host.name]
            return run_work(engine, job, works[host.name], probes_around(engine, job))[0]

        changing = [host for host in hosts if host.name in works]
        done = {r.name: r for r in for_each_host(changing, run, forks, progress)}
    return FleetDone(prepared, [_outcome(r, done) for r in prepared], bool(works))


def _outcome(
    prepared: HostResult[Work], applied: dict[str, HostResult[ApplyResult]]
) -> HostResult[ApplyResult]:
    if prepared.name in applied:
        return applied[prepared.name]
    if prepared.error is not None:
        return HostResult(prepared.name, error=prepared.error)
    skipped = prepared.value.skipped if prepared.value is not None else ()
    return HostResult(prepared.name, value=ApplyResult(None, 0, skipped=skipped))
