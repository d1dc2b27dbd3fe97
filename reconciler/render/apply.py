"""What `tune apply` shows of its work before it writes: the part of the plan it will change,
and a dry run's operations, step by step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..apply.engine import Work
from ..apply.state import LOCK, STATE
from ..apply.steps import Step
from ..hosts.base import ReadableHost
from ..plan.model import Change, Plan
from .folding import Group, blocks, fold_key, same_but_subject, subjects
from .printable import printable


def applied_part(work: Work) -> Plan:
    """The plan cut to what the apply will change (no checks, notes or pending reboots)."""
    ids = {s.id for s in work.planned}
    return replace(
        work.plan,
        compared=tuple(c for c in work.plan.compared if c.id in ids),
        pending=(),
        checks=(),
        notes=(),
    )


def dry_run_text(
    steps: tuple[Step, ...], host: ReadableHost, later: str | None = None, plan: Plan | None = None
) -> str:
    """Each step's operations; with the `plan` the steps came from, steps that do the same to
    another CPU or device fold into the first one's, as the plan folds their changes."""
    from ..plan.model import Value

    def show(value: Value) -> str:
        if isinstance(value, tuple):
            return f"{len(value)} lines"
        # Quoted, not repr(): the line is made printable as a whole, once.
        return "(absent)" if value is None else f"'{value}'"

    changes = {c.id: c for c in plan.compared} if plan is not None else {}
    lines = (
        [f"{later}: {len(steps)} changes."]
        if later
        else [
            f"Dry run on {host.describe()}: {len(steps)} changes, nothing written.",
            f"Each change is journaled under {STATE}/runs/ before its write, with {LOCK} held.",
        ]
    )
    for block in fold_steps(steps, changes):
        step = block[0]
        folded = Group(tuple(changes[s.id] for s in block)) if len(block) > 1 else None
        lines.append(
            f"{folded.label if folded else step.id}: {show(step.prior)} -> {show(step.desired)}"
        )
        for op in step.do:
            first, *body = op.describe().split("\n")  # a file's body: one `| line` a line
            lines += [f"    {first}", *body]
        if not step.do:
            lines.append("    (made by the step before it)")
        if folded:
            lines.append(f"    (the same for {subjects(folded.changes[1:])})")
    return "".join(printable(line) + "\n" for line in lines)


def fold_steps(steps: tuple[Step, ...], changes: Mapping[str, Change]) -> list[list[Step]]:
    """Steps in blocks, each where its first step was: the steps of changes that fold together
    (`folding.fold_key`) and whose operations differ only in their CPU or device; any other
    step alone."""

    def key(step: Step) -> tuple[object, ...] | None:
        change = changes.get(step.id)
        if change is None or not change.subject or not step.do:
            return None
        operations = same_but_subject((op.describe() for op in step.do), change.subject)
        return (*fold_key(change), step.prior, step.desired, operations)

    return blocks(steps, key)
