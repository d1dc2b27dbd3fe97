"""The audit of many hosts: one table of hosts, one of findings across hosts, then each
finding once with what every host showed. JSON is a list of the same object one host's audit
prints, each under its host's name, as `tune plan` does for a fleet."""

from __future__ import annotations

from collections.abc import Sequence

from ..audit.model import Finding, Report, phase_label
from ..core.changes import Priority
from ..core.jsontext import indented
from ..core.printable import printable_data
from ..core.words import counted
from ..hosts.fleet import HostResult
from . import documents
from .audit import MULTILINE, RENDERERS, audit_document, commands
from .fleet import hosts_markdown, problems, table

HOST_HEADER = ["HOST", "STATUS", *(p.value for p in Priority)]
FINDING_HEADER = ["FINDING", "PRIORITY", "HOSTS", "ON"]
# Hosts a finding row names before it only counts the rest.
NAMED_HOSTS = 4


def status(result: HostResult[Report]) -> str:
    if result.error is not None or result.value is None:
        return "error"
    actionable = len(result.value.actionable)
    return f"{actionable} actionable" if actionable else "clean"


def _host_row(result: HostResult[Report]) -> list[str]:
    report = result.value
    if report is None:
        return [result.name, "error", *("-" for _ in Priority)]
    counts = [str(sum(f.priority is p for f in report.actionable)) for p in Priority]
    return [result.name, status(result), *counts]


def by_finding(results: Sequence[HostResult[Report]]) -> dict[str, list[tuple[str, Finding]]]:
    """Every finding id with the hosts showing it, most urgent first, then as the rules list
    them."""
    found: dict[str, list[tuple[str, Finding]]] = {}
    for result in results:
        if result.value is not None:
            for finding in printable_data(result.value, MULTILINE).findings:
                found.setdefault(finding.id, []).append((result.name, finding))
    order = list(Priority)
    return dict(sorted(found.items(), key=lambda item: order.index(item[1][0][1].priority)))


def _finding_row(fid: str, hosts: list[tuple[str, Finding]], total: int) -> list[str]:
    names = [name for name, _ in hosts]
    shown = ", ".join(names[:NAMED_HOSTS])
    if len(names) > NAMED_HOSTS:
        shown += f" and {len(names) - NAMED_HOSTS} more"
    return [fid, hosts[0][1].priority.value, f"{len(names)}/{total}", shown]


def totals(results: Sequence[HostResult[Report]]) -> str:
    errors = sum(r.error is not None for r in results)
    clean = sum(status(r) == "clean" for r in results)
    return (
        f"{counted(len(results), 'host')}: {clean} clean, "
        f"{len(results) - errors - clean} with actionable findings, "
        f"{errors} unreachable or failed."
    )


def text(results: Sequence[HostResult[Report]], color: bool) -> str:
    out = table(HOST_HEADER, [_host_row(r) for r in results], color)
    findings = by_finding(results)
    audited = sum(r.value is not None for r in results)
    if findings:
        rows = [_finding_row(fid, hosts, audited) for fid, hosts in findings.items()]
        out += ["", *table(FINDING_HEADER, rows, False)]
    out += ["", totals(results)]
    for fid, hosts in findings.items():
        first = hosts[0][1]
        out += [
            "",
            f"== {fid} [{first.area.value}, {first.priority.value}]",
            f"why: {first.reason}",
        ]
        for name, finding in hosts:
            out.append(f"  {name} ({phase_label(finding)}): {finding.observed}")
            out += [f"      {line}" for line in commands(finding, 3)]
    for result in results:
        if result.error is not None:
            out += ["", f"== {result.name}: error", problems(result)]
    return "\n".join(out) + "\n"


def markdown(results: Sequence[HostResult[Report]]) -> str:
    rows = [_host_row(r) for r in results]

    def details(report: Report) -> str:
        return RENDERERS["markdown"](report, False)

    return hosts_markdown(HOST_HEADER, rows, totals(results), results, details)


def as_json(results: Sequence[HostResult[Report]]) -> str:
    """One audit document per host, as one host's `--format json`; an error document for a
    host that could not be read."""
    return indented(documents.fleet("audit", results, audit_document)) + "\n"


def render(results: Sequence[HostResult[Report]], fmt: str, color: bool) -> str:
    if fmt == "json":
        return as_json(results)
    if fmt == "markdown":
        return markdown(results)
    return text(results, color)
