"""What tune last applied on a host (`tune check`): a view of the run journals that
`journal.parse_run` reads, fetched in batches with the rest of a check's files.

Everything lives under `/var/lib/tune` (inside `--root` for a snapshot, paths in `journal`):
`profile.yaml`, the resolved profile of the last successful apply, and `runs/<run-id>.jsonl`,
one journal per run. This module only reads; it parses `Files`, never the host.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..core.changes import JsonValue, Note, jsonable
from ..core.errors import JournalError
from ..core.files import Files, Request
from ..hosts.base import ReadableHost
from ..steps.state import PROFILE as STORED_PROFILE
from ..steps.state import RUN_SUFFIX, RUNS, run_paths, skipped_line, within_limit

__all__ = ["STORED_PROFILE", "AppliedRun", "AppliedStep", "JournalError"]


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
    # Knobs of the phase this run left for later (`--runtime-only` leaves the reboot phase)
    # that its plan would have changed, and those it left out (`apply --skip-missing`): tune
    # never set them, so they cannot drift. Empty for runs journaled before the plan record.
    not_applied: frozenset[str] = frozenset()

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


# Journals fetched per round trip while looking for the newest applied run: usually the first
# is it; a few rolled-back or interrupted runs on top cost one more batch, not one each.
JOURNAL_BATCH = 4


def fetch_journals(
    host: ReadableHost,
    listed: Files,
    until: Callable[[Files], AppliedRun | None] | None = None,
) -> Files:
    """The journal listing in `listed` (fetched with `runs_request`) and the journals it holds
    already (the newest), plus older ones fetched newest first, JOURNAL_BATCH per round trip,
    until an applied run turns up: what `latest_applied` needs (or `until`, which looks for
    another run: `runtime_applied`)."""
    runs = Files(listings={RUNS: listed.listing(RUNS)})
    paths = run_paths(runs)
    _keep(runs, listed, paths)
    pending = [p for p in paths if p not in runs.contents and p not in runs.errors]
    while pending and not _found(runs, until or latest_applied):
        batch, pending = pending[:JOURNAL_BATCH], pending[JOURNAL_BATCH:]
        _keep(runs, host.fetch(Request.of(whole=batch)), batch)
    return runs


def _keep(runs: Files, fetched: Files, paths: list[str]) -> None:
    runs.contents.update((p, fetched.contents[p]) for p in paths if p in fetched.contents)
    runs.errors.update((p, fetched.errors[p]) for p in paths if p in fetched.errors)


def _found(runs: Files, found: Callable[[Files], AppliedRun | None]) -> bool:
    try:
        return found(runs) is not None
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


def latest_applied(files: Files) -> AppliedRun | None:
    """The newest fetched run that ended `applied`; interrupted and rolled-back runs are
    skipped. Raises JournalError for a journal that is unreadable or not a journal."""
    return next(_applied_runs(files), None)


def runtime_applied(files: Files) -> AppliedRun | None:
    """The newest fetched run that ended `applied` and wrote the runtime phase (`--runtime-only`
    or both phases): None on a host only ever given `--reboot-phase` runs, whose runtime knobs
    no run applied, so none of them can have drifted."""
    return next((run for run in _applied_runs(files) if run.phase != "reboot"), None)


def _applied_runs(files: Files) -> Iterator[AppliedRun]:
    for path in run_paths(files):
        if path in files.errors:
            raise JournalError(f"{path}: cannot read run journal ({files.errors[path]}).")
        data = files.read(path)
        if data is None:
            continue
        run = applied_run(path, within_limit(path, data))
        if run is not None:
            yield run


@dataclass(frozen=True)
class LastRun:
    """The newest journaled run, whatever its outcome: what check says of a host on which no
    applied run is in effect."""

    profile: str  # "" where its journal does not say
    outcome: str  # as `journal.Run.outcome`: rolled-back, interrupted, ...
    run_id: str = ""
    steps: int = 0  # the steps its journal records

    @property
    def undone(self) -> bool:
        """Rolled back, so none of its changes are in effect (a rollback that failed, or an
        interrupted run, left some of them)."""
        return self.outcome in ("rolled-back", "boot-rolled-back")


def last_run(files: Files) -> LastRun | None:
    """The newest fetched run's profile and outcome, read as far as it can be."""
    from .journal import read_journal

    for path in run_paths(files):
        data = files.read(path)
        if data is not None:
            run = read_journal(posixpath.basename(path).removesuffix(RUN_SUFFIX), data, path)
            profile = run.header.profile if run.header is not None else ""
            return LastRun(profile, run.outcome, run.run_id, len(run.steps))
    return None


def applied_run(path: str, data: bytes) -> AppliedRun | None:
    """The run journaled in `data` (read by `journal.parse_run`), when its outcome is
    `applied`; None for one that was interrupted, rolled back or failed."""
    from ..steps.records import PlanRecord, StepUnsupported
    from .journal import parse_run  # the record types load only when a journal is read

    run = parse_run(posixpath.basename(path).removesuffix(RUN_SUFFIX), data, path)
    if run.header is None or run.outcome != "applied" or run.finished is None:
        return None
    try:
        finished_at = datetime.fromisoformat(run.finished)
    except ValueError:
        raise JournalError(f"{path}: end time {run.finished!r} is not ISO 8601.") from None
    if finished_at.tzinfo is None:  # the contract records UTC; never read it as local time
        finished_at = finished_at.replace(tzinfo=UTC)
    ids = {seq: step.id for seq, step in run.steps}
    left = LEAVES.get(run.header.phase, ())
    return AppliedRun(
        run_id=run.header.run_id,
        path=path,
        profile=run.header.profile,
        phase=run.header.phase,
        finished=run.finished,
        finished_at=finished_at,
        steps=tuple(
            AppliedStep(step.id, step.kind, step.target, jsonable(step.desired))
            for _, step in run.steps
        ),
        unsupported={ids[r.seq]: r.error for r in run.of_type(StepUnsupported)},
        not_applied=frozenset(
            str(change.get("id"))
            for plan in run.of_type(PlanRecord)[:1]
            for change in plan.changes
            if not change.get("applied_now") and change.get("phase") in left
        )
        | frozenset(i for plan in run.of_type(PlanRecord)[:1] for i in plan.left_out),
    )


# The knob phases a run of each phase (`orchestration.Job.phase`) leaves for a later run: the
# documented flow is `--runtime-only`, then `--reboot-phase` at a maintenance window. A runtime
# knob a reboot-phase run found wrong was applied by an earlier run or never; this run cannot
# tell which: the runs before it do (`runtime_not_applied`).
LEAVES = {"runtime": ("reboot",)}


def runtime_not_applied(files: Files, ids: Iterable[str]) -> frozenset[str]:
    """Of the runtime knobs `ids` that differ from the profile, those no run in effect applied:
    every one where no run that wrote the runtime phase ended applied (a host only ever given
    `--reboot-phase`), else those that run left out. The others were applied, so they drifted.
    `files`: the journals `fetch_journals(..., until=runtime_applied)` fetched. A journal that
    cannot be read tells nothing: every one counts as applied (a false alarm is cheaper than a
    silenced one)."""
    try:
        earlier = runtime_applied(files)
    except JournalError:
        return frozenset()
    if earlier is None:
        return frozenset(ids)
    return frozenset(i for i in ids if i in earlier.not_applied)
