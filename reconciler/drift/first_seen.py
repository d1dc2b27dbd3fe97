"""When `tune check` first saw each drift, so "since" is the first sighting: the time of the
last apply says nothing about when a knob moved, and a time that changes on every run would
make each cron mail look new.

The record is a small JSON file in tune's state directory on the host checked (inside the
snapshot for `--root DIR`): `{"format": 1, "first_seen": {"sysctl:vm.swappiness": "<ISO>"}}`,
mode 0600 in a 0700 directory, like the rest of tune's state. It holds the ids drifted at the
last check only: a knob back in sync is forgotten, and drifts again from a new first sighting.
Only a host tune reaches as files here (this machine, a snapshot directory) keeps one; a check
over SSH or of an archive has no record and prints no "since".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime

from ..core.changes import Note
from ..core.errors import HostError
from ..hosts import trust
from ..hosts.base import Host
from ..hosts.directory import DirectoryHost
from ..steps.state import STATE
from .check import DriftReport

DIRECTORY = f"{STATE}/check"
RECORD = f"{DIRECTORY}/first-seen.json"
FORMAT = 1


def updated(previous: Mapping[str, str], drifting: Iterable[str], now: float) -> dict[str, str]:
    """Pure: each id drifting now, with its first sighting kept or, new, stamped `now`."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {knob: previous.get(knob, stamp) for knob in drifting}


def parse(data: bytes) -> dict[str, str]:
    """The record's ids and times; ValueError for anything that is not one tune wrote."""
    record = json.loads(data.decode("utf-8"))
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ValueError("not a record of first sightings")
    seen = record.get("first_seen")
    if not isinstance(seen, dict):
        raise ValueError("not a record of first sightings")
    for knob, when in seen.items():
        if not isinstance(when, str):
            raise ValueError(f"{knob}: not a time")
        datetime.fromisoformat(when)  # ValueError for anything else
    return dict(seen)


def render(first_seen: Mapping[str, str]) -> bytes:
    record = {"format": FORMAT, "first_seen": dict(sorted(first_seen.items()))}
    return (json.dumps(record, indent=1) + "\n").encode()


def remember(host: Host, report: DriftReport, now: float) -> DriftReport:
    """`report` with each drift's first sighting, the record on `host` brought up to date.
    A record that cannot be read or written costs its "since" times and a note, never the
    check: a check run by a user other than root still reports."""
    if not isinstance(host, DirectoryHost):
        return report
    notes: list[Note] = []
    try:
        previous, kept = _read(host)
    except UnkeptState as exc:
        notes.append(Note(f"First sightings of drift are not kept: {exc}", "check"))
        previous, kept = {}, False
    except (HostError, ValueError) as exc:
        notes.append(Note(f"{RECORD}: ignored, first sightings start again ({exc}).", "check"))
        previous, kept = {}, True
    first_seen = updated(previous, report.drift_ids(), now)
    # A host tune never applied to has no state directory, and a check (read-only) does not
    # make one: a snapshot, the bundled example hosts, stay as they were given.
    if kept and first_seen != previous:
        try:
            _write(host, first_seen)
        except HostError as exc:
            notes.append(Note(f"First sightings of drift are not kept: {exc}", "check"))
    return replace(report, first_seen=first_seen, notes=(*report.notes, *notes))


class UnkeptState(HostError):
    """Tune's state directories on the host are not tune's alone: nothing is written there."""


def _read(host: DirectoryHost) -> tuple[dict[str, str], bool]:
    """The first sightings recorded, and whether tune keeps state on this host at all."""
    try:
        caller, owned = host.owned([STATE, DIRECTORY, RECORD])
        # A directory another user could write to (or a link to one) is not tune's to write
        # in: the record is neither read nor replaced there.
        trust.check(caller, {path: owned[path] for path in (STATE, DIRECTORY)})
    except HostError as exc:
        raise UnkeptState(str(exc)) from exc
    # Only times are read from the record, but one planted by another user could still
    # backdate or hide a drift: the same trust as the rest of tune's state; in a directory of
    # tune's own it is replaced.
    trust.check(caller, {RECORD: owned[RECORD]}, files=[RECORD])
    if owned[RECORD] is None:
        return {}, owned[STATE] is not None
    data = host.read_file(RECORD)
    return ({} if data is None else parse(data)), True


def _write(host: DirectoryHost, first_seen: Mapping[str, str]) -> None:
    host.private_dir(DIRECTORY)
    host.put_file(RECORD, render(first_seen), 0o600)
