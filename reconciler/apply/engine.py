"""The engine of `tune apply` and `tune rollback`.

`prepare` is everything that can fail without writing: observe, refuse a stale plan, turn each
change into a `Step` (data, from its kind) and check every step's requirements. `execute` then
journals each step before its write, writes, reads back, and on any failure (or SIGINT/SIGTERM)
restores every journaled step in reverse order. `rollback` does the same restore later, from the
journal alone (after a crash, or to undo an applied run).
"""

from __future__ import annotations

import contextlib
import re
import shlex
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol, TypeVar

from ..core.bounded import size_text
from ..core.changes import Phase, Plan
from ..core.errors import (
    ApplyFailed,
    BootConfigUnknown,
    ExitCode,
    HostError,
    NoSpace,
    Refused,
    TuneError,
)
from ..core.files import MAX_EDITED_BYTES, MAX_FILE_BYTES, Files, Request
from ..facts import nvidia_smi
from ..hosts.base import Host
from ..kinds import boot_kind, named
from ..kinds.files import KIND as BOOT_FILES
from ..plan.make import make_plan
from ..plan.observe import Observation
from ..plan.observe import observation as observation_of
from ..plan.observe import request as observed_request
from ..plan.saved import SavedPlan
from ..profile.load import LoadedProfile
from ..steps.ops import (
    BootTool,
    DeleteFile,
    Need,
    Op,
    Probe,
    PutFile,
    Read,
    Require,
    SetAttr,
    Skipped,
    Step,
    temporary,
)
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
from .journal import (
    PROFILE,
    RUNS,
    STATE,
    DamagedJournal,
    Journal,
    Run,
    now_iso,
    rollback_chain,
    rolled_back_run,
    trusted_run,
)
from .run_record import contexts, plan_record

PACKAGES = {"setpci": "pciutils", "grubby": "grubby"}
PROFILE_REQUEST = Request.of(whole=[PROFILE])
NO_JOURNAL = f"{RUNS} is not writable, so tune cannot keep its journal there."


@dataclass(frozen=True)
class Work:
    """What an apply will do, decided before anything is written."""

    plan: Plan
    steps: tuple[Step, ...]  # what the run writes, in order
    observation: Observation
    # The plan's steps: `steps` unless a rebooting apply boots the new command line once first
    # (`boot.tryonce`), which puts a try entry in place of the command-line steps.
    planned: tuple[Step, ...]
    promote: tuple[Step, ...] = ()  # appended to the run once the boot is verified
    try_once: str | None = None  # the one-time boot mechanism, None without one
    reboot_why: str = ""  # how the reboot reaches the new configuration ("": no reboot)
    # --skip-missing: the changes left out because the host lacks what they need.
    skipped: tuple[Skipped, ...] = ()
    # Their ids, and those of tune's boot-time files written without their lines: tune never
    # set these as the profile says, so `tune check` calls them not applied, not drift.
    left_out: frozenset[str] = frozenset()

    @property
    def stored_profile(self) -> bytes | None:
        """/var/lib/tune/profile.yaml as observed (read in the observation's batch)."""
        return self.observation.files.read(PROFILE)


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


