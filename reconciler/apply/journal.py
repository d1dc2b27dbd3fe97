"""The run journal on the target: `/var/lib/tune/runs/<run-id>.jsonl`, one fsynced JSON record
per line, mode 0600, written through the host so it lives where the changes are.

Every record a later write depends on is on disk before that write; the `written` and
`verified` markers of a pushed run's script reach the disk with the record after them (the next
step's, the `end`), since a rollback restores a journaled step whatever its markers say.

Records (the contract `tune check --since-apply` reads; see docs/apply.md, "The run journal"):
- `run` first: run_id, started, profile, phase, host, boot_id;
- `step` BEFORE its write: seq, id, kind, target, prior, desired, and the step's data (probe,
  expect, restored, do, undo) so that `tune rollback` needs nothing but this file;
- markers: `written`, `verified`, `failed` (error), `rollback` (started), `restored`,
  `unchanged` (already at its prior value), `restore-failed` (error), `profile` (prior text of
  profile.yaml, before it is replaced), `mkdir` (seq, paths: the directories a step's file
  write is about to create, deepest first, which a rollback removes again while empty);
- `plan` after `run`: the plan's changes (each with applied_now), pending reboots and failed
  checks, so a report can say what still needs a reboot or the BIOS;
- `step` records also carry priority, reason, phase, operations (and fix) for `tune report`;
- `probes` (when: before | after | after-boot, phase, results) and `gate` (probe, phase, when,
  ok, message, before, after, kept) when the profile has probes; `tune verify` appends the
  after-boot ones to the run it verifies, then a new `end`;
- `end`: outcome (applied | rolled-back | rollback-failed), finished. A rollback of an applied
  run appends to that run's file, so the LAST `end` line is the run's outcome; a file whose last
  record is not `end` was interrupted.

Each record is a type of `apply.records`, written and read only through it. `parse_run` is the
one reader (rollback, history, check, report, verify), and it is strict: a torn last line is
what a crash mid-append leaves and reads as an interrupted run; any other damage is a
`DamagedJournal` naming the file and line and the steps recorded before it, which
`tune rollback` still restores (`rollback_chain`) before it exits with `ExitCode.JOURNAL`.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

from ..core.errors import HostError, JournalError, TuneError, UnfinishedRun
from ..core.files import Files, Request
from ..hosts.base import Host, ReadableHost
from ..hosts.trust import check
from ..steps.ops import Step
from ..steps.records import (
    STEP_MARKERS,
    End,
    Mkdir,
    ProfileReplaced,
    Record,
    RecordError,
    RunStarted,
    StepAbout,
    StepRecord,
    StepUnsupported,
    parse_line,
    render,
)
from ..steps.state import (
    LOCK,
    PROFILE,
    RUN_SUFFIX,
    RUNS,
    STATE,
    run_path,
    run_paths,
    runs_request,
    skipped_line,
    within_limit,
)

__all__ = [
    "LOCK",
    "PROFILE",
    "RUNS",
    "RUN_SUFFIX",
    "STATE",
    "run_path",
    "skipped_line",
    "within_limit",
]


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_run_id(now: datetime | None = None) -> str:
    """Sorts by time: `YYYYMMDDTHHMMSSZ-<6 hex>`, the hex being the microsecond and one random
    digit. Two runs in one second happen (a scripted apply after another, an apply over an
    interrupted one) and which is newer decides what `tune rollback` undoes: a random suffix
    alone made it pick the earlier run half the time."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{now.microsecond:05x}{secrets.randbelow(16):x}"


