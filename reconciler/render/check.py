"""`tune check` output: one grep-able line per drifted knob, for cron mail and people alike."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..drift.check import DriftReport, Since
from ..hosts.fleet import HostResult
from ..plan.model import Change, CheckResult, JsonValue, Value
from . import documents
from . import fleet as fleet_render
from .folding import fold, show, shown
from .printable import printable_data
from .style import styler


def render(report: DriftReport, fmt: str, *, quiet: bool, color: bool) -> str:
    """`--quiet` prints nothing when in sync, whatever the format; on drift, text becomes one
    line per knob and JSON stays whole."""
    if fmt == "json":
        return "" if quiet and report.in_sync else as_json(report)
    report = printable_data(report)
    return drift_only(report) if quiet else text(report, color)


def check_document(report: DriftReport) -> dict[str, Any]:
    body = report.to_json()
    return documents.document("check", body.pop("host"), body)


def as_json(report: DriftReport, color: bool = False) -> str:
    return json.dumps(check_document(report), indent=2) + "\n"


def drift_only(report: DriftReport) -> str:
    """Nothing when in sync (cron mails nothing); otherwise one line per knob and failed check."""
    if report.in_sync:
        return ""
    return "".join(line + "\n" for line in drift_lines(report))


def drift_lines(report: DriftReport) -> list[str]:
    since = _since(report)
    lines = [_drift(c) + since + _changed_suffix(report, c) for c in report.drift]
    lines += [_failed(check) + since for check in report.failed_checks]
    drifted = {c.id for c in report.drift}
    lines += [
        f"CHANGED {c.kind} {c.target}: {_show(c.current)} (tune wrote {_show(c.written)})" + since
        for c in report.changed
        if c.id not in drifted
    ]
    return lines


def text(report: DriftReport, color: bool = False) -> str:
    """The same lines for a terminal, with identical CPU and device lines folded."""

    style = styler(color)

    plan, last = report.plan, report.last_apply
    out = [
        style(f"tune check: {plan.profile} on {plan.host.name}", bold=True)
        + f" ({plan.host.source}, kernel {plan.host.kernel or 'unknown'})",
        (
            f"Last apply: {last.finished} (run {last.run_id}, phase {last.phase})"
            if last
            else "Last apply: none recorded on this host"
        ),
        "",
    ]
    since = _since(report)
    body = []
    changed = {c.id for c in report.changed}
    as_written = [c for c in report.drift if c.id not in changed]
    # Folded apart, so a folded line never mixes knobs changed after apply with the others.
    for group in fold(as_written) + fold(c for c in report.drift if c.id in changed):
        first = group.first
        line = (
            f"DRIFT {group.label}: {shown(first, first.current)} "
            f"(want {shown(first, first.desired)})" + since
        )
        body.append(style(line + _changed_suffix(report, first), fg="red"))
    body += [style(_failed(check) + since, fg="red") for check in report.failed_checks]
    changed_lines = [line for line in drift_lines(report) if line.startswith("CHANGED ")]
    body += [style(line, fg="yellow") for line in changed_lines]
    body += [
        f"PENDING {p.kind} {p.target}: running {show(p.running)}, next boot {show(p.configured)}"
        " (reboot to apply)"
        for p in report.pending
    ]
    if body:
        out += [*body, ""]
    if report.notes:
        out.append(style("Notes", bold=True))
        out += [f"    - {note.message}" for note in report.notes]
        out.append("")
    out.append(summary(report))
    return "\n".join(out) + "\n"


def summary(report: DriftReport) -> str:
    plan = report.plan
    checks = f"{len(plan.checks) - len(report.failed_checks)} of {len(plan.checks)} checks pass"
    pending = f"{len(report.pending)} pending reboot"
    changed = f"; {len(report.changed)} changed after apply" if report.since_apply else ""
    if report.in_sync:
        return f"In sync: {len(plan.in_sync)} knobs; {checks}; {pending}{changed}."
    knobs = len(plan.in_sync) + len(report.drift)
    return f"Drift: {len(report.drift)} of {knobs} knobs; {checks}; {pending}{changed}."


def _drift(change: Change) -> str:
    return (
        f"DRIFT {change.kind} {change.target}: {shown(change, change.current)} "
        f"(want {shown(change, change.desired)})"
    )


def _changed_suffix(report: DriftReport, change: Change) -> str:
    if report.since(change.id) != Since.CHANGED:
        return ""
    written = next(c.written for c in report.changed if c.id == change.id)
    return f"; changed after apply (tune wrote {_show(written)})"


def _failed(check: CheckResult) -> str:
    name = check.name + (f" {check.subject}" if check.subject else "")
    return f"DRIFT check {name}: {check.observed or '(absent)'} (want {check.expected})"


def _since(report: DriftReport) -> str:
    return f" since {report.last_apply.finished}" if report.last_apply else ""


def _show(value: JsonValue) -> str:
    as_value: Value = tuple(value) if isinstance(value, list) else value
    return show(as_value)


def fleet(results: Sequence[HostResult[DriftReport]], fmt: str, *, quiet: bool, color: bool) -> str:
    """Many hosts: `--quiet` prefixes each drift line with its host (cron mails one list);
    text is the fleet summary table then each drifted host's report; JSON one object a host."""
    if fmt == "json":
        objects = documents.fleet("check", results, check_document)
        return json.dumps(objects, indent=2) + "\n"
    results = printable_data(results)
    if quiet:
        lines = []
        for r in results:
            if r.value is None:
                lines.append(f"{r.name}: ERROR {fleet_render.problems(r)}")
            else:
                lines += [f"{r.name}: {line}" for line in drift_lines(r.value)]
        return "".join(line + "\n" for line in lines)
    # The summary table reads plans; the details are each host's own check report.
    reports = {id(r.value.plan): r.value for r in results if r.value is not None}
    plans = [HostResult(r.name, r.value.plan if r.value else None, r.error) for r in results]
    return fleet_render.text(plans, color, lambda plan, c: text(reports[id(plan)], c))
