"""Profile entries: what every command counts as a *change*.

A profile entry (`cpu: {governor: performance}`) expands to one knob per subject (CPU, device,
IRQ); a change is an entry that differs, a write one knob written. A governor on 128 CPUs is one
change and 128 writes. The plan, apply, history, rollback, reports and rollouts count changes by
`entry`, here once, from a plan's changes or a run's journaled steps alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..core.changes import Change
from ..kinds import named
from ..steps.ops import Step

if TYPE_CHECKING:  # a plan names no journal record: apply's and history's modules import them
    from ..steps.records import StepRecord


def of_subjects(kind: str, subject: str) -> bool:
    """Whether a knob of `subject` (a CPU, a device) is one of an entry of many."""
    if not subject:
        return False
    known = named(kind)
    return known is None or not known.entry_per_subject


def entry_of(kind: str, knob: str, setting: str, subject: str) -> tuple[object, ...]:
    """What the knobs of one profile entry share: their kind and setting, or the knob (`id`)."""
    return (kind, setting) if of_subjects(kind, subject) else (knob,)


def entry(change: Change) -> tuple[object, ...]:
    return entry_of(change.kind, change.id, change.setting, change.subject)


def entries(changes: Iterable[Change]) -> int:
    """How many profile entries `changes` come from (128 CPUs' governors are one)."""
    return len({entry(c) for c in changes})


def step_entries(steps: Iterable[Step], changes: Iterable[Change]) -> int:
    """How many profile entries `steps` change, by the plan's `changes` they make (a step of no
    change, a boot entry, is one of its own)."""
    by_id = {c.id: c for c in changes}
    return len({entry(by_id[s.id]) if s.id in by_id else (s.id,) for s in steps})


def journaled_entries(records: Iterable[StepRecord]) -> int:
    """How many profile entries a run's journaled steps change (each step names its change's
    setting and subject; one journaled before steps did is an entry of its own)."""
    return len(
        {entry_of(r.step.kind, r.step.id, r.about.setting, r.about.subject) for r in records}
    )
