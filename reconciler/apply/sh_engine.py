"""`tune apply` and `tune rollback` on a host without Python: the steps rendered as one POSIX sh
script that the target runs detached from the SSH connection.

The steps stay the one description of the work (`reconciler.steps.ops`): this module only renders
their primitive operations (write an attribute, replace or delete a file, run an argv) and the
five probe readings as calls of a fixed sh library, with every value single-quoted. The script
keeps the local engine's guarantees on its own: it takes the lock, journals each step (same
records, same file as `apply.journal`, synced before the write), writes, reads back, and on
any failure or SIGTERM/SIGHUP/SIGINT restores every journaled step in reverse order before its
`end` record. A dropped connection cannot stop it (setsid, nohup, stdin from /dev/null).
The lock is taken on the target, after the controller's read: before its first write the
script checks that the host still reads as observed (`AsRead`), and stops (`HostChanged`,
exit 9) when a pull or another run wrote it in between.

One round trip uploads the script, checks the requirements (before any write) and starts it;
the controller then polls the journal's `end` record, one round trip per poll: the number of
round trips depends on time, never on the number of knobs.

With probes, the script waits (lock held, after its `run` and `plan` records) for the
measurement tune makes on the target before the phase, and after the last read-back for the
measurement after it and the gates' verdict: each arrives as one file (`send_probes`) whose
records the script appends to its journal, so the journal is the local one record for record.
A failed gate, or no verdict within every probe's timeout and two command timeouts, makes the
script roll back on its own.

The library is for live kernels only. A snapshot under `$TUNE_ROOT` (tune's test lab) has the
lab's own library beside it (`tests/lab.sh`, which lib.sh sources there), emulating the kernel
and its tools as `reconciler.hosts.emulate` does for the Python engine; tune never sends it.
`tests/engines` runs every primitive and the apply, rollback, reboot-phase and fault scenarios
against both engines.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import shlex
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..core.errors import ApplyFailed, ConnectError, HostChanged, HostError, LockHeld, RunKilled
from ..core.quoting import Expand, printf_format, quoted, sh_word
from ..facts import nvidia_smi
from ..hosts import lock
from ..hosts.base import Completed
from ..hosts.shell import ScriptResult, ShellHost
from ..kinds import boot_kind
from ..probes.phase import PhaseProbes, Records, Regressed
from ..profile.load import LoadedProfile
from ..steps.ops import BootTool, DeleteFile, Need, Op, Probe, PutFile, Read, Require, SetAttr, Step
from ..steps.records import (
    Deferred,
    End,
    Failed,
    PlanRecord,
    ProfileReplaced,
    Record,
    RestoreFailed,
    RollbackStarted,
    RunStarted,
    StepAbout,
    StepRecord,
    StepRestored,
    StepUnchanged,
    Verified,
    Written,
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
    not_restored_message,
    read_back_message,
    show_value,
    unmet_message,
    unsupported_message,
)
from .pending import PENDING, PendingBoot
from .preflight import NO_JOURNAL
from .restored import Restored, RollbackResult
from .run_record import contexts, plan_record
from .work import Work

# Exit status of the start script when a requirement is unmet (its stderr says which).
UNMET = 90
# Exit status of a poll that found the run ended but its script still holding the lock.
HELD = 91
# Exit status of a script that found the lock held past `lock.WAIT` (its stderr: the holder).
LOCKED = 92
# Exit status of a poll that found the run's script gone (its pid) and its journal with no `end`.
KILLED = 93
# What a session that ended without an exit status reads as (paramiko's; a broken connection).
NO_STATUS = -1


def _holder() -> str:
    """`HOLDER`: what the target's lock says of a run this command starts there."""
    return f"HOLDER={quoted(lock.this_command() + ', pushed from ' + socket.gethostname())}\n"


def _lock_held(done: ScriptResult) -> None:
    """`LockHeld`, naming the holder, for a script that exited `LOCKED`."""
    if done.status == LOCKED:
        holder = lock.Holder.parse(done.stderr)
        raise LockHeld(lock.held_message(LOCK, holder))