class Journal:
    """Appends records to one run's file; each is on disk (fsync) before `record` returns."""

    def __init__(self, host: Host, run_id: str, *, sync: bool = True) -> None:
        self.host = host
        self.run_id = run_id
        self.path = run_path(run_id)
        self.sync = sync
        # Step seq -> the directories its writes created, as journaled (`mkdir` records).
        self.made: dict[int, list[str]] = {}

    @classmethod
    def resume(cls, host: Host, run: Run) -> Journal:
        """The journal of `run`, to append to (a rollback): a record a crash tore at its end is
        cut off first, or the next record would join it into one line that is not JSON."""
        journal = cls(host, run.run_id)
        if run.torn_at is not None:
            # Best effort, as the markers are: the restore matters more than the journal's
            # shape, and a journal left torn reads as damaged at that line, which is said.
            with contextlib.suppress(TuneError):
                data = host.fetch(Request.of(whole=[journal.path])).read(journal.path) or b""
                host.put_file(journal.path, data[: run.torn_at], 0o600)
        return journal

    @classmethod
    def start(
        cls,
        host: Host,
        *,
        profile: str,
        phase: str,
        host_name: str,
        boot_id: str | None,
        sync: bool = True,
        run_id: str | None = None,
    ) -> Journal:
        """`run_id`: chosen before the run when something written inside it names the run
        (pending.json)."""
        host.private_dir(RUNS)
        check_state(host)
        journal = cls(host, run_id or new_run_id(), sync=sync)
        journal.record(RunStarted(journal.run_id, now_iso(), profile, phase, host_name, boot_id))
        return journal

    def record(self, record: Record) -> None:
        self.host.append(self.path, (render(record) + "\n").encode(), sync=self.sync)

    def step(self, seq: int, step: Step, about: StepAbout) -> None:
        """`about`: why the step is made (priority, reason, operations), for `tune report`."""
        self.record(StepRecord(seq, step, about))

    def creates(self, seq: int, directories: list[str]) -> None:
        """Journal the directories step `seq` is about to create, before it does."""
        if directories:
            self.record(Mkdir(seq, tuple(directories)))
            self.made.setdefault(seq, []).extend(directories)

    def end(self, outcome: str) -> None:
        self.record(End(outcome, now_iso()))


@dataclass
class Run:
    """A run as read back from its journal: its records, typed, in the order written. The file
    may be a crashed run's (no `end`): `outcome` is then "interrupted"."""

    run_id: str
    header: RunStarted | None = None
    records: list[Record] = field(default_factory=list)
    # Where the journal is damaged (`read_journal`): the records are those before it.
    damage: DamagedJournal | None = None
    size: int = 0  # the bytes read, whole records or not: what `appended` reads past
    # Where a record torn by a crash starts (`read_journal`), which goes before more are added.
    torn_at: int | None = None

    @property
    def steps(self) -> list[tuple[int, Step]]:
        return [(r.seq, r.step) for r in self.records if isinstance(r, StepRecord)]

    def of_type(self, record_type: type[R]) -> list[R]:
        return [r for r in self.records if isinstance(r, record_type)]

    @property
    def outcome(self) -> str:
        """The last `end` record's outcome, or "interrupted" when the file stops elsewhere."""
        last = self.records[-1] if self.records else None
        return last.outcome if isinstance(last, End) else "interrupted"

    @property
    def finished(self) -> str | None:
        last = self.records[-1] if self.records else None
        return last.finished if isinstance(last, End) else None

    @property
    def unsupported(self) -> list[str]:
        """One line for each optional step the kernel refused, which the run skipped."""
        ids = {seq: step.id for seq, step in self.steps}
        return [skipped_line(ids[r.seq], r.error) for r in self.of_type(StepUnsupported)]

    @property
    def made(self) -> dict[int, list[str]]:
        """Step seq -> the directories its writes created (`Journal.creates`)."""
        made: dict[int, list[str]] = {}
        for record in self.of_type(Mkdir):
            made.setdefault(record.seq, []).extend(record.paths)
        return made

    @property
    def profile_prior(self) -> tuple[bool, str | None]:
        """(whether this run replaced profile.yaml, the text it had before)."""
        replaced = self.of_type(ProfileReplaced)
        return (True, replaced[0].prior) if replaced else (False, None)


R = TypeVar("R", bound=Record)


class DamagedJournal(JournalError):
    """A journal damaged before its last line (the last one a crash may tear): `readable` is the
    run as far as it could be read, which is what can still be rolled back."""

    def __init__(self, path: str, line: int, problem: str, readable: Run) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        self.readable = readable
        super().__init__(f"{path}:{line}: {problem}; the journal is damaged from there on.")

    def problems(self) -> list[str]:
        return [*super().problems(), self.what_remains()]

    def problems_after_rollback(self) -> list[str]:
        """What `tune rollback` says once it restored the steps recorded before the damage."""
        restored = len(self.readable.steps)
        return [
            *super().problems(),
            f"Only the {restored} steps recorded before line {self.line} were rolled back; any "
            f"change run {self.readable.run_id} made after them is still on the host: check it "
            f"by hand; then `tune apply --after-interrupted` applies over this run.",
        ]

    def what_remains(self) -> str:
        steps = [step.id for _, step in self.readable.steps]
        if not steps:
            return (
                "No step is recorded before the damage: tune cannot roll back any change of "
                "this run."
            )
        shown = ", ".join(steps[:5]) + (", ..." if len(steps) > 5 else "")
        return (
            f"The {len(steps)} steps recorded before it ({shown}) can still be rolled back "
            f"(`tune rollback {self.readable.run_id}` restores them); any change recorded after "
            "them must be checked by hand."
        )


