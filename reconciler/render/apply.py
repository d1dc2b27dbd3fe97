"""What `tune apply` shows of its work before it writes: the part of the plan it will change,
and a dry run's operations, step by step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..apply.work import Work
from ..core.changes import Change, Plan
from ..core.files import Request
from ..core.printable import printable
from ..core.words import counted
from ..hosts.base import ReadableHost
from ..hosts.directory import SnapshotHost
from ..plan import entries
from ..steps.ops import PutFile, Step
from ..steps.state import LOCK, STATE
from .diff import unified
from .folding import (
    Group,
    blocks,
    changes_and_writes,
    fold_key,
    same_but_subject,
    subjects,
)


def applied_part(work: Work, *, checks: bool = False) -> Plan:
    """The plan cut to what the apply will change (no notes or pending reboots; no checks
    unless `checks`: a fleet's table counts them, and the knobs the host lacks, which the
    apply skips, as its plan does)."""
    ids = {s.id for s in work.planned}
    return replace(
        work.plan,
        compared=tuple(c for c in work.plan.compared if c.id in ids or (checks and c.missing)),
        pending=(),
        checks=work.plan.checks if checks else (),
        notes=(),
    )


def counted_steps(steps: tuple[Step, ...], plan: Plan) -> str:
    """`29 changes (368 writes)`: the profile entries `steps` change and the knobs they write,
    as the plan counts them (a step of no change of the plan, a boot entry, is one of its
    own)."""
    return changes_and_writes(step_entries(steps, plan), len(steps))


def step_entries(steps: tuple[Step, ...], plan: Plan) -> int:
    """How many profile entries `steps` change (`plan.entries` of their changes)."""
    return entries.step_entries(steps, plan.compared)


def dry_run_text(
    steps: tuple[Step, ...],
    host: ReadableHost,
    later: str | None = None,
    plan: Plan | None = None,
    *,
    color: bool = False,
) -> str:
    """Each step and its operations; a file it replaces as a unified diff from the file the
    host has now (or the one an earlier step of the run writes), read in one batch. With the
    `plan` the steps came from, steps that do the same to another CPU or device fold into the
    first one's, as the plan folds their changes."""
    from ..core.changes import Value

    def show(value: Value) -> str:
        if isinstance(value, tuple):
            return f"{len(value)} lines"
        # Quoted, not repr(): the line is made printable as a whole, once.
        return "(absent)" if value is None else f"'{value}'"

    changes = {c.id: c for c in plan.compared} if plan is not None else {}
    # A snapshot keeps its journal and lock inside itself, not in this machine's /var/lib.
    inside = str(host.root).rstrip("/") if isinstance(host, SnapshotHost) else ""
    # A rollback's restores are writes of no plan.
    amount = counted_steps(steps, plan) if plan is not None else counted(len(steps), "write")
    lines = (
        [f"{later}: {amount}."]
        if later
        else [
            f"Dry run on {host.describe()}: {amount}, nothing written.",
            f"Each change is journaled under {inside}{STATE}/runs/ before its write, "
            f"with {inside}{LOCK} held.",
        ]
    )
    lines = [printable(line) for line in lines]
    files = _current_files(steps, host)
    for block in fold_steps(steps, changes):
        step = block[0]
        folded = Group(tuple(changes[s.id] for s in block)) if len(block) > 1 else None
        label = folded.label if folded else step.id
        lines.append(printable(f"{label}: {show(step.prior)} -> {show(step.desired)}"))
        for op in step.do:
            first, *body = op.describe().split("\n")  # a file's body: one `| line` a line
            lines.append(printable(f"    {first}"))
            if isinstance(op, PutFile):
                before, files[op.path] = files.get(op.path), op.data
                lines += [f"        {line}" for line in _diff(op.path, before, op.data, color)]
            else:
                lines += [printable(line) for line in body]
        if not step.do:
            lines.append("    (made by the step before it)")
        if folded:
            lines.append(printable(f"    (the same for {subjects(folded.changes[1:])})"))
    return "".join(line + "\n" for line in lines)


def _current_files(steps: tuple[Step, ...], host: ReadableHost) -> dict[str, bytes | None]:
    """The files the steps replace, as the host has them now (None: absent)."""
    paths = sorted({op.path for step in steps for op in step.do if isinstance(op, PutFile)})
    if not paths:
        return {}
    found = host.fetch(Request.of(*paths, whole=paths))
    return {path: found.read(path) for path in paths}


def _diff(path: str, before: bytes | None, after: bytes, color: bool) -> list[str]:
    def lines(data: bytes | None) -> list[str] | None:
        if data is None:
            return None
        return [printable(line) for line in data.decode("utf-8", "replace").splitlines()]

    return unified(path, lines(before), lines(after), color)


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
