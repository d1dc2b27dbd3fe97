"""The run journal on the target: `/var/lib/tune/runs/<run-id>.jsonl`, one fsynced JSON record
per line, mode 0600, written through the host so it lives where the changes are.

Records (the contract `tune check --since-apply` reads; see README "The run journal"):
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
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..errors import HostError, UnfinishedRun
from ..hosts.base import Host, ReadableHost
from ..hosts.bounded import size_text
from ..hosts.files import MAX_STATE_BYTES, Request
from .steps import Step
from .trust import check

STATE = "/var/lib/tune"
RUNS = f"{STATE}/runs"
PROFILE = f"{STATE}/profile.yaml"
# In a directory only root can write: in /run/lock (1777 on Debian) any user could plant a link
# there, or hold the lock with a pid of their choosing.
LOCK = "/run/tune/tune.lock"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_run_id(now: datetime | None = None) -> str:
    """Sorts by time: `YYYYMMDDTHHMMSSZ-<6 hex>`, the hex being the microsecond and one random
    digit. Two runs in one second happen (a scripted apply after another, an apply over an
    interrupted one) and which is newer decides what `tune rollback` undoes: a random suffix
    alone made it pick the earlier run half the time."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{now.microsecond:05x}{secrets.randbelow(16):x}"


def run_path(run_id: str) -> str:
    return f"{RUNS}/{run_id}.jsonl"


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
        journal.record(
            "run",
            run_id=journal.run_id,
            started=now_iso(),
            profile=profile,
            phase=phase,
            host=host_name,
            boot_id=boot_id,
        )
        return journal

    def record(self, record_type: str, /, **fields: Any) -> None:
        line = json.dumps({"type": record_type, **fields}, separators=(",", ":")) + "\n"
        self.host.append(self.path, line.encode(), sync=self.sync)

    def step(self, seq: int, step: Step, **about: Any) -> None:
        """`about`: why the step is made (priority, reason, operations), for `tune report`."""
        self.record("step", seq=seq, **about, **step.to_json())

    def creates(self, seq: int, directories: list[str]) -> None:
        """Journal the directories step `seq` is about to create, before it does."""
        if directories:
            self.record("mkdir", seq=seq, paths=directories)
            self.made.setdefault(seq, []).extend(directories)

    def end(self, outcome: str) -> None:
        self.record("end", outcome=outcome, finished=now_iso())


