"""The Python executor of `tune apply` and `tune rollback`: it writes through the host's own
primitives from this process (this machine, or a snapshot directory).

`execute` journals each step of a `Work` (`apply.work.prepare`) before its write, writes, reads
back, and on any failure (or SIGINT/SIGTERM) restores every journaled step in reverse order.
`extend` appends the promotion of a one-time boot to a run. `rollback` does the same restore
later, from the journal alone (after a crash, or to undo an applied run).
"""

from __future__ import annotations

import contextlib
import shlex
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any, Protocol

from ..core.errors import ApplyFailed, ExitCode, HostError, NoSpace, Refused, TuneError
from ..core.files import Request
from ..facts import nvidia_smi
from ..hosts.base import Host
from ..kinds import boot_kind
from ..profile.load import LoadedProfile
from ..steps.ops import BootTool, DeleteFile, Op, Probe, PutFile, Read, SetAttr, Step, temporary
from ..steps.records import (
    Deferred,
    Failed,
    ProfileReplaced,
    Record,
    RestoreFailed,
    RollbackStarted,
    StepAbout,
    StepRestored,
    StepUnchanged,
    StepUnsupported,
    Verified,
    Written,
)
from .journal import PROFILE, STATE, Journal, Run, now_iso, rolled_back_run, trusted_run
from .messages import (
    explained,
    failed_message,
    not_restored_message,
    read_back_message,
    show_value,
    unsupported_message,
)
from .restored import Restored, RollbackResult
from .run_record import contexts, plan_record
from .work import Work, profile_text


class PhaseHook(Protocol):
    """Runs around a phase (probes): `before` ahead of the first write, `after` once every step
    is verified; an exception from `after` rolls the phase back like a failed step does."""

    def before(self, journal: Journal) -> None: ...

    def after(self, journal: Journal) -> None: ...


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


class StepFailed(HostError):
    """A write or a read-back of one step failed; the message says which and how."""


def perform(
    host: Host, step: Step, op: Op, journal: Journal | None = None, seq: int | None = None
) -> None:
    """One operation of step `seq`; with a journal, what it defers or creates is journaled."""
    if isinstance(op, BootTool) and host.defers(op.argv):
        if journal is not None:
            journal.record(Deferred(op.argv, step.id))
        return
    if isinstance(op, SetAttr):
        host.set_attr(op.path, op.value)
    elif isinstance(op, PutFile):
        if journal is not None and seq is not None:
            journal.creates(seq, host.missing_dirs(op.path))
        host.put_file(op.path, op.data, op.mode)
    elif isinstance(op, DeleteFile):
        host.delete_file(op.path)
    else:
        done = host.run(op.argv)
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip()
            raise StepFailed(f"`{shlex.join(op.argv)}` failed: {output}")


def read(host: Host, probe: Probe) -> str | None:
    if probe.read is Read.GPU:
        query = nvidia_smi.query_for(probe.arg)
        output = host.fetch(Request.of(commands=[query])).output(query)
        return probe.value(output.stdout if output.status == 0 else None)
    return probe.value(host.read_file(probe.path))


def execute(
    host: Host,
    work: Work,
    loaded: LoadedProfile,
    *,
    phase: str = "runtime",
    sync: bool = True,
    on_step: Callable[[int, Step], None] | None = None,
    around: PhaseHook | None = None,
    run_id: str | None = None,
    after: tuple[PutFile, ...] = (),
) -> str:
    """Apply `work.steps`; returns the run id. Raises `ApplyFailed` after rolling back.
    `after`: files written once every step holds, inside the run, before profile.yaml
    (pending.json): one that cannot be written rolls the run back like a failed step, and a
    failure after them removes those written (best effort, as `tidy` is)."""
    try:
        journal = Journal.start(
            host,
            profile=work.plan.profile,
            phase=phase,
            host_name=work.plan.host.name,
            boot_id=work.plan.host.boot_id,
            sync=sync,
            run_id=run_id,
        )
    except NoSpace as exc:
        raise NoSpace(f"{exc}; nothing was changed.") from None
    done: list[tuple[int, Step]] = []
    written: list[PutFile] = []  # the files of `after` written, removed if the run fails
    at = "the start"
    about = contexts(work.plan, work.steps)
    try:
        with _signals_raise():
            journal.record(plan_record(work.plan, work.steps, work.left_out))
            if around is not None:
                at = "the probes before the phase"
                around.before(journal)
            for seq, step in enumerate(work.steps):
                at = step.id
                make(host, journal, seq, step, done, about.get(step.id, StepAbout()))
                if on_step is not None:
                    on_step(seq, step)
            if around is not None:
                at = "the probes after the phase"
                around.after(journal)
            for op in after:
                at = op.path
                host.put_file(op.path, op.data, op.mode)
                written.append(op)
            # profile.yaml says the run succeeded (`tune check` reads it): written last.
            at = PROFILE
            store_profile(host, journal, loaded)
            journal.end("applied")
    except (Exception, KeyboardInterrupt) as exc:
        raise _rolled_back(
            exc, host, journal, work.steps, at, done, journal.made, "rolled-back", written
        ) from None
    return journal.run_id


