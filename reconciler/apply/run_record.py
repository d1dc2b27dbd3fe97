"""What a run's journal keeps beyond the steps themselves, so `tune report` can explain the run
from the journal alone: the plan at the start (what was still to do at the next boot or in the
BIOS) and, for each step, why it was made (priority, reason) and the operations it performed."""

from __future__ import annotations

from typing import Any

from ..plan.model import Change, Plan
from .steps import Step


def plan_record(plan: Plan, applying: tuple[Step, ...]) -> dict[str, Any]:
    """The `plan` record: every change the plan had, which of them this run applies, the reboots
    already configured and the checks that failed (tune cannot fix those)."""
    ids = {step.id for step in applying}
    return {
        "changes": [c.to_json() | {"applied_now": c.id in ids} for c in plan.changes],
        "pending": [p.to_json() for p in plan.pending],
        "failed_checks": [c.to_json() for c in plan.failed_checks],
    }


def step_context(change: Change | None, step: Step) -> dict[str, Any]:
    """Fields added to a `step` record (the journal contract only grows)."""
    about: dict[str, Any] = {"operations": [op.describe() for op in step.do]}
    if change is not None:
        about |= {
            "priority": change.priority.value,
            "reason": change.reason,
            "phase": change.phase.value,
        }
        if change.fix:
            about["fix"] = change.fix
    return about


def contexts(plan: Plan, steps: tuple[Step, ...]) -> dict[str, dict[str, Any]]:
    changes = {c.id: c for c in plan.changes}
    return {step.id: step_context(changes.get(step.id), step) for step in steps}
