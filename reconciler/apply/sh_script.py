"""The sh that applies and rolls back on a host without Python: the library of primitives, the
apply script of a run, the rollback script, and the file that hands it a probe measurement.
Text only: `sh_engine` sends these scripts and reads what they leave.

The steps stay the one description of the work (`reconciler.steps.ops`): this module only renders
their primitive operations (write an attribute, replace or delete a file, run an argv) and the
five probe readings as calls of a fixed sh library, with every value single-quoted. The script
keeps the local engine's guarantees on its own: it takes the lock, journals each step (same
records, same file as `apply.journal`, synced before the write), writes, reads back, and on
any failure or SIGTERM/SIGHUP/SIGINT restores every journaled step in reverse order before its
`end` record. Before its first write the script checks that the host still reads as observed
(`AsRead`), and stops (`HostChanged`, exit 9) when a pull or another run wrote it in between.

With probes, the script waits (lock held, after its `run` and `plan` records) for the
measurement tune makes on the target before the phase, and after the last read-back for the
measurement after it and the gates' verdict: each arrives as one file (`send_probes`) whose
records the script appends to its journal, so the journal is the local one record for record.
A failed gate, or no verdict within every probe's timeout and two command timeouts, makes the
script roll back on its own.

The library is for live kernels only. A snapshot under `$TUNE_ROOT` (tune's test lab) has the
lab's own library beside it (`tests/lab.sh`, which lib.sh sources there), emulating the kernel
and its tools as `reconciler.hosts.emulate` does for the Python engine; tune never sends it.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shlex
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..core.quoting import Expand, printf_format, quoted, sh_word
from ..facts import nvidia_smi
from ..hosts import lock
from ..kinds import boot_kind
from ..steps.ops import BootTool, DeleteFile, Need, Op, Probe, PutFile, Read, Require, SetAttr, Step
from ..steps.records import (
    Deferred,
    PlanRecord,
    ProfileReplaced,
    Record,
    RollbackStarted,
    RunStarted,
    StepAbout,
    StepRecord,
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
    now_iso,
    run_path,
)
from .messages import (
    not_restored_message,
    read_back_message,
    show_value,
    unmet_message,
    unsupported_message,
)
from .pending import PENDING
from .preflight import NO_JOURNAL

# Exit status of the start script when a requirement is unmet (its stderr says which).
UNMET = 90


# Exit status of a script that found the lock held past `lock.WAIT` (its stderr: the holder).
LOCKED = 92


def holder_line(pushed: bool = True) -> str:
    """`HOLDER`: what the target's lock says of a run this command starts there; `pushed`:
    started from another machine, which it names."""
    origin = f", pushed from {socket.gethostname()}" if pushed else ""
    return f"HOLDER={quoted(lock.this_command() + origin)}\n"


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
def stored_library(library: str) -> tuple[str, str]:
    """The library as a host stores it (ending in a newline, for its here-document), and that
    text's SHA-256."""
    text = library if library.endswith("\n") else library + "\n"
    return text, hashlib.sha256(text.encode()).hexdigest()


def library_digest() -> str:
    """The SHA-256 of the library as a host stores it: the name of its file there."""
    return stored_library(LIBRARY)[1]


def library_prelude(*, inline: bool) -> str:
    """The start of a script: the library sourced from its file on the host, checked first;
    `inline`: the script carries it, to store it there (or, where it cannot be stored, to run
    it from the script itself, as every script did before)."""
    text, digest = stored_library(LIBRARY)
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


def _probe_args(probe: Probe) -> str:
    return f"{probe.read.value} {quoted(probe.path)} {quoted(probe.arg)}"


def _check(probe: Probe, value: str | None) -> str:
    if value is None:
        return f"reads_absent {_probe_args(probe)}"
    return f"reads {_probe_args(probe)} {quoted(value)}"


def op_call(op: Op, step_id: str = "", seq: int | None = None) -> str:
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
    return " && ".join(op_call(op, step_id, seq) for op in ops) or ":"


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
            + library_prelude(inline=False)
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
        pushed: bool = True,
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
            holder_line(pushed),
            _made(extends),
        ]
        parts += [_step_functions(seq, step) for seq, step in earlier]
        parts += [_step_functions(seq, step) for seq, step in enumerate(steps, first)]
        parts += [
            f"unafter_{n}() {{ {op_call(DeleteFile(op.path))}; }}\n" for n, op in enumerate(after)
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
            f'    AT={quoted(op.path)}\n    ERR=; {op_call(op)} || fail "$ERR"\n'
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


def rollback_script(run: Run, *, boot_only: bool = False, pushed: bool = True) -> str:
    """Restore a journaled run from its journal alone, on the target (`tune rollback -H`);
    `boot_only`: only its boot configuration (what a failed verification undoes)."""
    steps = [(seq, s) for seq, s in run.steps if not boot_only or boot_kind(s.kind)]
    parts = [f'J="$R"{quoted(run_path(run.run_id))}\n', holder_line(pushed), _made(run)]
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
