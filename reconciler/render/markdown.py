"""The plan as the report an engineer writes after an audit: what is good, what to fix by
priority with the exact command, and what needs BIOS or an upgrade. Every value from the host or
the profile goes through `md` (a code span, or escaped text); tune's own words do not."""

from __future__ import annotations

from ..core.changes import Pending, Phase, Plan, Priority, pending_counts
from ..core.printable import printable_data
from . import md
from .folding import Group, changes_and_writes, entries, fold, show, shown


def render(plan: Plan) -> str:
    plan = printable_data(plan)
    host = plan.host
    out = [
        f"# Plan: {md.text(host.name)} against profile {md.code(plan.profile)}",
        "",
        "| | |",
        "|---|---|",
        f"| Host | {md.text(host.name)} |",
        f"| Kernel | {md.text(host.kernel or 'unknown')} |",
        f"| Observed from | {md.text(host.source)} |",
        f"| Boot id | {md.text(host.boot_id or 'unknown')} |",
        "",
        _summary(plan),
        "",
        "## Confirmed good",
        "",
    ]
    good = [
        f"- {md.text(g.label)}: {md.code(shown(g.first, g.first.current))}"
        for g in fold(plan.in_sync)
    ]
    good += [
        f"- check {md.text(c.id.removeprefix('check:'))}: {md.text(c.observed)} "
        f"(want {md.text(c.expected)})"
        for c in plan.checks
        if c.ok
    ]
    out += good or ["Nothing in this profile holds on the host yet."]
    out += ["", "## Actionable", ""]
    if not plan.changes:
        out.append("Nothing: every setting in the profile holds.")
    for priority in Priority:
        groups = fold(c for c in plan.changes if c.priority is priority)
        if groups:
            out += [f"### {priority.value}", ""]
            for group in groups:
                out += _change(group)
    reboot = [c for c in plan.changes if c.phase is Phase.REBOOT]
    boots = [p for p in plan.pending if not p.restart]
    if reboot or boots:
        out += ["## Needs a reboot", ""]
        out += [
            f"- {md.text(g.label)}: {md.code(shown(g.first, g.first.current))} -> "
            f"{md.code(shown(g.first, g.first.desired))}"
            for g in fold(reboot)
        ]
        out += _pending(boots)
    restarts = [p for p in plan.pending if p.restart]
    if restarts:
        out += ["## Needs a service restart", "", *_pending(restarts)]
    failed = plan.failed_checks
    if failed:
        out += [
            "## Needs BIOS, a kernel or a driver change",
            "",
            "tune reports these and does not change them.",
            "",
        ]
        out += [
            f"- **{md.text(c.id.removeprefix('check:'))}**: "
            f"observed {md.code(c.observed or 'absent')}, expected {md.code(c.expected)}. "
            f"Remedy: {md.text(c.remedy)}."
            for c in failed
        ]
        out.append("")
    if plan.notes:
        out += ["## Notes", ""]
        out += [f"- {md.text(n.message)}" for n in plan.notes]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _pending(pending: list[Pending]) -> list[str]:
    return [
        f"- {md.text(p.id)}: configured ({md.code(show(p.configured))}), not yet running "
        f"({md.code(show(p.running))}): {p.action}"
        for p in pending
    ] + [""]


def _summary(plan: Plan) -> str:
    """Changes (profile entries) by priority, and the writes they are, as the text counts."""
    counts = ", ".join(
        f"{p.value}: {n}"
        for p in Priority
        if (n := entries(c for c in plan.changes if c.priority is p))
    )
    status = "in sync" if plan.is_clean else "not in sync"
    made = changes_and_writes(entries(plan.changes), len(plan.changes))
    return (
        f"**The host is {status}.** {made} to make"
        + (f" ({counts})" if counts else "")
        + f", {len(plan.failed_checks)} failed checks, {pending_counts(plan.pending)}."
    )


def _change(group: Group) -> list[str]:
    c = group.first
    lines = [
        f"#### {md.text(group.label)}: {md.code(shown(c, c.current))} -> "
        f"{md.code(shown(c, c.desired))}",
        "",
    ]
    if c.reason:
        lines.append(f"Why: {md.text(c.reason)}.".replace("..", "."))
    lines.append(f"Takes effect: {c.phase.takes_effect}.")
    if group.fixes:
        lines += ["", *md.fence(group.fixes, "sh")]
    lines.append("")
    return lines
