"""`tune apply` and `tune rollback` on a host without Python: the scripts of `sh_script` sent,
started detached from the SSH connection, and followed to their end.

A dropped connection cannot stop a run (setsid, nohup, stdin from /dev/null). The lock is taken
on the target, after the controller's read. One round trip uploads the script, checks the
requirements (before any write) and starts it; the controller then polls the journal's `end`
record, one round trip per poll: the number of round trips depends on time, never on the number
of knobs. The library goes once per connection (`run_with_library`).

`tests/engines` runs every primitive and the apply, rollback, reboot-phase and fault scenarios
against both engines.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.errors import ApplyFailed, ConnectError, HostChanged, HostError, LockHeld, RunKilled
from ..core.quoting import printf_format, quoted
from ..hosts import lock
from ..hosts.base import Completed
from ..hosts.shell import ScriptResult, ShellHost
from ..probes.phase import PhaseProbes, Records, Regressed
from ..profile.load import LoadedProfile
from ..steps.ops import Op, PutFile, Step
from ..steps.records import (
    End,
    Failed,
    RestoreFailed,
    RunStarted,
    StepRestored,
    StepUnchanged,
    Verified,
    render,
)
from .journal import (
    LOCK,
    PROFILE,
    RUNS,
    STATE,
    Run,
    appended,
    new_run_id,
    now_iso,
    parse_run,
    read_run,
    run_path,
    trusted_run,
)
from .messages import (
    explained,
    failed_message,
)
from .pending import PENDING, PendingBoot
from .restored import Restored, RollbackResult
from .run_record import contexts, plan_record
from .sh_script import (
    AS_READ,
    LOCKED,
    NOT_STORED,
    UNMET,
    ApplyScript,
    AsRead,
    holder_line,
    library_digest,
    library_prelude,
    op_call,
    rollback_script,
    send_probes,
)
from .work import Work

# Exit status of a poll that found the run ended but its script still holding the lock.
HELD = 91
# Exit status of a poll that found the run's script gone (its pid) and its journal with no `end`.
KILLED = 93
# What a session that ended without an exit status reads as (paramiko's; a broken connection).
NO_STATUS = -1


def _lock_held(done: ScriptResult) -> None:
    """`LockHeld`, naming the holder, for a script that exited `LOCKED`."""
    if done.status == LOCKED:
        holder = lock.Holder.parse(done.stderr)
        raise LockHeld(lock.held_message(LOCK, holder))


def run_with_library(host: ShellHost, body: str, timeout: float | None = None) -> ScriptResult:
    """`body` run after the library: sent with it on the connection's first script, and on
    one that found it not stored; only its check on every other."""
    digest = library_digest()
    if host.library == digest:
        done = host.run_script(library_prelude(inline=False) + body, timeout)
        if done.status != NOT_STORED:
            return done
    done = host.run_script(library_prelude(inline=True) + body, timeout)
    host.library = digest
    return done


def start(host: ShellHost, script: ApplyScript) -> None:
    """One round trip: upload, check requirements, start detached."""
    done = run_with_library(host, script.starter())
    _started(host, done)
    if b"started" not in done.stdout:
        raise HostError(f"{host.name}: the apply could not be started: {done.said}.")


def _started(host: ShellHost, done: ScriptResult, *, polled: bool = False) -> None:
    """Raise for a starter that stopped before it started the run: the lock held, a
    requirement unmet, the script not stored. `polled`: the first poll ran after it, in the
    same round trip, and ended with one of its own statuses."""
    if done.status == NO_STATUS:
        # The session ended without an exit status: the connection broke (or the starter was
        # killed), maybe after the run started, which then goes on without it.
        raise ConnectError(f"{host.name}: the connection broke before the apply answered.")
    _lock_held(done)
    if done.status == UNMET:
        problems = done.stderr.decode("utf-8", "replace").strip()
        raise HostError(problems or f"{host.name}: the apply script could not be stored.")
    if done.status != 0 and not (polled and done.status in (HELD, KILLED)):
        raise HostError(f"{host.name}: the apply could not be started: {done.said}.")


def wait_for_lock(host: ShellHost) -> None:
    """One round trip: wait for the target's lock as a run's script does (`lock_free`)."""
    done = run_with_library(host, "lock_free\n")
    _lock_held(done)
    if done.status != 0:
        raise HostError(f"{host.name}: reading the lock failed: {done.said}.")


def wait(
    host: ShellHost,
    run_id: str,
    timeout: float,
    interval: float = 0.2,
    *,
    first: str = "",
    pause_at: int | None = None,
    starting: ApplyScript | None = None,
    steps: int | None = None,
) -> Run:
    """Long-poll the journal until its last record is `end` and the script has let go of the
    lock (or, with `pause_at`, the `verified` record of that step, where the script waits for
    the probes after the phase):
    each round trip waits on the target for up to half the command timeout (at most 30 s), so a
    run costs round trips by its duration, never by its number of steps. `first`: script text
    run before the first poll, in the same round trip (`send_probes`); `starting`: the run's
    script, uploaded and started in the first poll's round trip (a run without probes: one
    round trip for a run that ends within it); `steps`: how many the run has, for the message
    of a run whose script was killed (`RunKilled`, said once a poll finds it gone)."""
    journal = quoted(f".{run_path(run_id)}")
    pid = quoted(f".{pid_path(run_id)}")
    deadline = time.monotonic() + timeout
    ticks = max(1, int(min(timeout / 2, 30.0) / interval))
    script = _poll(journal, pid, interval, ticks, pause_at)
    if starting is not None:
        first = starting.starter(announce=False) + first
    # The start may wait lock.WAIT seconds for the lock: the first poll that follows it in the
    # same round trip is shorter by as much, so both fit in one command timeout.
    first_ticks = ticks - int(lock.WAIT / interval)
    waits = _poll(journal, pid, interval, first_ticks, child=True) if starting else script
    while True:
        done = run_with_library(host, first + waits) if starting else host.run_script(first + waits)
        waits = script
        if starting is not None:
            _started(host, done, polled=True)
            starting = None
        first = ""
        run = parse_run(run_id, done.stdout) if done.stdout else None
        if done.status == KILLED and (run is None or run.outcome == "interrupted"):
            raise _killed(host, run_id, run, steps)
        late = time.monotonic() > deadline
        if run is not None and _paused(run, pause_at):
            return run
        # Past the deadline an ended run is returned with its lock still held: another run
        # may have taken it since, and the next script waits for the lock on its own.
        if run is not None and run.outcome != "interrupted" and (done.status != HELD or late):
            return run
        if late:
            raise HostError(
                f"{host.name}: run {run_id} has not finished within {timeout:g} s; it goes on "
                f"on the host: `tune history -H {host.name}` shows its outcome."
            )


def pid_path(run_id: str) -> str:
    """Where the starter leaves the pid of a run's script, beside its journal."""
    return f"{RUNS}/{run_id}.pid"


