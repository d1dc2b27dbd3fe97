"""What a run's journal keeps beyond the steps themselves, so `tune report` can explain the run
from the journal alone: the plan at the start (what was still to do at the next boot or in the
BIOS) and, for each step, why it was made (priority, reason) and the operations it performed."""

from __future__ import annotations

from ..core.changes import Change, Plan
from ..steps.ops import Step
from ..steps.records import PlanRecord, StepAbout


def plan_record(
    plan: Plan, applying: tuple[Step, ...], left_out: frozenset[str] = frozenset()
) -> PlanRecord:
    """The `plan` record: every change the plan had, which of them this run applies, the reboots
    already configured, the checks that failed (tune cannot fix those) and the knobs the run
    left out (`Work.left_out`)."""
    ids = {step.id for step in applying}
    return PlanRecord(
        changes=tuple(c.to_json() | {"applied_now": c.id in ids} for c in plan.changes),
        pending=tuple(p.to_json() for p in plan.pending),
        failed_checks=tuple(c.to_json() for c in plan.failed_checks),
        left_out=tuple(sorted(left_out)),
    )


def step_context(change: Change | None, step: Step) -> StepAbout:
    """Fields added to a `step` record (the journal contract only grows)."""
    operations = tuple(op.describe() for op in step.do)
    if change is None:
        return StepAbout(operations)
    return StepAbout(
        operations,
        priority=change.priority.value,
        reason=change.reason,
        phase=change.phase.value,
        fix=change.fix or None,
        setting=change.setting if change.subject else "",
        subject=change.subject,
    )


def contexts(plan: Plan, steps: tuple[Step, ...]) -> dict[str, StepAbout]:
    changes = {c.id: c for c in plan.changes}
    return {step.id: step_context(changes.get(step.id), step) for step in steps}
