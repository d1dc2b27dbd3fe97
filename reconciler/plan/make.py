"""The plan: a pure function of (profile, observation)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ..core.changes import Change, Note, Outcome, Phase, Plan, Priority
from ..kinds import boot_files
from ..profile.load import LoadedProfile
from .observe import Observation

PHASES = (Phase.RUNTIME, Phase.REBOOT)
PRIORITIES = (Priority.P0, Priority.P1, Priority.P2)


def make_plan(loaded: LoadedProfile, observed: Observation, with_persistence: bool = True) -> Plan:
    """`with_persistence` adds tune's boot-time files (`file:` changes), after every knob,
    without the lines of knobs this host does not have (`missing_ids`)."""
    profile = loaded.profile
    outcome = Outcome()
    for kind, spec in profile.work(with_persistence):
        if kind.persistence:  # `kinds.files`, imported only where a profile persists
            files_kind: Any = kind
            outcome.extend(files_kind.compare(spec, observed.files, missing_ids(outcome.changes)))
        else:
            outcome.extend(kind.compare(spec, observed.files))
    return Plan(
        profile=profile.name,
        host=observed.host,
        compared=tuple(sorted(outcome.changes, key=order)),
        pending=tuple(outcome.pending),
        checks=tuple(outcome.checks),
        notes=tuple(_located(n, loaded) for n in outcome.notes),
    )


def missing_ids(changes: Iterable[Change]) -> frozenset[str]:
    """The knobs a host does not have: skipped, so never kept for the next boot either (a
    sysctl.d line of a key the kernel lacks fails systemd-sysctl at every boot)."""
    return frozenset(c.id for c in changes if c.missing)


def order(change: Change) -> tuple[bool, int, int]:
    """Tune's boot-time files after every knob; then phase, then priority; within those the
    profile's order (sort is stable)."""
    return boot_files(change.kind), PHASES.index(change.phase), PRIORITIES.index(change.priority)


def _located(note: Note, loaded: LoadedProfile) -> Note:
    """Point notes about a keyed profile entry at its line (`sysctl:kernel.foo`)."""
    section, _, key = note.about.partition(":")
    where = loaded.positions.get((section, key))
    if where is None:
        return note
    return replace(note, message=f"{where[0]}:{where[1]}:{where[2]}: {note.message}")