# The primitives. Everything profile-specific arrives as single-quoted arguments; the lock's
# wait and record come from `hosts.lock`, which the Python engine follows too. What a snapshot
# emulates instead of a kernel is no part of it: tune's test lab keeps that (tests/lab.sh).
LIBRARY = (
    f"LOCK={quoted(LOCK)}\nLOCK_WAIT={lock.WAIT}\nLOCKED={LOCKED}\n"
    f"MAX_RECORD={lock.MAX_RECORD}\n"
    f"NVSMI_FIELDS={quoted(','.join(nvidia_smi.FIELDS))}\n"
    f"NVSMI_CLOCK_FIELDS={quoted(','.join(nvidia_smi.CLOCK_FIELDS))}\n"
    + (Path(__file__).parent / "lib.sh").read_text()
)

# Where a host keeps the library, named by its digest: the first script of a connection
# carries it and stores it there (0600, in a 0700 directory, both made by the script's user:
# root; inside tune's state directory, which `trust.check` holds to root alone), every later
# one only checks that file and sources it. A file that is not there, not the digest's bytes,
# a link, or not the script user's own (its directory too) is never sourced: that script exits
# `NOT_STORED` and is sent again with the library, which replaces it. The file outlives a
# reboot: the connection after one checks it, nothing more.
LIBRARY_DIR = f"{STATE}/lib"
# Exit status of a script that found the library not stored as it must be (`run_with_library`).
NOT_STORED = 94


@lru_cache(maxsize=4)
def _stored(library: str) -> tuple[str, str]:
    """The library as a host stores it (ending in a newline, for its here-document), and that
    text's SHA-256."""
    text = library if library.endswith("\n") else library + "\n"
    return text, hashlib.sha256(text.encode()).hexdigest()


def _library(*, inline: bool) -> str:
    """The start of a script: the library sourced from its file on the host, checked first;
    `inline`: the script carries it, to store it there (or, where it cannot be stored, to run
    it from the script itself, as every script did before)."""
    text, digest = _stored(LIBRARY)
    check = (
        'R="${TUNE_ROOT:-}"; R="${R%/}"\n'
        f'L="$R"{quoted(f"{LIBRARY_DIR}/{digest}.sh")}\n'
        # Builtins but the digest: a push's scripts start few processes (test_sh_shortcuts).
        "lib_trusted() {\n"
        '    [ -f "$L" ] && [ ! -h "$L" ] && [ ! -h "${L%/*}" ] && [ -O "${L%/*}" ] &&\n'
        f'        [ -O "$L" ] && [ "$(sha256sum <"$L" 2>/dev/null)" = "{digest}  -" ]\n'
        "}\n"
    )
    if not inline:
        return check + (
            "lib_trusted || {\n"
            f'    echo "tune\'s library is not stored at $L" >&2; exit {NOT_STORED}\n'
            "}\n"
            '. "$L"\n'
        )
    fence = f"TUNE_LIBRARY_{digest[:16]}"
    return check + (
        f"lib_text() {{ cat <<'{fence}'\n{text}{fence}\n}}\n"
        # Stored under a name of this process's, never one that was there (noclobber); one
        # left by a script killed meanwhile only fails this store: the script runs it inline.
        "lib_trusted || {\n"
        '    [ -d "${L%/*}" ] || (umask 077 && mkdir -p -- "${L%/*}") 2>/dev/null\n'
        '    t="${L%/*}/.new.$$"\n'
        '    (umask 077 && set -C && lib_text >"$t") 2>/dev/null && mv -f -- "$t" "$L" ||\n'
        '        rm -f -- "$t" 2>/dev/null\n'
        "}\n"
        'if lib_trusted; then . "$L"; else eval "$(lib_text)"; fi\n'
    )


def run_with_library(host: ShellHost, body: str, timeout: float | None = None) -> ScriptResult:
    """`body` run after the library: sent with it on the connection's first script, and on
    one that found it not stored; only its check on every other."""
    _, digest = _stored(LIBRARY)
    if host.library == digest:
        done = host.run_script(_library(inline=False) + body, timeout)
        if done.status != NOT_STORED:
            return done
    done = host.run_script(_library(inline=True) + body, timeout)
    host.library = digest
    return done


