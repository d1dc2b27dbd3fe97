"""The plan for a terminal: by phase, then priority; identical changes folded."""

from __future__ import annotations

from ..core.changes import Change, Phase, Plan, Priority, Value, pending_counts
from ..core.printable import printable_data
from .diff import unified
from .folding import entries, fold, line_changes, show, whole_files
from .style import styler


def render(plan: Plan, color: bool = False) -> str:
    plan = printable_data(plan)
    style = styler(color)

    host = plan.host
    lines = [
        style(f"tune plan: {plan.profile} on {host.name}", bold=True)
        + f" ({host.source}, kernel {host.kernel or 'unknown'})",
        "",
    ]
    for phase in Phase:
        changes = [c for c in plan.changes if c.phase is phase]
        if not changes:
            continue
        lines.append(style(f"{phase.value.capitalize()} phase", bold=True) + f" ({phase.how})")
        for priority in Priority:
            groups = fold(c for c in changes if c.priority is priority)
            if not groups:
                continue
            lines.append(
                f"  {style(priority.value, fg='red' if priority is Priority.P0 else 'yellow')}"
            )
            for group in groups:
                c = group.first
                whole_file = whole_files(c)
                long = whole_file or _line_count(c) > LONG_LIST
                arrow = file_arrow(c) if long else f"{show(c.current)} -> {show(c.desired)}"
                lines.append(f"    ~ {group.label}: {style(arrow, fg='cyan')}")
                if whole_file:
                    lines.extend(f"        {line}" for line in file_diff(c, color))
                elif long:
                    lines.extend(f"        {mark} {line}" for mark, line in line_changes(c))
                if c.reason:
                    lines.append(f"        {style(c.reason, dim=True)}")
        lines.append("")
    if plan.pending:
        if all(p.restart for p in plan.pending):
            heading = "Pending restart", " (configured; a running service keeps its old limits)"
        else:
            heading = "Pending reboot", " (configured for the next boot)"
        lines.append(style(heading[0], bold=True) + heading[1])
        for p in plan.pending:
            lines.append(f"    {p.id}: running {show(p.running)}, {p.until} {show(p.configured)}")
        lines.append("")
    if plan.checks:
        lines.append(style("Checks", bold=True) + " (reported, never changed by tune)")
        for check in plan.checks:
            mark = style("ok  ", fg="green") if check.ok else style("FAIL", fg="red")
            line = f"    {mark} {check.id}: {check.observed or '(absent)'}"
            line += f" (want {check.expected})"
            if not check.ok:
                line += f"; {check.remedy}"
            lines.append(line)
        lines.append("")
    if plan.notes:
        lines.append(style("Notes", bold=True))
        lines.extend(f"    - {note.message}" for note in plan.notes)
        lines.append("")
    lines.append(summary(plan))
    return "\n".join(lines) + "\n"


# A list of lines longer than this (13 mount entries of an 8-GPU container) shows as the lines
# it adds and removes, not both lists in full.
LONG_LIST = 4


def _line_count(change: Change) -> int:
    return max(len(v) if isinstance(v, tuple) else 0 for v in (change.current, change.desired))


def file_diff(change: Change, color: bool) -> list[str]:
    """A whole file's change as a unified diff (`target` is the file's path)."""

    def lines(value: Value) -> tuple[str, ...] | None:
        return value if isinstance(value, tuple) else None

    return unified(change.target, lines(change.current), lines(change.desired), color)


def file_arrow(change: Change) -> str:
    """Whole files (tune's boot-time files) and long lists by size and difference."""

    def size(lines: object) -> str:
        return "(absent)" if lines is None else f"{len(lines)} lines"  # type: ignore[arg-type]

    marks = [mark for mark, _ in line_changes(change)]
    return (
        f"{size(change.current)} -> {size(change.desired)} "
        f"(+{marks.count('+')} -{marks.count('-')})"
    )


def summary(plan: Plan) -> str:
    """Counts of profile entries, as the plan shows them (a governor on 128 CPUs is one), and
    the writes they expand to where that is more."""
    changes = plan.changes
    if plan.is_clean:
        head = "In sync: nothing to change"
    else:
        runtime = entries(c for c in changes if c.phase is Phase.RUNTIME)
        reboot = entries(c for c in changes if c.phase is Phase.REBOOT)
        writes = f"; {len(changes)} writes" if len(changes) != runtime + reboot else ""
        head = f"Plan: {runtime + reboot} to change ({runtime} runtime, {reboot} reboot{writes})"
    failed = len(plan.failed_checks)
    return (
        f"{head}, {entries(plan.in_sync)} in sync; {len(plan.checks) - failed} of "
        f"{len(plan.checks)} checks pass; {pending_counts(plan.pending)}."
    )