def _killed(host: ShellHost, run_id: str, run: Run | None, steps: int | None) -> RunKilled:
    """What a poll that found the script gone says: how far its journal goes, and the command
    that restores what it shows."""
    journaled = [step.id for _, step in run.steps] if run is not None else []
    of = "" if steps is None else f" of its {steps}"
    last = f" (the last, {journaled[-1]}, may be half done)" if journaled else ""
    restore = (
        f"`tune rollback -H {host.name}` restores what its journal shows"
        if journaled
        else "nothing was written"
    )
    return RunKilled(
        run_id,
        f"run {run_id}: its script on {host.name} was killed (kill -9, the OOM killer?) after "
        f"{len(journaled)}{of} steps{last}, and nothing rolled it back: {restore}.",
    )


def _poll(
    journal: str,
    pid: str,
    interval: float,
    ticks: int,
    pause_at: int | None = None,
    *,
    child: bool = False,
) -> str:
    """One poll of `wait`: up to `ticks` looks at the journal's last record, `interval` apart.
    `child`: the run was started by this round trip's shell (`$P`, no probes to pause for)."""
    paused = "" if pause_at is None else f"    {quoted(render(Verified(pause_at)))}) break ;;\n"
    end = '\'{"type":"end"\'*'
    ticks = max(1, ticks)
    # A run that is this shell's child is waited for by GNU tail, one process however long it
    # takes (under load, the looks below cost two processes a tick); with no `tail --pid` or
    # no `timeout` it fails at once and the looks wait as before. Timed out: one last look.
    waited = (
        f'[ -z "${{P:-}}" ] || {{ timeout {ticks * interval:g} tail --pid="$P" '
        f"-s {interval:g} -f /dev/null 2>/dev/null; [ $? -ne 124 ] || i={ticks - 1}; }}\n"
        if child
        else ""
    )
    # The `end` record is the script's last, yet it holds the lock until its process exits:
    # a run ends for tune once the lock is free too, or the next script (a rollback, a
    # promotion) started right away finds it held. Without flock there is no lock to wait on.
    return (
        f'cd -- "${{TUNE_ROOT:-/}}" || exit 1\ni=0\n'
        f"released() {{ ! command -v flock >/dev/null 2>&1 || [ ! -f {quoted('.' + LOCK)} ] || "
        f"(exec 8<{quoted('.' + LOCK)} && flock -n 8); }}\n"
        # A script killed (kill -9, the OOM killer) never writes its `end`: its pid gone
        # says so at once, where the looks would wait for the whole timeout.
        f"gone() {{ IFS= read -r p <{pid} 2>/dev/null || return 1\n"
        "    case $p in '' | *[!0-9]*) return 1 ;; esac\n"
        '    ! kill -0 "$p" 2>/dev/null; }\n'
        f"{waited}"
        f"while [ $i -lt {ticks} ]; do\n"
        f'    case "$(tail -n 1 {journal} 2>/dev/null)" in\n'
        f"    {end}) released && break ;;\n{paused}"
        "    *) ! gone || break ;;\n"
        "    esac\n"
        f"    sleep {interval:g}; i=$((i + 1))\n"
        # Gone before the journal is read: what it shows is all the script wrote (an ended
        # run's script is gone too: the controller looks for its `end` there).
        f"done\ng=; ! gone || g=1\n"
        f'[ -e {journal} ] || {{ [ -z "$g" ] || exit {KILLED}; exit 0; }}\n'
        # A child of a killed script (a modprobe) may hold the lock a while yet: waited for.
        f'cat -- {journal}\nreleased || exit {HELD}\n[ -z "$g" ] || exit {KILLED}\n'
    )