def _probe_args(probe: Probe) -> str:
    return f"{probe.read.value} {quoted(probe.path)} {quoted(probe.arg)}"


def _check(probe: Probe, value: str | None) -> str:
    if value is None:
        return f"reads_absent {_probe_args(probe)}"
    return f"reads {_probe_args(probe)} {quoted(value)}"


def _op(op: Op, step_id: str = "", seq: int | None = None) -> str:
    """`seq`: the step's, inside a run (a file write journals the directories it creates)."""
    if isinstance(op, SetAttr):
        return f"set_attr {quoted(op.path)} {quoted(op.value)}"
    if isinstance(op, PutFile):
        at = "" if seq is None else f" {seq}"
        return f"put_file {quoted(op.path)} {op.mode:o} {printf_format(op.data)}{at}"
    if isinstance(op, DeleteFile):
        return f"delete_file {quoted(op.path)}"
    argv = " ".join(quoted(a) for a in (shlex.join(op.argv), *op.argv))
    if isinstance(op, BootTool):
        # On a snapshot (TUNE_ROOT) the library journals it instead, as a local snapshot does.
        deferred = render(Deferred(op.argv, step_id))
        return f"boot_tool {quoted(deferred)} {argv}"
    return f"run_argv {argv}"


def _ops(ops: tuple[Op, ...], step_id: str = "", seq: int | None = None) -> str:
    return " && ".join(_op(op, step_id, seq) for op in ops) or ":"


def _step_functions(seq: int, step: Step) -> str:
    probe = _probe_args(step.probe)
    unrestored = sh_word(*not_restored_message(step, Expand(f"$(shown_{seq})")))
    files = [op.path for op in (*step.do, *step.undo) if isinstance(op, PutFile)]
    tidy = "untemp " + " ".join(quoted(f) for f in files) if files else ":"
    return (
        f"do_{seq}() {{ {_ops(step.do, step.id, seq)}; }}\n"
        f"undo_{seq}() {{ {_ops(step.undo, step.id, seq)}; }}\n"
        f"tidy_{seq}() {{ {tidy}; }}\n"
        f"expected_{seq}() {{ {_check(step.probe, step.expect)}; }}\n"
        f"restored_{seq}() {{ {_check(step.probe, step.restored)}; }}\n"
        f"shown_{seq}() {{ shown {probe}; }}\n"
        f"unrestored_{seq}() {{ printf '%s' {unrestored}; }}\n"
    )


def _made(run: Run | None) -> str:
    """`MADE` (see apply/lib.sh) as a run's journal has it: what its restores remove."""
    made = run.made if run is not None else {}
    lines = "".join(f"{seq} {d}\n" for seq, dirs in made.items() for d in dirs)
    return f"MADE={quoted(lines)}\n"


def _requirement(need: Require, step: Step) -> str:
    if need.need is Need.WRITABLE:
        test = f"writable {quoted(need.arg)}"
    elif need.need is Need.COMMAND:
        test = f"has_command {quoted(need.arg)}"
    else:
        test = f"can_load {quoted(need.arg)}"
    problem = sh_word(*unmet_message(need, step, Expand("$SAID")))
    return f"{test} || {{ echo {problem} >&2; BAD=1; }}\n"


def _refused(seq: int, step: Step) -> list[str]:
    """The branch for a write the kernel refused (`set_attr` set REFUSED): an optional step is
    journaled `unsupported` and skipped, any other fails the run with the local engine's line."""
    if step.optional:
        return [f'    elif [ -n "$REFUSED" ]; then skip {seq}\n', '    else fail "$ERR"; fi\n']
    message = sh_word(*unsupported_message(step, Expand("${ERR%.}")))
    return [f'    elif [ -n "$REFUSED" ]; then fail {message}\n', '    else fail "$ERR"; fi\n']


# Where a pushed run that found the host changed since it was read stops (its `failed` record's
# `at`): before any step is journaled, so nothing is written and nothing is restored.
AS_READ = "the host as read"