def prepare(
    host: Host,
    loaded: LoadedProfile,
    *,
    runtime_only: bool,
    with_persistence: bool = True,
    saved: SavedPlan | None = None,
    preflight_here: bool = True,
    reboot_phase: bool = False,
    reboot: bool = False,
    requirements: Callable[[tuple[Step, ...]], list[str]] | None = None,
    unloadable: ModuleCheck | None = None,
) -> Work:
    """`runtime_only` leaves boot configuration alone; `reboot_phase` writes only it (runtime
    knobs are verified by `tune verify`, never written); neither: runtime, then reboot.
    `reboot`: the apply reboots after the run, so the steps boot the new command line once
    first where the boot loader allows (`boot.tryonce.arrange`); this is the one place that
    decides the steps. `requirements` checks the steps' requirements (this host's `preflight`
    by default; an engine's); `preflight_here=False` leaves them to the caller (a remote apply
    checks them on the target, in the script that starts the run). `unloadable` (--skip-missing)
    asks the host which modules it cannot load: a step that loads one the host does not have
    at all is left out, with a line in `Work.skipped`, and so are its lines in tune's boot-time
    files (`persisting_what_runs`)."""
    from .tryonce import Boot, arrange

    # profile.yaml in the same batch: an apply with nothing to change stores it when it differs.
    request = observed_request(loaded.profile, with_persistence) | PROFILE_REQUEST
    fetched = host.fetch(request)
    observation = observation_of(host, fetched)
    plan = make_plan(loaded, observation, with_persistence)
    if saved is not None:
        saved.check(plan, loaded, with_persistence)
    specs = {k.kind: (k, spec) for k, spec in loaded.profile.work(with_persistence)}
    problems: list[str] = []
    refusal: type[HostError] = HostError
    steps: list[Step] = []
    # Runtime knobs and tune's boot-time files first; the boot configuration last.
    for change in sorted(plan.changes, key=lambda c: c.phase is not Phase.RUNTIME):
        if runtime_only and change.phase is not Phase.RUNTIME:
            continue
        if reboot_phase and change.phase is not Phase.REBOOT:
            continue
        try:
            kind, spec = specs[change.kind]
            steps.append(kind.step(spec, change, observation.files))
        except HostError as exc:
            problems.append(str(exc))
            if isinstance(exc, BootConfigUnknown):
                refusal = BootConfigUnknown  # its own exit code, whatever else is wrong
    planned, skipped = tuple(steps), tuple[Skipped, ...]()
    if unloadable is not None:
        planned, skipped = without_missing_modules(planned, unloadable)
    left_out = frozenset(s.id for s in skipped)
    if skipped and BOOT_FILES.kind in specs and not reboot_phase:
        boot_files = specs[BOOT_FILES.kind][1]
        planned, trimmed = persisting_what_runs(
            planned, left_out, boot_files, observation.files, plan
        )
        left_out |= trimmed
    boot = arrange(planned, fetched) if reboot else Boot(None, "", planned)
    problems += not_read_whole(host, request, fetched, boot.now + boot.promote)
    if boot.now and preflight_here:
        # The promotion's too: what it needs after the boot is known to be there before.
        problems += (requirements or (lambda checked: preflight(host, checked)))(
            boot.now + boot.promote
        )
    if problems:
        raise refusal(*dict.fromkeys(problems))
    return Work(
        plan,
        boot.now,
        observation,
        planned,
        boot.promote,
        boot.try_once,
        boot.why,
        skipped,
        left_out,
    )


def not_read_whole(host: Host, request: Request, files: Files, steps: Sequence[Step]) -> list[str]:
    """A sentence for each file `steps` rewrite (replace, delete, or put back on undo) that
    observation did not read whole: tune journals a file's prior and writes an edit of it,
    so a prefix would lose the rest on apply and again on rollback (a Proxmox config's
    snapshot sections past 64 KiB). A file past MAX_EDITED_BYTES is named with its size,
    never shown; one a kind did not ask whole is tune's own error."""
    found = []
    written = (
        op.path for s in steps for op in (*s.do, *s.undo) if isinstance(op, PutFile | DeleteFile)
    )
    for path in dict.fromkeys(written):
        data = files.read(path)
        if data is None or len(data) < MAX_FILE_BYTES:
            continue  # absent, or shorter than any cap: whole
        if not request.read_whole(path):
            found.append(
                f"{path} was read only in part (its first {size_text(MAX_FILE_BYTES)}), and "
                "tune rewrites only a file it read whole; this is a bug of tune's."
            )
        elif len(data) > MAX_EDITED_BYTES:
            size = host.file_size(path)
            said = "larger than" if size is None else f"{size:,} bytes, more than"
            found.append(
                f"{path} is {said} the {size_text(MAX_EDITED_BYTES)} tune reads of a file it "
                "rewrites, so tune leaves it as it is and writes nothing."
            )
    return found


# Which modules a host cannot load: module name -> the first line modprobe printed.
ModuleCheck = Callable[[tuple[str, ...]], Mapping[str, str]]

# kmod's words for a module that no modules.dep of the running kernel lists: not there at all
# (nvidia_peermem on a VM without NVIDIA's driver), unlike one whose load fails.
NOT_FOUND = re.compile(r"\bModule \S+ not found\b")


