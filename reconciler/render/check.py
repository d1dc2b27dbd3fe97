"""`tune check` output: one grep-able line per drifted knob, for cron mail and people alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.changes import Change, CheckResult, JsonValue, Value, pending_counts
from ..core.jsontext import indented
from ..core.printable import printable_data
from ..drift.check import CheckStatus, DriftReport, Since
from ..hosts.fleet import HostResult
from . import documents
from . import fleet as fleet_render
from .changes import changes_json, pending_json
from .folding import Group, entries, fold, show, shown
from .style import styler


def render(report: DriftReport, fmt: str, *, quiet: bool, color: bool) -> str:
    """`--quiet` prints nothing unless the host needs attention, whatever the format; then
    text becomes one line per drift and JSON stays whole."""
    if fmt == "json":
        return "" if quiet and not report.needs_attention else as_json(report)
    report = printable_data(report)
    return drift_only(report) if quiet else text(report, color)


def check_document(report: DriftReport) -> dict[str, Any]:
    """The report, each change with what the text shows of it (`changes.py`): a drifted
    knob labelled by its DRIFT line, one not applied by its NOT APPLIED line; and the counts
    the summary line gives, of knobs and of the profile entries they come from."""
    body = report.to_json()
    changed = printable_data(report.changed)  # as the text has them, as `drift` is folded
    ids = {c.id for c in changed}
    drift = changes_json(report.drift, lambda seen: _fold_drift(seen, ids))
    body["drift"] = [item | more for item, more in zip(body["drift"], drift, strict=True)]
    body["not_applied"] = changes_json(report.not_applied)
    if body["changed_after_apply"] is not None:
        body["changed_after_apply"] = [
            item | {"shown": {"current": _show(c.current), "written": _show(c.written)}}
            for item, c in zip(body["changed_after_apply"], changed, strict=True)
        ]
    body["pending"] = [pending_json(p) for p in report.pending]
    plan = report.plan
    body["summary"] = {
        "drift": len(report.drift),
        "not_applied": len(report.not_applied),
        "in_sync": len(plan.in_sync),
        "pending": len(report.pending),
        "checks": len(plan.checks),
        "failed_checks": len(report.failed_checks),
        "entries": {
            "drift": entries(report.drift),
            "compared": entries((*plan.in_sync, *report.drift)),
            "not_applied": entries(report.not_applied),
            "in_sync": entries(plan.in_sync),
        },
    }
    return documents.document("check", body.pop("host"), body)


def as_json(report: DriftReport, color: bool = False) -> str:
    return indented(check_document(report)) + "\n"


def drift_only(report: DriftReport) -> str:
    """Nothing unless the host needs attention (cron mails nothing); otherwise one line per
    drift (knobs that differ only in their CPU or device folded) and, with `--strict`, per
    failed check. Knobs never applied and pending reboots are no news: not here."""
    if not report.needs_attention:
        return ""
    return "".join(line + "\n" for line in drift_lines(report))


def drift_lines(report: DriftReport) -> list[str]:
    lines = [_drift(report, group) for group in _drift_groups(report)]
    if report.strict:
        lines += [_failed(report, check) for check in report.failed_checks]
    lines += _changed_lines(report)
    return lines


def _drift_groups(report: DriftReport) -> list[Group]:
    return _fold_drift(report.drift, {c.id for c in report.changed})


def _fold_drift(drift: Sequence[Change], changed: set[str]) -> list[Group]:
    # Folded apart, so a folded line never mixes knobs changed after apply with the others.
    return fold(c for c in drift if c.id not in changed) + fold(c for c in drift if c.id in changed)


def _changed_lines(report: DriftReport) -> list[str]:
    """Knobs changed after apply that the profile now agrees with (the others are DRIFT)."""
    drifted = {c.id for c in report.drift}
    return [
        f"CHANGED {c.kind} {c.target}: {_show(c.current)} (tune wrote {_show(c.written)})"
        + _since(report, [c.id])
        for c in report.changed
        if c.id not in drifted
    ]


def text(report: DriftReport, color: bool = False) -> str:
    """The same lines for a terminal, then what was never applied, failed checks and pending
    reboots."""

    style = styler(color)

    plan, last = report.plan, report.last_apply
    out = [
        style(f"tune check: {plan.profile or 'no profile'} on {plan.host.name}", bold=True)
        + f" ({plan.host.source}, kernel {plan.host.kernel or 'unknown'})",
        (
            f"Last apply: {last.finished} (run {last.run_id}, phase {last.phase})"
            if last
            else "Last apply: none in effect on this host"
        ),
        "",
    ]
    body = [style(_drift(report, group), fg="red") for group in _drift_groups(report)]
    body += [style(line, fg="yellow") for line in _changed_lines(report)]
    body += [
        style(_failed(report, check), fg="red" if report.strict else "yellow")
        for check in report.failed_checks
    ]
    body += [
        f"NOT APPLIED {group.label}: {shown(group.first, group.first.current)} "
        f"(want {shown(group.first, group.first.desired)}; {group.first.phase.how})"
        for group in fold(report.not_applied)
    ]
    body += [
        f"PENDING {p.kind} {p.target}: running {show(p.running)}, {p.until} "
        f"{show(p.configured)} ({p.action})"
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
    """Counts of profile entries (a governor on 128 CPUs is one), and of their knobs where
    that is more."""
    plan = report.plan
    if not report.compared:
        return (
            "Not applied: no run of tune is in effect on this host, and no profile is stored "
            "to compare it with; give PROFILE to see what is not applied."
        )
    checks = f"{len(plan.checks) - len(report.failed_checks)} of {len(plan.checks)} checks pass"
    not_applied = f"{_entries(report.not_applied)} not applied; " if report.not_applied else ""
    pending = pending_counts(report.pending)
    changed = f"; {len(report.changed)} changed after apply" if report.since_apply else ""
    tail = f"{not_applied}{checks}; {pending}{changed}."
    if report.undone:
        return f"Not applied: no run of tune is in effect on this host; {tail}"
    if not report.drift and not report.changed:
        return f"In sync: {_entries(plan.in_sync)}; {tail}"
    compared = (*plan.in_sync, *report.drift)
    return f"Drift: {_entries(report.drift, compared)}; {tail}"


def _entries(changes: Sequence[Change], out_of: Sequence[Change] | None = None) -> str:
    """`1 of 24 entries`, and the knobs they are where that is more: `(4 of 158 knobs)`."""
    of = f" of {entries(out_of)}" if out_of is not None else ""
    said = f"{entries(changes)}{of} entries"
    knobs = f"{len(changes)}" + (f" of {len(out_of)}" if out_of is not None else "")
    wider = len(changes) != entries(changes) or (
        out_of is not None and len(out_of) != entries(out_of)
    )
    return f"{said} ({knobs} knobs)" if wider else said


def _drift(report: DriftReport, group: Group) -> str:
    first = group.first
    return (
        f"DRIFT {group.label}: {shown(first, first.current)} "
        f"(want {shown(first, first.desired)})"
        + _since(report, [c.id for c in group.changes])
        + _changed_suffix(report, first)
    )


def _changed_suffix(report: DriftReport, change: Change) -> str:
    if report.since(change.id) != Since.CHANGED:
        return ""
    written = next(c.written for c in report.changed if c.id == change.id)
    return f"; changed after apply (tune wrote {_show(written)})"


def _failed(report: DriftReport, check: CheckResult) -> str:
    name = check.name + (f" {check.subject}" if check.subject else "")
    return f"FAIL check {name}: {check.observed or '(absent)'} (want {check.expected})" + _since(
        report, [check.id]
    )


def _since(report: DriftReport, ids: Sequence[str]) -> str:
    """When `tune check` first saw the earliest of `ids` drift, where the host keeps a record."""
    seen = [report.first_seen[i] for i in ids if i in report.first_seen]
    return f" since {min(seen)}" if seen else ""


def _show(value: JsonValue) -> str:
    as_value: Value = tuple(value) if isinstance(value, list) else value
    return show(as_value)


def fleet(
    results: Sequence[HostResult[DriftReport]],
    fmt: str,
    *,
    quiet: bool,
    color: bool,
    verbose: bool = False,
) -> str:
    """Many hosts: `--quiet` prefixes each drift line with its host (cron mails one list);
    text is a row a host, a summary that says what the exit code says, then each report once
    with the hosts it is for; JSON one object a host."""
    if fmt == "json":
        objects = documents.fleet("check", results, check_document)
        return indented(objects) + "\n"
    results = printable_data(results)
    if quiet:
        lines = []
        for r in results:
            if r.value is None:
                lines.append(f"{r.name}: ERROR {fleet_render.problems(r)}")
            else:
                lines += [f"{r.name}: {line}" for line in drift_lines(r.value)]
        return "".join(line + "\n" for line in lines)

    def key(report: DriftReport) -> str | None:
        # Its first lines name the host and its last run: alike reports differ only there.
        shown = text(report).split("\n")
        return None if report.status == CheckStatus.IN_SYNC else "\n".join(shown[2:])

    found = fleet_render.groups(results, key)
    named_as = fleet_render.labels(found)
    rows = [_fleet_row(r, named_as.get(r.name, "-")) for r in results]
    out = fleet_render.table(FLEET_HEADER, rows, color)
    out += ["", fleet_summary(results)]
    out += fleet_render.details(results, found, lambda r: text(r, color), verbose, "Report")
    return "\n".join(out) + "\n"


# DRIFT and NOT APPLIED count profile entries, as the one-host summary does.
FLEET_HEADER = ["HOST", "STATUS", "DRIFT", "NOT APPLIED", "PENDING", "CHECKS OK", "REPORT"]


def _fleet_row(result: HostResult[DriftReport], group: str) -> list[str]:
    report = result.value
    if report is None:
        return [result.name, "error", "-", "-", "-", "-", "-"]
    checks = report.plan.checks
    return [
        result.name,
        report.status.replace("-", " "),
        str(entries(report.drift) + len(_changed_lines(report))),
        str(entries(report.not_applied)),
        str(len(report.pending)),
        f"{len(checks) - len(report.failed_checks)}/{len(checks)}",
        group,
    ]


def fleet_summary(results: Sequence[HostResult[DriftReport]]) -> str:
    """How many hosts are in each state, and how many need attention: the hosts that make
    the exit code 2 (drift; failed checks only with --strict), or 1 if any host failed."""
    reports = [r.value for r in results if r.value is not None]
    errors = len(results) - len(reports)
    states = [r.status for r in reports]
    attention = sum(r.needs_attention for r in reports)
    lenient = sum(r.status == CheckStatus.FAILING_CHECKS and not r.strict for r in reports)
    counts = (
        f"{len(results)} host{'s' * (len(results) != 1)}: "
        f"{states.count(CheckStatus.DRIFT)} drifted, "
        f"{states.count(CheckStatus.FAILING_CHECKS)} with failed checks, "
        f"{states.count(CheckStatus.NOT_APPLIED)} not applied, "
        f"{states.count(CheckStatus.IN_SYNC)} in sync, {errors} unreachable or failed"
    )
    needs = (
        f"{attention} need{'s' * (attention == 1)} attention"
        if attention
        else "none needs attention"
    )
    why = " (failed checks do only with --strict)" if lenient else ""
    return f"{counts}; {needs}{why}."