@dataclass(frozen=True)
class AsRead:
    """What a push's observation read: every step's prior value (its `restored` reading) and
    profile.yaml (None: absent). The script compares them, lock held, before its first write:
    a pull that ran between the read and the lock is found, never written over."""

    profile: bytes | None


def _stat_all(paths: Sequence[str]) -> str:
    """One ask of whether each of `paths` is writable (`writable_all`: a snapshot's `stat`)."""
    unique = list(dict.fromkeys(paths))
    if len(unique) < 2:
        return ""
    return "    writable_all " + " ".join(f'"$R"{quoted(path)}' for path in unique) + "\n"


def _as_read(steps: Sequence[tuple[int, Step]], read: AsRead) -> str:
    """`as_read`: status 0 when the host still reads as observed, else ERR names the first
    value that differs. Only the first step of each file: a later one's prior (`restored`)
    is that file after the earlier steps (the edits of one container config, in turn)."""
    first: dict[str, tuple[int, Step]] = {}
    for seq, step in steps:
        first.setdefault(step.probe.path, (seq, step))
    # The sysctls, which no builtin can read, in one awk (`words_are`); only where one of them
    # differs are they read one by one, for the message.
    sysctls = [(seq, s) for seq, s in first.values() if _sysctl_words(s)]
    batched = len(sysctls) > 1
    lines = []
    if batched:
        pairs = " ".join(f"{quoted(s.probe.path)} {quoted(s.restored or '')}" for _, s in sysctls)
        lines.append(f"    SAME=; words_are {pairs} && SAME=1\n")
    for seq, step in first.values():
        test = _reads_as_read(seq, step)
        if batched and _sysctl_words(step):
            test = f'{{ [ -n "$SAME" ] || {test}; }}'
        lines.append(f"    {test} || {{ ERR={_changed(seq, step)}; return 1; }}\n")
    stored = f'"$R"{quoted(PROFILE)}'
    if read.profile is None:
        same = f"[ ! -e {stored} ]"
    else:  # x: the substitutions keep trailing newlines
        text = printf_format(read.profile)
        same = f'[ "$(cat {stored}; printf x)" = "$(printf {text}; printf x)" ]'
    was = "no longer absent" if read.profile is None else "not the one read"
    lines.append(f"    {same} || {{ ERR={quoted(f'{PROFILE} is {was}')}; return 1; }}\n")
    return "as_read() {\n" + "".join(lines) + "}\n"


def _sysctl_words(step: Step) -> bool:
    """A prior that `words_are` can check with others: words of a file under /proc/sys."""
    value = step.restored
    return (
        step.probe.read is Read.WORDS
        and step.probe.path.startswith("/proc/sys/")
        and value is not None
        and "\0" not in value
    )


def _reads_as_read(seq: int, step: Step) -> str:
    """The step's prior reading checked; a file of one line (most kernel attributes) without
    a fork, which over hundreds of files is most of the check's time on a loaded host. Not a
    sysctl: dash's `read` takes a byte per read(2), and the kernel answers a read of
    /proc/sys at an offset past 0 with end of file (`60` reads as `6`)."""
    value, path = step.restored, quoted(step.probe.path)
    if value is None or "\0" in value or step.probe.path.startswith("/proc/sys/"):
        return f"restored_{seq}"
    if step.probe.read is Read.WORDS:
        return f"is_words {path} {quoted(value)}"
    if step.probe.read is Read.TEXT and value.endswith("\n") and value.count("\n") == 1:
        return f"is_line {path} {quoted(value[:-1])}"
    return f"restored_{seq}"


# A file's text longer than this is named, never quoted, when it changed since the read: a
# container config of a few hundred KiB, twice, is no message.
SHOWN_TEXT = 200


def _changed(seq: int, step: Step) -> str:
    value = step.restored
    if step.probe.read is Read.TEXT and value is not None and len(value) > SHOWN_TEXT:
        size = len(value.encode("utf-8", "surrogateescape"))
        return sh_word(f"{step.id}: {step.probe.path} no longer holds the {size:,} bytes read")
    return sh_word(f"{step.id} read {show_value(step.restored)}, now ", Expand(f"$(shown_{seq})"))