def _paused(run: Run, pause_at: int | None) -> bool:
    last = run.records[-1] if run.records else None
    return pause_at is not None and last == Verified(pause_at)


def outcome_error(run: Run, where: str | None = None) -> ApplyFailed:
    """The local engine's message for a run the script rolled back, from its journal: what
    the last failure restored (every step of a run, or a promotion's and the boot
    configuration of the run it extends) has its marker after the `failed` record.
    `where`: the host as messages name it (else as its run record does)."""
    failures = [i for i, r in enumerate(run.records) if isinstance(r, Failed)]
    after = run.records[failures[-1] :] if failures else run.records
    failed = after[0] if failures else None
    if not isinstance(failed, Failed):
        failed = Failed("interrupted", "the start")
    if failed.at == AS_READ:
        host = where or (run.header.host if run.header is not None else "the host")
        return HostChanged(
            f"{host} changed since it was read ({failed.error}): another run (a pull?) wrote "
            f"it meanwhile; nothing was written (run {run.run_id}); run again."
        )
    problems = [r.error for r in after if isinstance(r, RestoreFailed)]
    markers = (StepRestored, StepUnchanged, RestoreFailed)
    done = len({r.seq for r in after if isinstance(r, markers)}) or len(run.steps)
    reason = explained([s for _, s in run.steps], failed.at, failed.error)
    return ApplyFailed(failed_message(reason, failed.at, done, problems, run.run_id))


@dataclass(frozen=True)
class RemoteApplied:
    run_id: str
    writes: int
    unsupported: tuple[str, ...] = ()  # a line for each optional knob the kernel refused


