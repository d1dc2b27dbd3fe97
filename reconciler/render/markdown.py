"""The plan as the report an engineer writes after an audit: what is good, what to fix by
priority with the exact command, and what needs BIOS or an upgrade."""

from __future__ import annotations

from ..model import Phase, Plan, Priority
from ..printable import printable_data
from .folding import Group, fold, show, shown

WHEN = {Phase.RUNTIME: "live (runtime)", Phase.REBOOT: "at next boot or container restart"}


def render(plan: Plan) -> str:
    plan = printable_data(plan)
    host = plan.host
    out = [
        f"# Host audit: {host.name} against profile `{plan.profile}`",
        "",
        "| | |",
        "|---|---|",
        f"| Host | {host.name} |",
        f"| Kernel | {host.kernel or 'unknown'} |",
        f"| Observed from | {host.source} |",
        f"| Boot id | {host.boot_id or 'unknown'} |",
        "",
        _summary(plan),
        "",
        "## Confirmed good",
        "",
    ]
    good = [f"- {g.label}: `{shown(g.first, g.first.current)}`" for g in fold(plan.in_sync)]
    good += [
        f"- check {c.id.removeprefix('check:')}: {c.observed} (want {c.expected})"
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
    if reboot or plan.pending:
        out += ["## Needs a reboot", ""]
        out += [
            f"- {g.label}: `{show(g.first.current)}` -> `{show(g.first.desired)}`"
            for g in fold(reboot)
        ]
        out += [
            f"- {p.id}: configured (`{show(p.configured)}`), not yet running "
            f"(`{show(p.running)}`): reboot to apply"
            for p in plan.pending
        ]
        out.append("")
    failed = plan.failed_checks
    if failed:
        out += [
            "## Needs BIOS, a kernel or a driver change",
            "",
            "tune reports these and does not change them.",
            "",
        ]
        out += [
            f"- **{c.id.removeprefix('check:')}**: observed `{c.observed or 'absent'}`, "
            f"expected `{c.expected}`. Remedy: {c.remedy}."
            for c in failed
        ]
        out.append("")
    if plan.notes:
        out += ["## Notes", ""]
        out += [f"- {n.message}" for n in plan.notes]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _summary(plan: Plan) -> str:
    counts = ", ".join(
        f"{p.value}: {n}" for p in Priority if (n := sum(c.priority is p for c in plan.changes))
    )
    status = "in sync" if plan.is_clean else "not in sync"
    return (
        f"**The host is {status}.** {len(plan.changes)} settings to change"
        + (f" ({counts})" if counts else "")
        + f", {len(plan.failed_checks)} failed checks, {len(plan.pending)} pending reboot."
    )


def _change(group: Group) -> list[str]:
    c = group.first
    lines = [f"#### {group.label}: `{shown(c, c.current)}` -> `{shown(c, c.desired)}`", ""]
    if c.reason:
        lines.append(f"Why: {c.reason}.".replace("..", "."))
    lines.append(f"Takes effect: {WHEN[c.phase]}.")
    if group.fixes:
        lines += ["", "```sh", *group.fixes, "```"]
    lines.append("")
    return lines