def without_missing_modules(
    steps: tuple[Step, ...], unloadable: ModuleCheck
) -> tuple[tuple[Step, ...], tuple[Skipped, ...]]:
    """`steps` less those that load a module the running kernel does not have, and those."""
    wanted = [n.arg for step in steps for n in step.requires if n.need is Need.MODULE]
    if not wanted:
        return steps, ()
    said = unloadable(tuple(dict.fromkeys(wanted)))
    gone = {name: line for name, line in said.items() if NOT_FOUND.search(line)}
    kept: list[Step] = []
    skipped: list[Skipped] = []
    for step in steps:
        why = [gone[n.arg] for n in step.requires if n.need is Need.MODULE and n.arg in gone]
        if why:
            skipped.append(Skipped(step.id, why[0]))
        else:
            kept.append(step)
    return tuple(kept), tuple(skipped)


def persisting_what_runs(
    steps: tuple[Step, ...], left_out: frozenset[str], profile: Any, files: Files, plan: Plan
) -> tuple[tuple[Step, ...], frozenset[str]]:
    """`steps` with tune's boot-time files made again without the lines of the changes
    `left_out`: a module the kernel lacks in modules-load.d fails systemd-modules-load at every
    boot, also when an earlier run (or the module's removal since) left it there. A file that
    then stays as it is is not written, so a second run changes nothing. Also the ids of the
    files that hold less than the profile wants (`plan` compared them whole)."""
    whole = {c.id: c.desired for c in plan.compared if c.kind == BOOT_FILES.kind}
    outcome = BOOT_FILES.compare(profile, files, left_out)
    trimmed = frozenset(c.id for c in outcome.changes if whole.get(c.id) != c.desired)
    persisting = [
        BOOT_FILES.step(profile, change, files, left_out)
        for change in outcome.changes
        if not change.in_sync
    ]
    knobs = [s for s in steps if s.kind != BOOT_FILES.kind]
    # Where `prepare` puts them: after the runtime knobs, before the boot configuration.
    live = [s for s in knobs if not boot_kind(s.kind)]
    return (*live, *persisting, *(s for s in knobs if boot_kind(s.kind))), trimmed


def unloadable_here(host: Host, modules: tuple[str, ...]) -> dict[str, str]:
    """`ModuleCheck` on a host tune runs commands on directly (this machine, a snapshot)."""
    said = {name: _modprobe_said(host, name) for name in modules}
    return {name: line for name, line in said.items() if line is not None}


def _modprobe_said(host: Host, module: str) -> str | None:
    """None when `modprobe --dry-run` can load `module`, else the first line it printed."""
    done = host.run(["modprobe", "--dry-run", module])
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0].strip() if lines else "modprobe failed"


def preflight(host: Host, steps: tuple[Step, ...] | list[Step]) -> list[str]:
    """Every requirement of every step, checked once, before the first write."""
    problems = []
    if not host.writable(RUNS):
        problems.append(NO_JOURNAL)
    checked: set[Require] = set()
    for step in steps:
        for need in step.requires:
            if need in checked:
                continue
            checked.add(need)
            problem = _unmet(host, need, step)
            if problem:
                problems.append(problem)
    return problems


def _unmet(host: Host, need: Require, step: Step) -> str | None:
    if need.need is Need.WRITABLE:
        met = host.writable(need.arg)
    elif need.need is Need.COMMAND:
        met = host.has_command(need.arg)
    else:
        said = _modprobe_said(host, need.arg)
        return None if said is None else "".join(unmet_message(need, step, said))
    return None if met else "".join(unmet_message(need, step, ""))


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


def explained(steps: Sequence[Step], at: str, reason: str) -> str:
    """The failure `reason` of the step `at` as the user reads it: a command's failure
    (`` `ARGV` failed: OUTPUT ``, as both engines journal it) in the words of its kind where
    the kind knows the cause (`Kind.explain`), else as journaled."""
    step = next((s for s in steps if s.id == at), None)
    kind = named(step.kind) if step is not None else None
    command, sep, output = reason.partition("` failed: ")
    if step is None or kind is None or not sep or not command.startswith("`"):
        return reason
    return kind.explain(step, output) or reason


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


# What a message leaves to its engine: the text itself here, an expansion in the remote script.
Said = TypeVar("Said")