@dataclass(frozen=True)
class ApplyScript:
    """The script that applies `steps` on the target, and the one that uploads and starts it."""

    run_id: str
    body: str  # what follows the library

    @property
    def text(self) -> str:
        """The script stored beside its journal: the library sourced from its file (which the
        starter stored, or found stored), then the body."""
        return (
            "#!/bin/sh\n# Written by tune apply: runs the apply of one run on this host.\n"
            + _library(inline=False)
            + self.body
        )

    @classmethod
    def of(
        cls,
        steps: tuple[Step, ...],
        header: RunStarted | None,
        profile: tuple[str | None, str] | None,
        plan: PlanRecord | None = None,
        about: dict[str, StepAbout] | None = None,
        probes_wait: int | None = None,
        *,
        after: tuple[PutFile, ...] = (),
        extends: Run | None = None,
        later: tuple[Step, ...] = (),
        as_read: AsRead | None = None,
    ) -> ApplyScript:
        """`header`: the `run` record (None with `extends`); `profile`: (prior text, new text) of
        profile.yaml when the run replaces it; `plan` and `about`: the `plan` record and each
        step's context, as the local journal writes them (`reconciler.run_record`);
        `probes_wait`: with probes, the seconds the script waits for tune's measurement before
        the first write and after the last read-back (`send_probes`) before it rolls back;
        `after`: files written after the last step, before profile.yaml (pending.json);
        `later`: steps the run is extended with after the boot (`promote`), whose requirements
        are checked with its own; `as_read`: what the observation read, which the host must
        still read once the lock is held (a pushed run).

        With `extends`, the steps are appended to that applied run (`apply.extend`), with no
        `run` record; a failure restores them and the run's boot configuration."""
        about = about or {}
        if header is None and extends is None:
            raise ValueError("a run script needs its run record or the run it extends")
        run_id = header.run_id if header is not None else extends.run_id if extends else ""
        first = max((seq for seq, _ in extends.steps), default=-1) + 1 if extends else 0
        earlier = [(q, s) for q, s in extends.steps if boot_kind(s.kind)] if extends else []
        parts = [
            f'J="$R"{quoted(run_path(run_id))}\n',
            _holder(),
            _made(extends),
        ]
        parts += [_step_functions(seq, step) for seq, step in earlier]
        parts += [_step_functions(seq, step) for seq, step in enumerate(steps, first)]
        parts += [
            f"unafter_{n}() {{ {_op(DeleteFile(op.path))}; }}\n" for n, op in enumerate(after)
        ]
        if as_read is not None:
            parts.append(_as_read(list(enumerate(steps, first)), as_read))
        checks: dict[tuple[Require, str], str] = {}
        for step in (*steps, *later):
            for need in step.requires:
                checks.setdefault((need, ""), _requirement(need, step))
        writable = [need.arg for need, _ in checks if need.need is Need.WRITABLE]
        parts.append(
            "check() {\n    BAD=\n"
            + _stat_all(writable)
            + f"    writable {quoted(RUNS)} && private_dir {quoted(RUNS)} || "
            f"{{ echo {quoted(NO_JOURNAL)} >&2; BAD=1; }}\n"
            + "".join(f"    {line}" for line in checks.values())
            + '    [ -z "$BAD" ]\n}\n'
        )
        seeded = " ".join(str(seq) for seq, _ in reversed(earlier))
        body = [
            "apply() {\n",
            f"    DONE={quoted(seeded)}\n    WROTE=\n    AT='the start'\n",
            '    (umask 077 && : >>"$J") || exit 1\n',
            _stat_all(
                [op.path for st in steps for op in (*st.do, *st.undo) if isinstance(op, SetAttr)]
            ),
            # The run record reaches the disk with the plan's, in one sync.
            *(
                [f"    {'rec' if plan is None else 'note'} {quoted(render(header))}\n"]
                if extends is None and header
                else []
            ),
            *([f"    rec {quoted(render(plan))}\n"] if plan is not None else []),
            *(["    FAILED_END=boot-rolled-back\n"] if extends is not None else []),
            "    trap 'fail \"interrupted by SIGTERM\"' TERM\n",
            "    trap 'fail \"interrupted by SIGHUP\"' HUP\n",
            "    trap 'fail \"interrupted by SIGINT\"' INT\n",
            '    take_lock || fail "$ERR"\n',
            *([f"    AT={quoted(AS_READ)}\n", '    as_read || fail "$ERR"\n'] if as_read else []),
            *_await("before", probes_wait),
        ]
        for seq, step in enumerate(steps, first):
            step_record = render(StepRecord(seq, step, about.get(step.id, StepAbout())))
            body += [
                f"    AT={quoted(step.id)}\n",
                f'    rec {quoted(step_record)} || fail "$ERR"\n',
                f'    DONE="{seq} $DONE"\n',
                f"    ERR=; REFUSED=; if do_{seq}; then\n",
                f"    note {quoted(render(Written(seq)))}\n",
                f"    expected_{seq} || fail "
                f"{sh_word(*read_back_message(step, Expand(f'$(shown_{seq})')))}\n",
                f"    note {quoted(render(Verified(seq)))}\n",
                *_refused(seq, step),
            ]
        body += _await("after", probes_wait)
        # Before profile.yaml, which says the run succeeded: last, as in `apply.execute`.
        # `fail` removes each one written (WROTE), as `apply.execute` does.
        body += [
            f'    AT={quoted(op.path)}\n    ERR=; {_op(op)} || fail "$ERR"\n'
            f'    WROTE="{n} $WROTE"\n'
            for n, op in enumerate(after)
        ]
        if profile is not None:
            prior, text = profile
            body += [
                f"    AT={quoted(PROFILE)}\n",
                f"    rec {quoted(render(ProfileReplaced(prior)))}\n",
                f"    ERR=; put_file {quoted(PROFILE)} 644 {printf_format(text.encode())}"
                ' || fail "$ERR"\n',
            ]
        body += ["    trap '' TERM HUP INT\n", "    end applied\n}\n"]
        parts += body
        parts.append('case "$1" in\ncheck) check ;;\napply) apply ;;\nesac\n')
        return cls(run_id, "".join(parts))

    def starter(self, *, announce: bool = True) -> str:
        """Upload the script next to its journal, check every requirement, start it detached;
        `announce`: say `started` (not when the first poll follows in the same round trip)."""
        fence = f"TUNE_SCRIPT_{secrets.token_hex(8)}"
        script = f"{RUNS}/{self.run_id}.sh"
        # umask 077: the state directories, and the script beside its 0600 journal, are
        # nobody else's to read or change.
        return (
            "umask 077\n"
            f"writable {quoted(RUNS)} || {{ echo {quoted(NO_JOURNAL)} >&2; exit {UNMET}; }}\n"
            f'[ -d "$R"{quoted(RUNS)} ] || mkdir -p "$R"{quoted(RUNS)} || exit {UNMET}\n'
            f'F="$R"{quoted(script)}\n'
            f"cat >\"$F.new\" <<'{fence}'\n{self.text}{fence}\n"
            'mv -f "$F.new" "$F" || exit 1\n'
            # Its words go to stderr: stdout may be the first poll's (the journal).
            f'sh "$F" check >&2 || exit {UNMET}\n'
            # A run going on, pushed or pulled, is named here, before this one is started.
            "lock_free\n"
            "if command -v setsid >/dev/null 2>&1; then S=setsid; else S=; fi\n"
            '$S nohup sh "$F" apply </dev/null >/dev/null 2>&1 &\n'
            # Its pid, for a poll to tell a script still going from one that was killed.
            'P=$!; echo "$P" >"${F%.sh}.pid" || :\n' + ("echo started\n" if announce else "")
        )


