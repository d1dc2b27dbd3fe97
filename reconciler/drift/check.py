"""`tune check`: how a host has drifted from its profile, for cron and monitoring.

Two halves, so a fleet runner can call them per host: `gather` reads (the stored profile when
none is given, the observation and the run journal names in one batch, then journals newest
first until an applied run turns up), and `judge` is a pure function of what was read. Drift is
the plan's changes and failed checks (`make_plan`, not a second diff); with `since_apply` it is
also every knob whose value differs from what the newest applied run wrote.
Nothing here writes to the host or takes a lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..apply import applied
from ..apply.applied import AppliedRun
from ..errors import HostError, JournalError
from ..hosts.base import ReadableHost
from ..hosts.directory import DirectoryHost
from ..hosts.files import Files, Request
from ..plan.make import make_plan
from ..plan.model import Change, CheckResult, JsonValue, Knob, Note, Pending, Plan
from ..plan.observe import Observation, observation, request
from ..profile.load import LoadedProfile, load_profile, load_profile_text


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


@dataclass(frozen=True)
class DriftReport:
    """What `tune check` found on one host."""

    plan: Plan
    last_apply: AppliedRun | None
    since_apply: bool
    changed: tuple[Changed, ...]  # only with since_apply
    notes: tuple[Note, ...]  # the plan's notes and the check's own

    @property
    def drift(self) -> tuple[Change, ...]:
        """The plan's changes, less the optional knobs the last apply found the kernel refuses
        (they cannot be set on this host, so they cannot drift)."""
        return tuple(c for c in self.plan.changes if self.drifted(c))

    def drifted(self, change: Change) -> bool:
        unsupported = self.last_apply.unsupported if self.last_apply is not None else {}
        return not change.in_sync and change.id not in unsupported

    @property
    def failed_checks(self) -> tuple[CheckResult, ...]:
        return self.plan.failed_checks

    @property
    def pending(self) -> tuple[Pending, ...]:
        return self.plan.pending

    @property
    def in_sync(self) -> bool:
        """Pending reboots alone keep a host in sync."""
        return not self.drift and not self.failed_checks and not self.changed

    def since(self, change_id: str) -> str | None:
        """How a knob stands against the last applied run; None without `since_apply`."""
        if not self.since_apply or self.last_apply is None:
            return None
        if any(c.id == change_id for c in self.changed):
            return Since.CHANGED
        written = {s.id for s in self.last_apply.steps}
        return Since.AS_APPLIED if change_id in written else Since.NOT_IN_RUN

    def to_json(self) -> dict[str, Any]:
        drift = []
        for change in self.drift:
            item = change.to_json()
            since = self.since(change.id)
            if since is not None:
                item["since_apply"] = since
            drift.append(item)
        return {
            "profile": self.plan.profile,
            "host": self.plan.host.to_json(),
            "status": "in-sync" if self.in_sync else "drift",
            "last_apply": self.last_apply.to_json() if self.last_apply else None,
            "drift": drift,
            "failed_checks": [c.to_json() for c in self.failed_checks],
            "changed_after_apply": [c.to_json() for c in self.changed]
            if self.since_apply
            else None,
            "pending": [p.to_json() for p in self.pending],
            "in_sync": len(self.plan.in_sync),
            "notes": [n.to_json() for n in self.notes],
        }


@dataclass(frozen=True)
class Gathered:
    """Everything `judge` needs from one host."""

    loaded: LoadedProfile
    observed: Observation
    runs: Files  # the journal listing and the journals fetched, newest first
    with_persistence: bool = True  # judge tune's boot-time files too


def gather(host: ReadableHost, profile_path: str | None, with_persistence: bool = True) -> Gathered:
    """One batch reads the observation, the journal names and the newest journals; older
    journals cost one more batch each JOURNAL_BATCH, only while no applied run turned up."""
    loaded = load_profile(profile_path) if profile_path else stored_profile(host)
    wanted = request(loaded.profile, with_persistence) | applied.runs_request(applied.JOURNAL_BATCH)
    files = host.fetch(wanted)
    runs = applied.fetch_journals(host, files)
    return Gathered(loaded, observation(host, files), runs, with_persistence)


def stored_profile(host: ReadableHost) -> LoadedProfile:
    """The resolved profile the last successful apply left on the host."""
    path = applied.STORED_PROFILE
    files = host.fetch(Request.of(whole=[path]))
    if path in files.errors:
        raise HostError(f"{path}: cannot read the applied profile ({files.errors[path]}).")
    data = files.read(path)
    if data is None:
        raise HostError(
            f"{host.describe()}: no profile has been applied here ({path} does not exist); "
            "give PROFILE to check against."
        )
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


def judge(gathered: Gathered, *, since_apply: bool) -> DriftReport:
    """Pure: the plan, the last applied run, and (with `since_apply`) what changed after it."""
    plan = make_plan(gathered.loaded, gathered.observed, gathered.with_persistence)
    notes = list(plan.notes)
    try:
        last = applied.latest_applied(gathered.runs)
    except JournalError as exc:
        if since_apply:
            raise
        last = None
        notes.append(Note(f"{exc} Drift is shown without the time of the last apply.", "check"))
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
    return DriftReport(plan, last, since_apply, changed, tuple(notes))


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
    with_persistence: bool = True,
) -> DriftReport:
    return judge(gather(host, profile_path, with_persistence), since_apply=since_apply)