@dataclass
class Run:
    """A run as read back from its journal."""

    run_id: str
    header: dict[str, Any]
    steps: list[tuple[int, Step]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        """The last `end` record's outcome, or "interrupted" when the file stops elsewhere."""
        last = self.records[-1] if self.records else {}
        return str(last.get("outcome")) if last.get("type") == "end" else "interrupted"

    @property
    def finished(self) -> str | None:
        last = self.records[-1] if self.records else {}
        return last.get("finished") if last.get("type") == "end" else None

    @property
    def unsupported(self) -> list[str]:
        """One line for each optional step the kernel refused, which the run skipped."""
        ids = {seq: step.id for seq, step in self.steps}
        return [
            skipped_line(ids.get(int(r.get("seq", -1)), "?"), str(r.get("error")))
            for r in self.records
            if r.get("type") == "unsupported"
        ]

    @property
    def made(self) -> dict[int, list[str]]:
        """Step seq -> the directories its writes created (`Journal.creates`)."""
        made: dict[int, list[str]] = {}
        for record in self.records:
            if record.get("type") == "mkdir":
                made.setdefault(int(record.get("seq", -1)), []).extend(record.get("paths", ()))
        return made

    @property
    def profile_prior(self) -> tuple[bool, str | None]:
        """(whether this run replaced profile.yaml, the text it had before)."""
        for record in self.records:
            if record.get("type") == "profile":
                return True, record.get("prior")
        return False, None


def skipped_line(knob: str, refused: str) -> str:
    return f"{knob} is not supported on this host, skipped (optional): {refused}"


class JournalError(HostError):
    """A run journal that exists but cannot be read or understood."""


def within_limit(path: str, data: bytes) -> bytes:
    """A journal's bytes as read (whole reads stop one byte past MAX_STATE_BYTES), refused when
    it is larger than tune reads."""
    if len(data) > MAX_STATE_BYTES:
        raise JournalError(
            f"{path}: larger than {size_text(MAX_STATE_BYTES)}, the most tune reads of a run "
            "journal; it is not one tune wrote: move it out of the way to go on."
        )
    return data


def run_ids(host: ReadableHost) -> list[str]:
    listing = host.fetch(Request(listings=frozenset([RUNS]))).listing(RUNS)
    names = [p.rsplit("/", 1)[1] for p in listing if p.endswith(".jsonl")]
    return sorted(n.removesuffix(".jsonl") for n in names)


def read_run(host: ReadableHost, run_id: str) -> Run | None:
    path = run_path(run_id)
    files = host.fetch(Request.of(whole=[path]))
    if path in files.errors:
        raise JournalError(f"{path}: cannot read run journal ({files.errors[path]}).")
    data = files.read(path)
    return None if data is None else parse_run(run_id, within_limit(path, data))


def existing_run(host: ReadableHost, run_id: str) -> Run:
    """The run `run_id`; HostError when the host has no such run."""
    run = read_run(host, run_id)
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


def trusted_run(host: Host, run_id: str) -> Run:
    """The run `run_id`, once its journal and the directories above it pass `check_state`."""
    check_state(host, run_path(run_id))
    return existing_run(host, run_id)


def rolled_back_run(host: Host, run_id: str | None) -> Run:
    """The one run `apply.rollback` restores (the newest by default), once trusted."""
    return trusted_run(host, _chosen_id(host, run_id, "roll back")[0])


def rollback_chain(host: Host, run_id: str | None) -> list[Run]:
    """The runs `tune rollback` restores, newest first: the run `run_id`; by default the newest
    run and every interrupted run right before it (one applied over an interrupted one, with
    `--after-interrupted` or by a tune that did not stop there), so no change stays behind."""
    chosen, ids = _chosen_id(host, run_id, "roll back")
    chain = [trusted_run(host, chosen)]
    for earlier in reversed(ids[:-1] if run_id is None else []):
        run = trusted_run(host, earlier)
        if run.outcome != "interrupted":
            break
        chain.append(run)
    return chain


def before_apply(host: Host, *, after_interrupted: bool = False, locked: bool = True) -> None:
    """What every engine checks before a new run: tune's state is trusted (`check_state`) and,
    unless the operator said `--after-interrupted`, the newest run ended: `UnfinishedRun` when
    it stopped without an `end` record (killed, the power lost), since its changes stay on the
    host and a new run over them would hide them. `locked`: whether this runs with the host's
    lock held (locally it is; over SSH the script takes it later, so a run may be going)."""
    ids = run_ids(host)
    newest = ids[-1] if ids and not after_interrupted else None
    check_state(host, *([run_path(newest)] if newest else []))  # one round trip over SSH
    run = None if newest is None else existing_run(host, newest)
    if run is not None and run.outcome == "interrupted":
        raise UnfinishedRun(run.run_id, len(run.steps), host.describe(), locked=locked)


def _no_run(host: ReadableHost, run_id: str) -> HostError:
    return HostError(f"no run {run_id} on {host.describe()} (tune history lists them).")


def parse_run(run_id: str, data: bytes) -> Run:
    """A journal's bytes as a `Run` (what `read_run` reads, or a remote poll printed)."""
    run = Run(run_id, {})
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by a crash mid-write: its step was never written
        if not isinstance(record, dict):
            continue
        run.records.append(record)
        if record.get("type") == "run" and not run.header:
            run.header = record
        elif record.get("type") == "step":
            run.steps.append((int(record["seq"]), Step.from_json(record)))
    return run