def apply_remote(
    host: ShellHost,
    work: Work,
    loaded: LoadedProfile,
    *,
    phase: str,
    timeout: float,
    interval: float = 0.2,
    around: PhaseProbes | None = None,
    run_id: str | None = None,
    after: tuple[PutFile, ...] = (),
    patience: float | None = None,
) -> RemoteApplied:
    """Run `work` on the target; raises `ApplyFailed` (exit 3) when the target rolled back.
    `after`: files written once every step holds, inside the run (pending.json); `patience`:
    how long to wait for the run's end (`timeout` unless given: this machine's own run is
    waited for as long as it takes).

    With probes (`around`, running on the target through its executor) the script waits, lock
    held, for their records before the first write and for the verdict after the last
    read-back; a failed gate (or no verdict in time) makes it roll back on its own."""
    from .work import profile_text

    text = profile_text(loaded)
    # As observed, in the observation's batch: no round trip of its own.
    prior_bytes = work.stored_profile
    prior = None if prior_bytes is None else prior_bytes.decode("utf-8", "replace")
    header = RunStarted(
        run_id=run_id or new_run_id(),
        started=now_iso(),
        profile=work.plan.profile,
        phase=phase,
        host=work.plan.host.name,
        boot_id=work.plan.host.boot_id,
    )
    script = ApplyScript.of(
        work.steps,
        header,
        None if prior == text else (prior, text),
        plan_record(work.plan, work.steps, work.left_out),
        contexts(work.plan, work.steps),
        None if around is None else _probes_wait(around, timeout),
        after=after,
        later=work.promote,
        as_read=AsRead(prior_bytes),
        pushed=host.pushed,
    )
    patience = timeout if patience is None else patience
    started = False
    try:
        if around is None:  # started in the first poll's round trip
            run = wait(
                host, script.run_id, patience, interval, starting=script, steps=len(work.steps)
            )
        else:
            start(host, script)
            started = True
            run = _wait_probed(host, script.run_id, len(work.steps), around, patience, interval)
    except ConnectError as exc:
        # The connection may have broken before the host said the run started.
        which = "it" if started else "if it started, it"
        raise ConnectError(
            f"{exc} Run {script.run_id}: {which} goes on without the connection: the host "
            f"completes or rolls it back on its own; `tune history -H {host.name}` shows which."
        ) from exc
    if run.outcome != "applied":
        raise outcome_error(run, host.describe())
    return RemoteApplied(script.run_id, len(work.steps), tuple(run.unsupported))


def _probes_wait(around: PhaseProbes, timeout: float) -> int:
    """How long the script waits for one measurement: every run of every probe at its
    timeout, and a command timeout each way for the round trips around them."""
    budget = sum(spec.timeout * spec.repeat for spec in around.probes.values())
    return math.ceil(budget + 2 * timeout)


def _wait_probed(
    host: ShellHost, run_id: str, steps: int, around: PhaseProbes, timeout: float, interval: float
) -> Run:
    """Measure, hand the records over, wait for the last read-back; measure and judge, hand
    the verdict over, wait for the end."""
    before = Records()
    around.before(before)
    first = send_probes(run_id, "before", "ok", before.lines)
    run = wait(host, run_id, timeout, interval, first=first, pause_at=steps - 1, steps=steps)
    if run.outcome != "interrupted":
        return run  # ended before the changes were all made: failed and rolled back
    after = Records()
    try:
        around.after(after)
        verdict = "ok"
    except Regressed as exc:
        verdict = str(exc)
    first = send_probes(run_id, "after", verdict, after.lines)
    return wait(host, run_id, timeout, interval, first=first, steps=steps)


def restore_remote(host: ShellHost, run: Run, *, boot_only: bool = False) -> RollbackResult:
    """`apply.restore_run` on the target: one round trip to restore, one to read the result."""
    chosen = run.run_id
    if run.outcome == "rolled-back" or not run.records:
        # No record: a run record torn by a crash (nothing was changed), or damage that says
        # nothing of what was (`journal.read_journal`); nothing to restore from either.
        already = run.damage is None or bool(run.records)
        return RollbackResult(chosen, Restored(), already=already, damage=run.damage)
    done = run_with_library(host, rollback_script(run, boot_only=boot_only, pushed=host.pushed))
    _lock_held(done)
    if done.status != 0:
        raise HostError(f"{host.name}: the rollback could not run: {done.said}.")
    result = Restored()
    added = appended(host, run)
    for record in added:
        if isinstance(record, StepRestored):
            result.restored += 1
        elif isinstance(record, StepUnchanged):
            result.unchanged += 1
        elif isinstance(record, RestoreFailed):
            result.failures.append(record.error)
    ends = [r.outcome for r in added if isinstance(r, End)]
    if ends[-1:] == ["rollback-failed"] and not result.failures:
        result.failures.append(done.stderr.decode("utf-8", "replace").strip() or "profile.yaml")
    return RollbackResult(chosen, result, damage=run.damage)