def run_ids(host: ReadableHost) -> list[str]:
    listing = host.fetch(Request(listings=frozenset([RUNS]))).listing(RUNS)
    names = [p.rsplit("/", 1)[1] for p in listing if p.endswith(RUN_SUFFIX)]
    return sorted(n.removesuffix(RUN_SUFFIX) for n in names)


def read_run(host: ReadableHost, run_id: str, *, damaged: bool = False) -> Run | None:
    """The run `run_id`, None when there is none; a damaged journal raises `DamagedJournal`,
    or with `damaged` is read as far as it can be (`Run.damage` says where it stops)."""
    path = run_path(run_id)
    return _run_in(host.fetch(Request.of(whole=[path])), path, damaged=damaged)


def _run_in(files: Files, path: str, *, damaged: bool) -> Run | None:
    """The run whose journal `files` read at `path` (see `read_run`)."""
    if path in files.errors:
        raise JournalError(f"{path}: cannot read run journal ({files.errors[path]}).")
    data = files.read(path)
    if data is None:
        return None
    run_id = posixpath.basename(path).removesuffix(RUN_SUFFIX)
    run = read_journal(run_id, within_limit(path, data), path)
    if run.damage is not None and not damaged:
        raise run.damage
    return run


def _fetched_run(host: ReadableHost, files: Files, path: str) -> Run:
    """The run at `path` as far as it reads, from `files` when they hold it; else read on its
    own (the glob's newest match was not the listing's: a directory named like a journal, a
    run that began between the two)."""
    if path in files.contents or path in files.errors:
        run = _run_in(files, path, damaged=True)
        if run is not None:
            return run
    return existing_run(host, posixpath.basename(path).removesuffix(RUN_SUFFIX), damaged=True)


def every_run(host: ReadableHost) -> tuple[list[Run], list[DamagedJournal]]:
    """Every run on the host, oldest first, a damaged one as far as it reads (`tune history`);
    and the damage found."""
    runs: list[Run] = []
    damaged: list[DamagedJournal] = []
    for run_id in run_ids(host):
        try:
            run = read_run(host, run_id)
        except DamagedJournal as exc:
            damaged.append(exc)
            run = exc.readable
        if run is not None:
            runs.append(run)
    return runs, damaged


def appended(host: ReadableHost, run: Run) -> list[Record]:
    """The records appended to `run`'s journal since it was read (what a rollback script
    wrote), read past whatever damage the run had; a torn or unreadable line is skipped."""
    path = run_path(run.run_id)
    data = host.fetch(Request.of(whole=[path])).read(path) or b""
    added: list[Record] = []
    start = run.size if run.torn_at is None else run.torn_at  # `resume` cut the torn record
    for line in within_limit(path, data)[start:].split(b"\n")[:-1]:
        with contextlib.suppress(RecordError):
            added.append(parse_line(line))
    return added


def existing_run(host: ReadableHost, run_id: str, *, damaged: bool = False) -> Run:
    """The run `run_id` (see `read_run`); HostError when the host has no such run."""
    run = read_run(host, run_id, damaged=damaged)
    if run is None:
        raise _no_run(host, run_id)
    return run


def _chosen_id(host: ReadableHost, run_id: str | None, doing: str) -> tuple[str, list[str]]:
    """The id of the run `run_id` names (the newest by default), and every run's id."""
    ids = run_ids(host)
    if not ids:
        raise HostError(f"no tune runs on {host.describe()} to {doing}.")
    chosen = run_id or ids[-1]
    if chosen not in ids:
        raise _no_run(host, chosen)
    return chosen, ids