def _rolled_back(
    exc: BaseException,
    host: Host,
    journal: Journal,
    steps: Sequence[Step],
    at: str,
    done: list[tuple[int, Step]],
    made: Mapping[int, Sequence[str]],
    outcome: str,
    written: Sequence[PutFile] = (),
) -> ApplyFailed:
    """The failure of a run (or a promotion) at `at`: journaled, every step of `done`
    restored, the files of `written` removed (a rolled-back run leaves no pending record
    behind), the run ended `outcome` (or rollback-failed); the error that says so."""
    reason = str(exc) if not isinstance(exc, KeyboardInterrupt) else "interrupted by SIGINT"
    with _signals_ignored():
        with contextlib.suppress(Exception):
            journal.record(Failed(reason, at))
        failures = restore(host, journal, done, made).failures
        for op in reversed(written):
            with contextlib.suppress(HostError):
                host.delete_file(op.path)
        with contextlib.suppress(Exception):
            journal.end("rollback-failed" if failures else outcome)
    shown = explained(steps, at, reason)
    return _apply_failed(exc, failed_message(shown, at, len(done), failures, journal.run_id))


def _apply_failed(cause: BaseException, message: str) -> ApplyFailed:
    failed = ApplyFailed(message)
    if isinstance(cause, NoSpace):  # rolled back all the same; the exit code says why
        failed.exit_code = ExitCode.NO_SPACE
    return failed


def make(
    host: Host,
    journal: Journal,
    seq: int,
    step: Step,
    done: list[tuple[int, Step]],
    about: StepAbout,
) -> None:
    """Journal one step, count it in `done` (what a failure restores), write it, read it back.
    A write the kernel refuses (`Refused`) fails the run unless the entry is optional; an
    optional one is journaled as unsupported and skipped."""
    journal.step(seq, step, about)
    done.append((seq, step))
    try:
        for op in step.do:
            perform(host, step, op, journal, seq)
    except Refused as exc:
        if not step.optional:
            raise StepFailed("".join(unsupported_message(step, str(exc).rstrip(".")))) from None
        journal.record(StepUnsupported(seq, str(exc)))
        return
    journal.record(Written(seq))
    got = read(host, step.probe)
    if got != step.expect:
        raise StepFailed("".join(read_back_message(step, show_value(got))))
    journal.record(Verified(seq))


def extend(host: Host, run_id: str, steps: tuple[Step, ...]) -> None:
    """Append `steps` to the applied run `run_id` (promoting a try-once boot configuration
    after verification), so that one `tune rollback` undoes the whole run. On failure the
    appended steps and the run's boot configuration are restored (`end` boot-rolled-back), as
    the sh engine's script does on its own: the host boots its prior configuration whatever
    becomes of tune."""
    run = trusted_run(host, run_id)
    first = max((seq for seq, _ in run.steps), default=-1) + 1
    journal = Journal(host, run_id)
    done = [(seq, step) for seq, step in run.steps if boot_kind(step.kind)]
    at = "the promotion"
    try:
        with _signals_raise():
            for seq, step in enumerate(steps, first):
                at = step.id
                make(host, journal, seq, step, done, StepAbout())
            journal.end("applied")
    except (Exception, KeyboardInterrupt) as exc:
        made = {**run.made, **journal.made}
        raise _rolled_back(exc, host, journal, steps, at, done, made, "boot-rolled-back") from None