def unmet_message(need: Require, step: Step, said: Said) -> tuple[str | Said, ...]:
    """The line for a requirement of `step` the host does not meet, whatever checked it;
    `said`: the first line a failed `modprobe --dry-run` printed (a module's only)."""
    if need.need is Need.WRITABLE:
        return (f"{step.id} cannot be changed: {need.arg} is read-only on this host.",)
    if need.need is Need.COMMAND:
        package = PACKAGES.get(need.arg, need.arg)
        text = f"{need.arg} is not installed on this host (package {package}); {step.id} needs it."
        return (text,)
    return (f"Module {need.arg} cannot be loaded on this host (", said, ").")


def unsupported_message(step: Step, refused: Said) -> tuple[str, Said, str]:
    """The one line that says a knob cannot be set on this host, whatever applied it, around
    the kernel's reason (its final dot dropped)."""
    return (
        f"{step.id} is not supported on this host: ",
        refused,
        "; mark the entry `optional: true` to apply the rest without it.",
    )


def read_back_message(step: Step, shown: Said) -> tuple[str, Said, str]:
    """The line for a write the kernel took but does not read back, around what it reads
    (`show_value`), whatever applied it; in the kind's words where it has some."""
    kind = named(step.kind)
    words = kind.read_back_words(step) if kind is not None else None
    if words is not None:
        return words[0], shown, words[1]
    return (
        f"{step.id}: wrote {show_value(step.expect)} but {step.probe.path} reads back ",
        shown,
        " (refused or clamped by the kernel)",
    )


def not_restored_message(step: Step, shown: Said) -> tuple[str, Said]:
    """The line for an undo the kernel took but does not read back, whatever restored it."""
    return (f"{step.id}: restored {show_value(step.restored)} but it reads back ", shown)


# A value longer than this is shown by its start and its length: a file tune rewrites is read
# whole (a container config of megabytes), a message is one line an operator reads, and lib.sh
# quotes a value one character at a time.
SHOWN_CHARACTERS = 200


def show_value(value: str | None) -> str:
    """A value as messages show it: quoted (its first SHOWN_CHARACTERS and its length when
    longer), or "nothing (absent)". lib.sh's REPR says the same."""
    if value is None:
        return "nothing (absent)"
    if len(value) <= SHOWN_CHARACTERS:
        return repr(value)
    return f"{value[:SHOWN_CHARACTERS]!r}... ({len(value)} characters)"


def failed_message(reason: str, at: str, count: int, failures: list[str], run_id: str) -> str:
    """The message of a run that failed `at` a step (or a phase) for `reason` and restored
    `count` changes, `failures` of them not, whatever applied it."""
    head = reason if reason.startswith(at) else f"{at}: {reason}"
    if failures:
        return (
            f"apply failed ({head}); rolling back {count} changes left "
            f"{len(failures)} not restored: {'; '.join(failures)} (run {run_id})."
        )
    return f"apply failed ({head}); rolled back {count} changes (run {run_id})."


@dataclass
class Restored:
    restored: int = 0
    unchanged: int = 0
    failures: list[str] = field(default_factory=list)


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


def profile_text(loaded: LoadedProfile) -> str:
    return (
        "# The resolved profile (extends applied) of the last successful tune apply on this host.\n"
        + loaded.resolved_yaml
    )


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


@dataclass(frozen=True)
class RollbackResult:
    run_id: str
    result: Restored
    already: bool = False
    # The run's journal is damaged: only the steps recorded before the damage were restored.
    damage: DamagedJournal | None = None


def rollback(host: Host, run_id: str | None = None, *, boot_only: bool = False) -> RollbackResult:
    """Restore the values a run recorded (the newest run by default), from its journal;
    `boot_only` restores only its boot configuration (what `tune verify` undoes)."""
    return restore_run(host, rolled_back_run(host, run_id), boot_only=boot_only)


def roll_back_chain(
    host: Host,
    run_id: str | None,
    restore_one: Callable[[Run], RollbackResult],
    approve: Callable[[list[Run]], None] | None = None,
) -> list[RollbackResult]:
    """`tune rollback`: each run of `journal.rollback_chain`, newest first, with `restore_one`
    (an engine's `rollback`); stops at the first run that leaves a change behind. `approve`
    sees the runs before the first is restored, and raises to restore none."""
    results: list[RollbackResult] = []
    chain = rollback_chain(host, run_id)
    if approve is not None:
        approve(chain)
    for run in chain:
        results.append(restore_one(run))
        if results[-1].result.failures:
            break
    return results


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
