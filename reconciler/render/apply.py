"""What `tune apply` shows of its work before it writes: the part of the plan it will change,
and a dry run's operations, step by step."""

from __future__ import annotations

from dataclasses import replace

from ..apply.engine import Work
from ..apply.state import LOCK, STATE
from ..apply.steps import Step
from ..hosts.base import ReadableHost
from ..plan.model import Plan
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
    steps: tuple[Step, ...], host: ReadableHost, later: str | None = None, *, color: bool = False
) -> str:
    from ..plan.model import Value

    def show(value: Value) -> str:
        if isinstance(value, tuple):
            return f"{len(value)} lines"
        # Quoted, not repr(): the line is made printable as a whole, once.
        return "(absent)" if value is None else f"'{value}'"

    lines = (
        [f"{later}: {len(steps)} changes."]
        if later
        else [
            f"Dry run on {host.describe()}: {len(steps)} changes, nothing written.",
            f"Each change is journaled under {STATE}/runs/ before its write, with {LOCK} held.",
        ]
    )
    for step in steps:
        lines.append(f"{step.id}: {show(step.prior)} -> {show(step.desired)}")
        for op in step.do:
            first, *body = op.describe().split("\n")  # a file's body: one `| line` a line
            lines += [f"    {first}", *body]
        if not step.do:
            lines.append("    (made by the step before it)")
    return "".join(printable(line) + "\n" for line in lines)