def restore(
    host: Host,
    journal: Journal,
    steps: list[tuple[int, Step]],
    made: Mapping[int, Sequence[str]],
) -> Restored:
    """Undo `steps` in reverse order, continuing past any failure; `made`: the directories
    each step created (`Journal.creates`), removed after it while empty (`tidy`). The journal's
    markers are kept where they can be: a restore is counted by what the host reads back, never
    by whether a full disk took its marker (restoring a step again later finds it unchanged)."""
    result = Restored()
    failures = result.failures
    for seq, step in reversed(steps):
        try:
            if read(host, step.probe) == step.restored:
                _mark(journal, StepUnchanged(seq))
                result.unchanged += 1
                continue
            for op in step.undo:
                perform(host, step, op, journal, seq)
            got = read(host, step.probe)
            if got != step.restored:
                raise StepFailed("".join(not_restored_message(step, show_value(got))))
            _mark(journal, StepRestored(seq))
            result.restored += 1
        except Exception as exc:
            failures.append(str(exc))
            _mark(journal, RestoreFailed(seq, str(exc)))
        finally:
            tidy(host, step, made.get(seq, ()))
    return result


def _mark(journal: Journal, record: Record) -> None:
    with contextlib.suppress(TuneError):
        journal.record(record)


def tidy(host: Host, step: Step, made: Sequence[str]) -> None:
    """What a step's file writes leave besides their effect, after its restore (changed or
    not): the temporary file of a write that a crash or a signal cut short, and the directories
    it created, deepest first, each only while empty. Best effort, as `rmdir` is: what can stay
    is an empty directory or a stray temporary file, never a setting."""
    for op in (*step.do, *step.undo):
        if isinstance(op, PutFile):
            with contextlib.suppress(HostError):
                host.delete_file(temporary(op.path))
    for directory in made:
        with contextlib.suppress(HostError):
            host.remove_dir(directory)


def store_profile(host: Host, journal: Journal | None, loaded: LoadedProfile) -> bool:
    """Write /var/lib/tune/profile.yaml when it differs; the prior text goes to the journal."""
    text = profile_text(loaded)
    prior = host.read_file(PROFILE)
    if prior is not None and prior.decode("utf-8", "replace") == text:
        return False
    if journal is not None:
        journal.record(ProfileReplaced(None if prior is None else prior.decode("utf-8", "replace")))
    host.private_dir(STATE)
    host.put_file(PROFILE, text.encode())
    return True


def rollback(host: Host, run_id: str | None = None, *, boot_only: bool = False) -> RollbackResult:
    """Restore the values a run recorded (the newest run by default), from its journal;
    `boot_only` restores only its boot configuration (what `tune verify` undoes)."""
    return restore_run(host, rolled_back_run(host, run_id), boot_only=boot_only)


def restore_run(host: Host, run: Run, *, boot_only: bool = False) -> RollbackResult:
    """Restore one run from its journal (see `rollback`)."""
    chosen = run.run_id
    if run.outcome == "rolled-back" or not run.records:
        # No record: a run record torn by a crash (nothing was changed), or damage that says
        # nothing of what was (`journal.read_journal`); nothing to restore from either.
        already = run.damage is None or bool(run.records)
        return RollbackResult(chosen, Restored(), already=already, damage=run.damage)
    journal = Journal.resume(host, run)
    _mark(journal, RollbackStarted(now_iso()))
    with _signals_ignored():
        steps = [(seq, s) for seq, s in run.steps if not boot_only or boot_kind(s.kind)]
        result = restore(host, journal, steps, run.made)
        failures = result.failures
        replaced, prior = run.profile_prior
        if replaced and not boot_only:
            try:
                if prior is None:
                    host.delete_file(PROFILE)
                else:
                    host.put_file(PROFILE, prior.encode())
            except TuneError as exc:
                failures.append(str(exc))
        if not boot_only and not failures:
            _clear_pending(host, chosen, failures)
        done = "boot-rolled-back" if boot_only else "rolled-back"
        with contextlib.suppress(TuneError):  # a marker, as those of `restore`
            journal.end("rollback-failed" if failures else done)
    return RollbackResult(chosen, result, damage=run.damage)


def _clear_pending(host: Host, run_id: str, failures: list[str]) -> None:
    """A run rolled back leaves nothing for the next boot to bring: `tune verify` must not
    check (or roll back again) what it had configured."""
    from .pending import PENDING, read_pending

    try:
        pending = read_pending(host)
        if pending is not None and pending.run_id == run_id:
            host.delete_file(PENDING)
    except TuneError as exc:
        failures.append(str(exc))


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM raises like Ctrl-C does, so either one rolls the run back."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signum)

    with _handlers(handler):
        yield


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """A rollback runs to its end: a second Ctrl-C must not leave the host half-restored."""
    with _handlers(signal.SIG_IGN):
        yield


@contextlib.contextmanager
def _handlers(handler: Any) -> Iterator[None]:
    previous = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, handler)
    except ValueError:
        pass  # not the main thread: signals cannot be handled here
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