def chosen_run(host: ReadableHost, run_id: str | None, doing: str) -> Run:
    """The run `run_id` names, the newest by default, for `doing` ("roll back", "report")."""
    return existing_run(host, _chosen_id(host, run_id, doing)[0])


def check_state(host: Host, *files: str) -> None:
    """Refuse (`trust.UntrustedState`) tune's state directories, its lock's, and the `files`
    of its state named (a journal, pending.json), when someone other than root or the caller
    could have written them: a journal names the files rollback writes and the argv it runs."""
    check(*host.owned([STATE, RUNS, LOCK.rsplit("/", 1)[0], *files]), files)


def trusted_run(host: Host, run_id: str, *, damaged: bool = False) -> Run:
    """The run `run_id`, once its journal and the directories above it pass `check_state`
    (read with the check: one round trip over SSH)."""
    path = run_path(run_id)
    caller, owned, data = host.owned_and_read([STATE, RUNS, LOCK.rsplit("/", 1)[0], path], path)
    check(caller, owned, (path,))
    if data is None:
        raise _no_run(host, run_id)
    run = read_journal(run_id, within_limit(path, data), path)
    if run.damage is not None and not damaged:
        raise run.damage
    return run


def rolled_back_run(host: Host, run_id: str | None) -> Run:
    """The one run `apply.rollback` restores (the newest by default), once trusted."""
    return trusted_run(host, _chosen_id(host, run_id, "roll back")[0])


def rollback_chain(host: Host, run_id: str | None) -> list[Run]:
    """The runs `tune rollback` restores, newest first: the run `run_id`; by default the newest
    run and every interrupted run right before it (one applied over an interrupted one, with
    `--after-interrupted` or by a tune that did not stop there), so no change stays behind.

    A damaged journal's run is restored as far as it reads (its `damage` says what it could
    not) and ends the chain: the operator reads why before anything older is touched."""
    chosen, ids = _chosen_id(host, run_id, "roll back")
    chain = [trusted_run(host, chosen, damaged=True)]
    for earlier in reversed(ids[:-1] if run_id is None else []):
        if chain[-1].damage is not None:
            break
        run = trusted_run(host, earlier, damaged=True)
        if run.outcome != "interrupted":
            break
        chain.append(run)
    return chain


def before_apply(
    host: Host,
    *,
    after_interrupted: bool = False,
    wait_for_lock: Callable[[], None] | None = None,
    also: Request | None = None,
) -> Files | None:
    """What every engine checks before a new run: tune's state is trusted (`check_state`) and,
    unless the operator said `--after-interrupted`, the newest run ended: `UnfinishedRun` when
    it stopped without an `end` record (killed, the power lost), since its changes stay on the
    host and a new run over them would hide them. `wait_for_lock` (the engine's): over SSH
    the script takes the lock later, so a run without its end may still be going (a pull on
    the host); it waits for the lock as a run would, and `LockHeld` names the holder.
    `also`: more to read in the first batch (the apply's observation, `work.prepare_request`),
    returned unless it may be stale (it waited for a run's lock): then None."""
    # The names and the newest journal in one batch (with `also`); who owns them in a second
    # (over SSH, two round trips), before anything the journal says is believed.
    runs = None if after_interrupted else runs_request(1)
    wanted = also if runs is None else runs if also is None else runs | also
    listed = None if wanted is None else host.fetch(wanted)
    paths = [] if listed is None or after_interrupted else run_paths(listed)
    newest = paths[0] if paths else None
    check_state(host, *([newest] if newest else []))
    run = None if newest is None or listed is None else _fetched_run(host, listed, newest)
    if run is not None and run.damage is not None:
        # Whether it ended cannot be told: the operator decides, as for an interrupted run.
        raise JournalError(
            *run.damage.problems(), "`tune apply --after-interrupted` applies over it."
        )
    if run is not None and run.records and run.outcome == "interrupted" and wait_for_lock:
        wait_for_lock()
        run = existing_run(host, run.run_id, damaged=True)  # it may have ended meanwhile
        listed = None  # what `also` read was read before that run ended
    if run is not None and run.records and run.outcome == "interrupted":
        raise UnfinishedRun(run.run_id, len(run.steps), host.describe())
    if also is None or listed is None:
        return None
    if newest is not None:
        # Its bytes served this check only: the apply keeps what `also` read until the host's
        # reboot, and a wave's hosts' journals (hundreds of KB each) would add up.
        listed.contents.pop(newest, None)
    return listed


