"""What tune last applied on a host, read back from the state `tune apply` keeps there.

Everything lives under `/var/lib/tune` (inside `--root` for a snapshot):
`profile.yaml`, the resolved profile of the last successful apply, and `runs/<run-id>.jsonl`,
one journal per run: a `run` record, a `step` record before each write, and an `end` record
with the outcome. This module only reads; it parses `Files`, never the host.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..hosts.base import ReadableHost
from ..hosts.files import Files, Request
from ..plan.model import Note
from .journal import JournalError, skipped_line, within_limit

STATE = "/var/lib/tune"
STORED_PROFILE = STATE + "/profile.yaml"
RUNS = STATE + "/runs"
RUN_SUFFIX = ".jsonl"

# A value as plan JSON writes it: a string, a list of lines, or null for absent.
JsonValue = str | list[str] | None


@dataclass(frozen=True)
class AppliedStep:
    id: str  # "sysctl:kernel.numa_balancing", as in plan JSON
    kind: str
    target: str
    desired: JsonValue  # what the run wrote


@dataclass(frozen=True)
class AppliedRun:
    """A run whose end record says `applied`."""

    run_id: str
    path: str
    profile: str
    phase: str
    finished: str  # ISO 8601 UTC, as recorded
    finished_at: datetime
    steps: tuple[AppliedStep, ...]
    # Optional knobs the kernel refused, which the run skipped: knob id -> the refusal.
    unsupported: dict[str, str] = field(default_factory=dict)

    def unsupported_notes(self) -> list[Note]:
        """One line for each knob this run found the kernel refuses: not drift, nothing to do."""
        return [
            Note(skipped_line(knob, refused) + f" (run {self.run_id}).", knob)
            for knob, refused in self.unsupported.items()
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "profile": self.profile,
            "phase": self.phase,
            "finished": self.finished,
            "steps": len(self.steps),
        }


def runs_request(newest: int = 0) -> Request:
    """The names of the run journals, and the contents of the `newest` ones; the others are
    fetched newest first, as needed."""
    journals = [(f"{RUNS}/*{RUN_SUFFIX}", newest)] if newest else []
    return Request.of(listings=[RUNS], newest=journals)


# Journals fetched per round trip while looking for the newest applied run: usually the first
# is it; a few rolled-back or interrupted runs on top cost one more batch, not one each.
JOURNAL_BATCH = 4


def fetch_journals(host: ReadableHost, listed: Files) -> Files:
    """The journal listing in `listed` (fetched with `runs_request`) and the journals it holds
    already (the newest), plus older ones fetched newest first, JOURNAL_BATCH per round trip,
    until an applied run turns up: what `latest_applied` needs."""
    runs = Files(listings={RUNS: listed.listing(RUNS)})
    paths = run_paths(runs)
    _keep(runs, listed, paths)
    pending = [p for p in paths if p not in runs.contents and p not in runs.errors]
    while pending and not _found(runs):
        batch, pending = pending[:JOURNAL_BATCH], pending[JOURNAL_BATCH:]
        _keep(runs, host.fetch(Request.of(whole=batch)), batch)
    return runs


def _keep(runs: Files, fetched: Files, paths: list[str]) -> None:
    runs.contents.update((p, fetched.contents[p]) for p in paths if p in fetched.contents)
    runs.errors.update((p, fetched.errors[p]) for p in paths if p in fetched.errors)


def _found(runs: Files) -> bool:
    try:
        return latest_applied(runs) is not None
    except JournalError:
        return True  # the caller decides what an unreadable journal means


def unsupported_notes(host: ReadableHost, listed: Files) -> list[Note]:
    """What the newest applied run found the kernel refuses (optional knobs it skipped); an
    unreadable journal says nothing here (`tune check` reports it)."""
    try:
        last = latest_applied(fetch_journals(host, listed))
    except JournalError:
        return []
    return last.unsupported_notes() if last is not None else []


def run_paths(files: Files) -> list[str]:
    """Journal paths from the listing, newest first (run ids sort by time)."""
    paths = [
        p for p in files.listing(RUNS) if posixpath.dirname(p) == RUNS and p.endswith(RUN_SUFFIX)
    ]
    return sorted(paths, key=posixpath.basename, reverse=True)


def latest_applied(files: Files) -> AppliedRun | None:
    """The newest fetched run that ended `applied`; interrupted and rolled-back runs are
    skipped. Raises JournalError for a journal that is unreadable or not a journal."""
    for path in run_paths(files):
        if path in files.errors:
            raise JournalError(f"{path}: cannot read run journal ({files.errors[path]}).")
        data = files.read(path)
        if data is None:
            continue
        run = parse_run(path, within_limit(path, data))
        if run is not None:
            return run
    return None


def parse_run(path: str, data: bytes) -> AppliedRun | None:
    """An applied run, or None for one that was interrupted, rolled back or failed."""
    # Each record is fsynced with its newline; text after the last newline is a record cut
    # short by a crash, so the run ended there without an end record.
    lines = data.split(b"\n")[:-1]
    records = [_record(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
    if not records:
        return None
    head, end = records[0], records[-1]
    if head.get("type") != "run":
        raise JournalError(f"{path}:1: a run journal starts with a run record.")
    if end.get("type") != "end" or end.get("outcome") != "applied":
        return None
    finished = _text(path, end, "finished")
    try:
        finished_at = datetime.fromisoformat(finished)
    except ValueError:
        raise JournalError(f"{path}: end time {finished!r} is not ISO 8601.") from None
    if finished_at.tzinfo is None:  # the contract records UTC; never read it as local time
        finished_at = finished_at.replace(tzinfo=UTC)
    steps = [_step(path, r) for r in _steps(records)]
    ids = {r.get("seq"): step.id for r, step in zip(_steps(records), steps, strict=True)}
    unsupported = {
        ids[r.get("seq")]: str(r.get("error"))
        for r in records
        if r.get("type") == "unsupported" and r.get("seq") in ids
    }
    return AppliedRun(
        run_id=_text(path, head, "run_id"),
        path=path,
        profile=_text(path, head, "profile"),
        phase=_text(path, head, "phase"),
        finished=finished,
        finished_at=finished_at,
        steps=tuple(steps),
        unsupported=unsupported,
    )


def _steps(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("type") == "step"]


def _record(path: str, number: int, line: bytes) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise JournalError(f"{path}:{number}: not a JSON record ({exc}).") from None
    if not isinstance(record, dict):
        raise JournalError(f"{path}:{number}: a journal record is a JSON object.")
    return record


def _text(path: str, record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise JournalError(f"{path}: {record.get('type')} record has no {key}.")
    return value


def _step(path: str, record: dict[str, Any]) -> AppliedStep:
    desired = record.get("desired")
    is_lines = isinstance(desired, list) and all(isinstance(x, str) for x in desired)
    if not (desired is None or isinstance(desired, str) or is_lines):
        raise JournalError(f"{path}: step {record.get('id')!r} has an unreadable desired value.")
    return AppliedStep(
        id=_text(path, record, "id"),
        kind=_text(path, record, "kind"),
        target=_text(path, record, "target"),
        desired=desired,
    )
