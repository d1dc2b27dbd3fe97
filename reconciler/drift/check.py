"""`tune check`: how a host has drifted from its profile, for cron and monitoring.

Two halves, so a fleet runner can call them per host: `gather` reads (the stored profile when
none is given, the observation and the run journal names in one batch, then journals newest
first until an applied run turns up), and `judge` is a pure function of what was read.

A difference from the profile (`make_plan`, not a second diff) is one of three things, kept
apart because only the first is news to page someone for:
- drift: a knob tune applied, or found in sync, has moved;
- not applied: a knob of a phase no applied run in effect covered (`--runtime-only` leaves the
  reboot phase; a host only ever given `--reboot-phase` runs, the runtime phase; a rolled-back
  run leaves everything), or a parameter waiting for a reboot;
- a failed check: an audit-only expectation tune cannot fix (`kernel >= 6.14`).
A host with no run journal at all, or whose newest run was interrupted, has no history to tell
them apart: every difference is drift.
With `since_apply`, drift also covers every knob whose value differs from what the newest
applied run wrote. Nothing here writes to the host or takes a lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..apply import applied
from ..apply.applied import AppliedRun
from ..core.changes import Change, CheckResult, JsonValue, Knob, Note, Pending, Phase, Plan
from ..core.errors import HostError, JournalError, UnfinishedRun
from ..core.files import Files, Request
from ..hosts.base import ReadableHost
from ..hosts.directory import DirectoryHost
from ..plan.make import make_plan
from ..plan.observe import IDENTITY, Observation, observation, request
from ..profile.load import LoadedProfile, load_profile, load_profile_text
from ..steps import state


class Since:
    """How a knob stands against the newest applied run (with `--since-apply`)."""

    CHANGED = "changed-after-apply"  # differs from what tune wrote
    AS_APPLIED = "as-applied"  # still what tune wrote: the host moved, or the profile did
    NOT_IN_RUN = "not-in-run"  # tune did not write it in that run


@dataclass(frozen=True)
class Changed(Knob):
    """A knob whose value is no longer what the newest applied run wrote."""

    kind: str
    target: str
    current: JsonValue
    written: JsonValue

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "current": self.current,
            "written": self.written,
        }


class CheckStatus:
    """A checked host, as `--format json` and the fleet table name it, most urgent first."""

    DRIFT = "drift"
    FAILING_CHECKS = "failing-checks"
    NOT_APPLIED = "not-applied"
    IN_SYNC = "in-sync"


@dataclass(frozen=True)
class DriftReport:
    """What `tune check` found on one host."""

    plan: Plan
    last_apply: AppliedRun | None
    since_apply: bool
    changed: tuple[Changed, ...]  # only with since_apply
    notes: tuple[Note, ...]  # the plan's notes and the check's own
    # Knob ids no applied run in effect set (see the module's docstring): not drift.
    unapplied: frozenset[str] = frozenset()
    strict: bool = False  # failed checks need attention too (`--strict`)
    undone: bool = False  # runs are recorded, none that applied is in effect (rolled back)
    # False where no profile was given or stored (a rollback took it away): nothing compared,
    # so the plan's empty counts say nothing about the host.
    compared: bool = True
    # Knob or check id -> when `tune check` first saw it drift (ISO 8601 UTC), where the host
    # keeps that record (`first_seen`); empty where it cannot.
    first_seen: Mapping[str, str] = field(default_factory=dict)

    @property
    def drift(self) -> tuple[Change, ...]:
        """The plan's changes to knobs tune applied or found in sync; not the optional knobs
        the last apply found the kernel refuses (they cannot be set here, so cannot drift)."""
        return tuple(c for c in self.plan.changes if self.drifted(c))

    def drifted(self, change: Change) -> bool:
        return self._differs(change) and change.id not in self.unapplied

    @property
    def not_applied(self) -> tuple[Change, ...]:
        """The plan's changes to knobs of a phase no applied run in effect covered; not those
        the running kernel still has until a reboot (a rolled-back boot configuration): they
        are pending a reboot (`pending`), not absent."""
        waiting = {p.id for p in self.plan.pending}
        return tuple(
            c
            for c in self.plan.changes
            if self._differs(c) and c.id in self.unapplied and c.id not in waiting
        )

    def _differs(self, change: Change) -> bool:
        unsupported = self.last_apply.unsupported if self.last_apply is not None else {}
        return not change.in_sync and change.id not in unsupported

    @property
    def failed_checks(self) -> tuple[CheckResult, ...]:
        return self.plan.failed_checks

    @property
    def pending(self) -> tuple[Pending, ...]:
        return self.plan.pending

    @property
    def needs_attention(self) -> bool:
        """Drift, a knob changed after apply, or (`--strict`) a failed check: exit 2. Knobs
        not applied and pending reboots are reported, never alarming."""
        return bool(self.drift or self.changed or (self.strict and self.failed_checks))

    @property
    def status(self) -> str:
        if self.drift or self.changed:
            return CheckStatus.DRIFT
        if self.failed_checks:
            return CheckStatus.FAILING_CHECKS
        # Nothing compared (no profile given or stored) is not "in sync": no run is in effect.
        if self.not_applied or self.pending or not self.compared:
            return CheckStatus.NOT_APPLIED
        return CheckStatus.IN_SYNC

    def since(self, change_id: str) -> str | None:
        """How a knob stands against the last applied run; None without `since_apply`."""
        if not self.since_apply or self.last_apply is None:
            return None
        if any(c.id == change_id for c in self.changed):
            return Since.CHANGED
        written = {s.id for s in self.last_apply.steps}
        return Since.AS_APPLIED if change_id in written else Since.NOT_IN_RUN

    def drift_ids(self) -> list[str]:
        """Every id that is drift now: what the record of first sightings keeps."""
        ids = [c.id for c in self.drift] + [c.id for c in self.changed]
        return list(dict.fromkeys(ids + [c.id for c in self.failed_checks]))

    def to_json(self) -> dict[str, Any]:
        drift = []
        for change in self.drift:
            item = change.to_json() | {"first_seen": self.first_seen.get(change.id)}
            since = self.since(change.id)
            if since is not None:
                item["since_apply"] = since
            drift.append(item)
        return {
            "profile": self.plan.profile,
            "host": self.plan.host.to_json(),
            "status": self.status,
            # False: no profile to compare (given or stored); the lists and counts are empty
            # because nothing was compared, not because all is well.
            "compared": self.compared,
            # True: runs are recorded, but none that applied is in effect (rolled back).
            "undone": self.undone,
            "last_apply": self.last_apply.to_json() if self.last_apply else None,
            "drift": drift,
            "not_applied": [c.to_json() for c in self.not_applied],
            "failed_checks": [
                c.to_json() | {"first_seen": self.first_seen.get(c.id)} for c in self.failed_checks
            ],
            "changed_after_apply": [
                c.to_json() | {"first_seen": self.first_seen.get(c.id)} for c in self.changed
            ]
            if self.since_apply
            else None,
            "pending": [p.to_json() for p in self.pending],
            "in_sync": len(self.plan.in_sync),
            "notes": [n.to_json() for n in self.notes],
        }


@dataclass(frozen=True)
class Gathered:
    """Everything `judge` needs from one host."""

    loaded: LoadedProfile | None  # None: no profile stored, the runs recorded were undone
    observed: Observation
    runs: Files  # the journal listing and the journals fetched, newest first
    with_persistence: bool = True  # judge tune's boot-time files too


def gather(
    host: ReadableHost,
    profile_path: str | None,
    with_persistence: bool = True,
    digest: str | None = None,
) -> Gathered:
    """One batch reads the observation, the journal names and the newest journals; older
    journals cost one more batch each JOURNAL_BATCH, only while no applied run turned up.
    `digest`: what the profile file must hash to (`load_profile`)."""
    loaded = load_profile(profile_path, digest) if profile_path else stored_profile(host)
    wanted = request(loaded.profile, with_persistence) if loaded else IDENTITY
    files = host.fetch(wanted | state.runs_request(applied.JOURNAL_BATCH))
    # Past the newest applied run where that one wrote the reboot phase alone: whether a run
    # before it applied the runtime phase tells drift from never applied.
    runs = applied.fetch_journals(host, files, until=applied.runtime_applied)
    if loaded is None and not state.run_paths(runs):
        raise no_profile(host.describe())
    return Gathered(loaded, observation(host, files), runs, with_persistence)


def no_profile(host: str) -> HostError:
    return HostError(
        f"{host}: no profile has been applied here ({applied.STORED_PROFILE} does not exist); "
        "give PROFILE to check against."
    )


def stored_profile(host: ReadableHost) -> LoadedProfile | None:
    """The resolved profile the last successful apply left on the host; None where there is
    none (never applied, or a rollback took it away)."""
    path = applied.STORED_PROFILE
    files = host.fetch(Request.of(whole=[path]))
    if path in files.errors:
        raise HostError(f"{path}: cannot read the applied profile ({files.errors[path]}).")
    data = files.read(path)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise HostError(f"{path}: the applied profile is not UTF-8 text.") from None
    return load_profile_text(text, location(host, path))


def location(host: ReadableHost, path: str) -> str:
    """A host path as the operator can open it: inside the snapshot, or `host:path`."""
    if isinstance(host, DirectoryHost):
        return path if str(host.root) == "/" else str(host.root) + path
    return f"{host.name}:{path}"


def judge(gathered: Gathered, *, since_apply: bool, strict: bool = False) -> DriftReport:
    """Pure: the plan, the last applied run, what tune never applied, and (with
    `since_apply`) what changed after the last apply."""
    notes: list[Note] = []
    try:
        last = applied.latest_applied(gathered.runs)
        newest = applied.last_run(gathered.runs) if last is None else None
        undone = newest is not None and newest.undone
    except JournalError as exc:
        if since_apply:
            raise
        last, newest, undone = None, None, False  # no history to go by: all is drift
        notes.append(Note(f"{exc} Drift is shown without the time of the last apply.", "check"))
    if gathered.loaded is None and newest is not None and newest.outcome == "interrupted":
        # The first apply was killed: its writes are on the host and nothing stored says
        # what it meant; as apply says it (exit 5), with the command that undoes them.
        source = gathered.observed.host.source
        raise UnfinishedRun(newest.run_id, newest.steps, source)
    if gathered.loaded is None and not undone:
        raise no_profile(gathered.observed.host.source)  # the first apply never finished
    if gathered.loaded is None:
        profile = newest.profile if newest is not None else ""
        plan = Plan(profile, gathered.observed.host, (), (), (), ())
    else:
        plan = make_plan(gathered.loaded, gathered.observed, gathered.with_persistence)
    notes[:0] = plan.notes
    if undone:
        notes.append(Note(nothing_in_effect(gathered.runs), "check"))
    changed: tuple[Changed, ...] = ()
    if last is not None:
        notes += last.unsupported_notes()
    if since_apply and last is None:
        notes.append(Note("No applied run is recorded on this host; nothing to compare.", "check"))
    elif since_apply and last is not None:
        changed, unseen = changed_after(plan, last)
        if unseen:
            notes.append(
                Note(
                    f"{len(unseen)} knobs that run {last.run_id} wrote are not in this "
                    f"profile or not on this host now, so not compared: {', '.join(unseen[:5])}"
                    + (", ..." if len(unseen) > 5 else "")
                    + ".",
                    "check",
                )
            )
    if undone:
        unapplied = frozenset(c.id for c in plan.changes)
    else:
        unapplied = last.not_applied if last is not None else frozenset()
    if last is not None and last.phase == "reboot":
        runtime = (c.id for c in plan.changes if c.phase is Phase.RUNTIME)
        unapplied |= applied.runtime_not_applied(gathered.runs, runtime)
    return DriftReport(
        plan,
        last,
        since_apply,
        changed,
        tuple(notes),
        unapplied,
        strict,
        undone,
        compared=gathered.loaded is not None,
    )


def nothing_in_effect(runs: Files) -> str:
    newest = state.run_paths(runs)[0]
    return (
        f"No run tune applied is in effect here (the newest, {newest}, was rolled back): "
        "every difference from the profile is not applied, none is drift."
    )


def changed_after(plan: Plan, run: AppliedRun) -> tuple[tuple[Changed, ...], list[str]]:
    """Knobs whose observed value differs from what `run` wrote, and the ids it wrote that the
    plan does not cover. A cmdline parameter counts by what the next boot will pass, which is
    what apply writes, pending or not."""
    current: dict[str, JsonValue] = {c.id: c.to_json()["current"] for c in plan.compared}
    current |= {p.id: p.to_json()["configured"] for p in plan.pending}
    written = {step.id: step for step in run.steps}  # a later step for the same knob wins
    changed, unseen = [], []
    for knob, step in written.items():
        if knob not in current:
            unseen.append(knob)
        elif current[knob] != step.desired:
            changed.append(Changed(step.kind, step.target, current[knob], step.desired))
    return tuple(changed), unseen


def run_check(
    host: ReadableHost,
    profile_path: str | None,
    *,
    since_apply: bool,
    strict: bool = False,
    with_persistence: bool = True,
    digest: str | None = None,
) -> DriftReport:
    gathered = gather(host, profile_path, with_persistence, digest)
    return judge(gathered, since_apply=since_apply, strict=strict)