def _no_run(host: ReadableHost, run_id: str) -> HostError:
    return HostError(f"no run {run_id} on {host.describe()} (tune history lists them).")


def parse_run(run_id: str, data: bytes, path: str | None = None) -> Run:
    """A journal's bytes as a `Run` (what `read_run` reads, or a remote poll printed);
    `DamagedJournal` for damage other than a torn last line (see `read_journal`)."""
    run = read_journal(run_id, data, path)
    if run.damage is not None:
        raise run.damage
    return run


def read_journal(run_id: str, data: bytes, path: str | None = None) -> Run:
    """A journal's bytes as a `Run`, as far as they can be read.

    Each record is appended whole with its newline and synced, so a crash mid-append can leave
    only a torn LAST line (no newline yet, or a line that is not whole JSON): it is ignored, and
    the run reads as interrupted there. Any other damage stops the reading at that line, and
    `Run.damage` names it."""
    path = path or run_path(run_id)
    run = Run(run_id, size=len(data))
    lines = data.split(b"\n")[:-1]  # after the last newline: a torn record, or nothing
    seqs: set[int] = set()
    offset = 0
    for number, line in enumerate(lines, 1):
        try:
            record = parse_line(line)
            _fits(run, record, seqs)
        except RecordError as exc:
            if number < len(lines) or not _torn(line):
                run.damage = DamagedJournal(path, number, str(exc), run)
            else:
                run.torn_at = offset
            break
        offset += len(line) + 1
        run.records.append(record)
        if isinstance(record, RunStarted):
            run.header = record
        elif isinstance(record, StepRecord):
            seqs.add(record.seq)
    if run.damage is None and run.torn_at is None and offset < len(data):
        run.torn_at = offset
    if not run.records and run.damage is None and not _first_record_torn(data):
        run.damage = DamagedJournal(path, 1, _says_nothing(data), run)
        run.torn_at = None
    return run


# How every journal starts: the run record, synced before any other record, and any record
# before the write it describes.
_RUN_RECORD = b'{"type":"run"'


def _first_record_torn(data: bytes) -> bool:
    """Whether a journal without a whole record is what a crash in the middle of its first
    append leaves: the start of a run record, so nothing after it was written. Anything else
    (nothing at all, NUL bytes, other text) tells nothing of what the run changed: the journal
    is the only record of that, so it is damage, never a run of no changes. An empty journal
    is also what a crash in the instant between its creation and its first record leaves:
    tune cannot tell that from a journal emptied later, so the operator decides."""
    torn = b"".join(data.split(b"\n", 1)[0].split())  # JSON's blanks between tokens
    return bool(torn) and (torn.startswith(_RUN_RECORD) or _RUN_RECORD.startswith(torn))


def _says_nothing(data: bytes) -> str:
    if not data:
        what = "the journal is empty"
    elif not data.strip(b"\0\n"):
        what = f"the journal holds {len(data):,} NUL bytes and no record"
    else:
        what = f"the journal's {len(data):,} bytes hold no whole record, nor the start of one"
    return f"{what}, so what the run changed cannot be known from it"


def _torn(line: bytes) -> bool:
    """Whether a last line is what a crash mid-append leaves: not whole JSON."""
    try:
        json.loads(line.decode("utf-8"))
    except ValueError:
        return True
    except RecursionError:
        return False  # whole, but no record: damage
    return False


def _fits(run: Run, record: Record, seqs: set[int]) -> None:
    """What makes a record wrong where it stands, beyond its own fields."""
    if isinstance(record, RunStarted) != (not run.records):
        raise RecordError(
            "a second run record" if run.records else "a run journal starts with a run record"
        )
    if (
        isinstance(record, StepRecord)
        and not record.sealed
        and run.header
        and run.header.format > 1
    ):
        raise RecordError("the step record has no check")
    if isinstance(record, StepRecord) and record.seq in seqs:
        raise RecordError(f"step {record.seq} is recorded twice")
    if isinstance(record, STEP_MARKERS) and record.seq not in seqs:
        raise RecordError(f"a {record.TYPE} record for step {record.seq}, which is not recorded")