def extend_remote(host: ShellHost, run_id: str, steps: tuple[Step, ...]) -> None:
    """`apply.extend` on the target, in one round trip to read the run and one to run the
    steps (a short script, run attached: a dropped connection's SIGHUP rolls it back)."""
    run = trusted_run(host, run_id)
    script = ApplyScript.of(steps, None, None, extends=run, pushed=host.pushed)
    done = run_with_library(host, "set -- apply\n" + script.body)
    if done.status == 0:
        return
    after_run = read_run(host, run_id)
    if after_run is None or after_run.outcome == "applied":
        raise HostError(f"{host.name}: the promotion of run {run_id} could not run: {done.said}.")
    raise outcome_error(after_run)


def run_ops(host: ShellHost, ops: tuple[Op, ...], doing: str) -> None:
    """Primitive operations outside any run (clear pending.json, start a reboot), in one
    round trip; the first that fails stops the rest."""
    body = "".join(f'ERR=; {op_call(op)} || {{ echo "$ERR" >&2; exit 1; }}\n' for op in ops)
    done = run_with_library(host, body)
    if done.status != 0:
        raise HostError(f"{host.name}: {doing} failed: {done.said}.")


def store_profile_remote(host: ShellHost, text: str, also: tuple[PutFile, ...] = ()) -> None:
    """`apply.store_profile` of an apply with nothing to change, and the files of `also`
    (status.json), in one round trip, the lock held as a run holds it."""
    done = run_with_library(
        host,
        f"{holder_line(host.pushed)}lock_or_exit\n"
        f"ERR=; private_dir {quoted(STATE)} && "
        f"put_file {quoted(PROFILE)} 644 {printf_format(text.encode())} "
        '|| { echo "${ERR:-cannot write it}" >&2; exit 1; }\n'
        + "".join(f'ERR=; {op_call(op)} || {{ echo "$ERR" >&2; exit 1; }}\n' for op in also),
    )
    _lock_held(done)
    if done.status != 0:
        raise HostError(f"{host.name}: storing {PROFILE} failed: {done.said}.")


def run_remote(host: ShellHost, argv: Sequence[str]) -> Completed:
    """`argv` on the target, in one round trip, through lib.sh's `run_argv` (which a snapshot
    under TUNE_ROOT emulates, as it does a run's commands): its exit status and what it
    printed (standard output and error together, as `run_argv` keeps them)."""
    words = " ".join(quoted(word) for word in argv)
    done = run_with_library(
        host,
        f'ERR=; run_argv {quoted(shlex.join(argv))} {words}; rc=$?\nprintf %s "$out"; exit $rc\n',
    )
    output = done.stdout.decode("utf-8", "replace")
    return Completed(done.status, output, "" if done.status == 0 else output)


def start_reboot(host: ShellHost, marked: PendingBoot) -> None:
    """Mark pending.json (`marked`, fsynced), then ask the target to reboot, detached from
    this connection (see `reboot_detached`). The script is one group, parsed whole before it
    runs, and ignores the hangup and the broken pipe of a controller that dies meanwhile: a
    mark written is a reboot asked."""
    mark = op_call(PutFile(PENDING, marked.to_json().encode(), 0o600))
    done = run_with_library(
        host,
        "trap '' HUP PIPE\n"
        f'{{ ERR=; {mark} || {{ echo "$ERR" >&2; exit 1; }}; reboot_detached; }}\n',
    )
    if done.status != 0:
        raise HostError(f"{host.name}: the reboot could not be started: {done.said}.")


def unloadable_remote(host: ShellHost, modules: tuple[str, ...]) -> dict[str, str]:
    """`engine.ModuleCheck` on the target, in one round trip: lib.sh's `can_load` (the check a
    run's script makes before its first write), a line `MODULE<TAB>SAID` for each it cannot."""
    body = "".join(
        f"can_load {quoted(m)} || printf '%s\\t%s\\n' {quoted(m)} \"$SAID\"\n" for m in modules
    )
    done = run_with_library(host, body)
    if done.status != 0:
        raise HostError(f"{host.name}: checking modules with modprobe failed: {done.said}.")
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    return {name: said for name, _, said in (line.partition("\t") for line in lines) if said}