def _await(when: str, seconds: int | None) -> list[str]:
    if seconds is None:
        return []
    return [
        f"    AT={quoted(f'the probes {when} the phase')}\n",
        f"    await_probes {when} {seconds}\n",
    ]


def send_probes(run_id: str, when: str, verdict: str, records: list[Record]) -> str:
    """The script part that hands a probe measurement to the waiting apply script: the verdict
    line, then the records, in one file that appears whole (rename)."""
    lines = [" ".join(verdict.split()) or "ok"]
    lines += [render(r) for r in records]
    path = quoted(f".{run_path(run_id)}.{when}")
    data = "".join(f"{line}\n" for line in lines).encode()
    return (
        f'cd -- "${{TUNE_ROOT:-/}}" || exit 1\n'
        f"printf {printf_format(data)} >{path}.new && mv -f {path}.new {path} || exit 1\n"
    )


def rollback_script(run: Run, *, boot_only: bool = False) -> str:
    """Restore a journaled run from its journal alone, on the target (`tune rollback -H`);
    `boot_only`: only its boot configuration (what a failed verification undoes)."""
    steps = [(seq, s) for seq, s in run.steps if not boot_only or boot_kind(s.kind)]
    parts = [f'J="$R"{quoted(run_path(run.run_id))}\n', _holder(), _made(run)]
    parts += [_step_functions(seq, step) for seq, step in steps]
    replaced, prior = run.profile_prior
    if not replaced or boot_only:
        profile = ":"
    elif prior is None:
        profile = f"delete_file {quoted(PROFILE)}"
    else:
        profile = f"put_file {quoted(PROFILE)} 644 {printf_format(prior.encode())}"
    order = " ".join(str(seq) for seq, _ in reversed(steps))
    done = "boot-rolled-back" if boot_only else "rolled-back"
    # As `apply.rollback`: a run rolled back leaves nothing for `tune verify` to check.
    mine = json.dumps({"run_id": run.run_id})[1:-1]
    pending = (
        ":"
        if boot_only
        else f'[ "$FAILS" -ne 0 ] || ! grep -qF {quoted(mine)} "$R"{quoted(PENDING)} 2>/dev/null '
        f"|| delete_file {quoted(PENDING)}"
    )
    parts.append(
        "lock_or_exit\n"
        "trap '' TERM HUP INT\n"
        # As `Journal.resume`: a record a crash tore goes before the rollback's are added.
        + ("" if run.torn_at is None else f'truncate -s {run.torn_at} "$J"\n')
        + f"rec {quoted(render(RollbackStarted(now_iso())))}\n"
        f'FAILS=0\nfor n in {order}; do restore_step "$n"; done\n'
        f'ERR=; {profile} || {{ FAILS=$((FAILS + 1)); echo "$ERR" >&2; }}\n'
        f'ERR=; {pending} || {{ FAILS=$((FAILS + 1)); echo "$ERR" >&2; }}\n'
        f'if [ "$FAILS" -eq 0 ]; then end {done}; else end rollback-failed; fi\n'
    )
    return "".join(parts)


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
    changes: int
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
    done = run_with_library(host, rollback_script(run, boot_only=boot_only))
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
    script = ApplyScript.of(steps, None, None, extends=run)
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
    body = "".join(f'ERR=; {_op(op)} || {{ echo "$ERR" >&2; exit 1; }}\n' for op in ops)
    done = run_with_library(host, body)
    if done.status != 0:
        raise HostError(f"{host.name}: {doing} failed: {done.said}.")


def store_profile_remote(host: ShellHost, text: str, also: tuple[PutFile, ...] = ()) -> None:
    """`apply.store_profile` of an apply with nothing to change, and the files of `also`
    (status.json), in one round trip, the lock held as a run holds it."""
    done = run_with_library(
        host,
        f"{_holder()}lock_or_exit\n"
        f"ERR=; private_dir {quoted(STATE)} && "
        f"put_file {quoted(PROFILE)} 644 {printf_format(text.encode())} "
        '|| { echo "${ERR:-cannot write it}" >&2; exit 1; }\n'
        + "".join(f'ERR=; {_op(op)} || {{ echo "$ERR" >&2; exit 1; }}\n' for op in also),
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
    mark = _op(PutFile(PENDING, marked.to_json().encode(), 0o600))
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
