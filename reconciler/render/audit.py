"""The audit report for a terminal, as JSON, and as the Markdown an engineer writes after an
audit. Consumers of `Report`; none of them decides anything."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..audit.model import Device, Finding, HostSummary, Remark, Report, phase_label
from ..core.changes import Phase, Priority
from ..core.jsontext import indented
from ..core.printable import printable_data
from ..kinds import named
from . import documents, md
from .style import styler

MULTILINE = frozenset({"fix"})  # one command or edit a line
TAKES_EFFECT = {
    Phase.RUNTIME: "live (runtime)",
    Phase.REBOOT: "at the next boot or container restart",
}


def summary(report: Report) -> str:
    actionable = report.actionable
    runtime = sum(f.phase is Phase.RUNTIME for f in actionable)
    pending = sum(f.pending for f in report.findings)
    cannot = len(report.findings) - len(actionable) - pending
    return (
        f"{len(report.findings)} findings: {len(actionable)} actionable "
        f"({runtime} runtime, {len(actionable) - runtime} reboot), {pending} pending a reboot, "
        f"{cannot} tune cannot fix; {len(report.good)} good, {len(report.not_issues)} not an issue."
    )


def cpu_line(host: HostSummary) -> str:
    sockets = f"{host.sockets} x " if host.sockets else ""
    nodes = f", {host.numa_nodes} NUMA nodes" if host.numa_nodes else ""
    return f"{sockets}{host.cpu_model or 'unknown CPU'} ({host.cpus} CPUs{nodes})"


def commands(finding: Finding, limit: int | None = None) -> list[str]:
    lines = finding.fix.splitlines()
    if limit is not None and len(lines) > limit:
        return [*lines[:limit], f"... and {len(lines) - limit} more"]
    return lines


# ---------------------------------------------------------------------------------------------


def text(report: Report, color: bool = False) -> str:
    report = printable_data(report, MULTILINE)
    style = styler(color)

    host = report.host
    lines = [
        style(f"tune audit: {host.name}", bold=True)
        + f" ({host.source}, kernel {host.kernel or 'unknown'})",
        f"{cpu_line(host)}, cpufreq {host.cpufreq_driver or 'none'}/{host.governor or 'none'}; "
        f"GPUs: {len(host.gpus)}, NICs: {len(host.nics)}",
        "",
    ]
    for priority in Priority:
        findings = [f for f in report.findings if f.priority is priority]
        if not findings:
            continue
        lines.append(style(priority.value, fg="red" if priority is Priority.P0 else "yellow"))
        for finding in findings:
            mark = "!" if finding.actionable else ("~" if finding.pending else "-")
            lines.append(
                f"  {mark} {style(finding.id, bold=True)} [{finding.area.value}, "
                f"{phase_label(finding)}]: {finding.observed}"
            )
            lines.append(f"      {style('why: ' + finding.reason, dim=True)}")
            label = "fix" if finding.actionable or finding.pending else "remedy"
            for index, line in enumerate(commands(finding, 3)):
                lead = f"{label}:" if index == 0 else " " * (len(label) + 1)
                lines.append(f"      {lead} {line}")
        lines.append("")
    for title, remarks in (("Good", report.good), ("Not an issue", report.not_issues)):
        if remarks:
            lines.append(style(title, bold=True))
            for remark in remarks:
                lines.append(f"  {remark.id}: {remark.observed}")
                if remark.reason:
                    lines.append(f"      {style('why: ' + remark.reason, dim=True)}")
            lines.append("")
    lines.append(summary(report))
    return "\n".join(lines) + "\n"


def audit_document(report: Report) -> dict[str, Any]:
    """One host's audit as `--format json` writes it, alone or in a fleet's list."""
    body = report.to_json()
    status = "actionable" if report.actionable else "clean"
    return documents.document("audit", body.pop("host"), {"status": status, **body})


def as_json(report: Report, color: bool = False) -> str:
    return indented(audit_document(report)) + "\n"


# ---------------------------------------------------------------------------------------------


def markdown(report: Report, color: bool = False) -> str:
    report = printable_data(report, MULTILINE)
    host = report.host
    out = [f"# Host audit: {md.text(host.name)}", "", *host_section(host)]
    out += [f"**{summary(report)}**", "", "## Confirmed good", ""]
    out += [_remark(r) for r in report.good] or ["Nothing the audit checks holds yet."]
    out += ["", "## Actionable", ""]
    actionable = report.actionable
    if not actionable:
        out += ["Nothing: tune finds nothing to change on this host.", ""]
    for priority in Priority:
        findings = [f for f in actionable if f.priority is priority]
        if findings:
            out += [f"### {priority.value}", ""]
            for finding in findings:
                out += _finding(finding)
    reboot = [f for f in report.findings if f.phase is Phase.REBOOT]
    if reboot:
        out += ["## Needs a reboot", ""]
        for finding in reboot:
            kind = named(finding.changes[0].kind) if finding.changes else None
            restart = kind.takes_effect if kind is not None else "reboot the host"
            when = "configured; reboot the host" if finding.pending else f"fix, then {restart}"
            out.append(f"- **{finding.id}** ({when}): {md.text(finding.observed)}")
        out.append("")
    cannot = [f for f in report.findings if f.phase is None]
    if cannot:
        out += ["## Needs BIOS, hardware, a kernel or a driver change", ""]
        out += ["tune reports these and cannot change them.", ""]
        for finding in cannot:
            out += [
                f"- **{finding.id}** ({finding.priority.value}): {md.text(finding.observed)}. "
                f"Why: {md.text(finding.reason)}. Remedy: {md.text(finding.fix)}.",
                *(f"  - {md.code(e)}" for e in finding.evidence),
            ]
        out.append("")
    if report.not_issues:
        out += ["## Not an issue", ""]
        for remark in report.not_issues:
            out.append(f"- **{remark.id}**: {md.text(remark.observed)}: {md.text(remark.reason)}.")
            out += [f"  - {md.code(e)}" for e in remark.evidence]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def host_section(host: HostSummary) -> list[str]:
    """The host table and its GPUs and NICs: shared by `tune audit` and `tune report`."""
    out = [
        "| | |",
        "|---|---|",
        f"| Host | {md.text(host.name)} |",
        f"| Observed from | {md.text(host.source)} |",
        f"| CPU | {md.text(cpu_line(host))} |",
        f"| Kernel | {md.text(host.kernel or 'unknown')} |",
        f"| cpufreq | driver {md.text(host.cpufreq_driver or 'none')}, "
        f"governor {md.text(host.governor or 'none')} |",
        f"| NVIDIA driver | {md.text(host.nvidia_driver or 'not loaded')} |",
        f"| tune's boot-time files | {md.text(', '.join(host.tune_files) or 'none')} |",
        "",
    ]
    for title, devices in (("GPUs", host.gpus), ("NICs", host.nics)):
        if devices:
            out += _devices(title, devices)
    return out


def _devices(title: str, devices: tuple[Device, ...]) -> list[str]:
    rows = [
        f"| {md.text(d.address)} | {md.text(d.name)} | "
        f"{'-' if d.numa_node is None else md.text(d.numa_node)} | "
        f"{md.text(d.link or 'unreadable')} | {md.text(d.max_read_request or 'unreadable')} |"
        for d in devices
    ]
    return [
        f"### {title}",
        "",
        "| Address | Device | NUMA node | Link now | MaxReadReq |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]


def _remark(remark: Remark) -> str:
    shown = ", ".join(md.code(e) for e in remark.evidence[:2])
    return f"- **{remark.id}**: {md.text(remark.observed)} ({shown}" + (
        f" and {len(remark.evidence) - 2} more)" if len(remark.evidence) > 2 else ")"
    )


def _finding(finding: Finding) -> list[str]:
    assert finding.phase is not None
    lines = [
        f"#### {finding.id} ({finding.area.value}): {md.text(finding.observed)}",
        "",
        "Evidence:",
        "",
        *(f"- {md.code(e)}" for e in finding.evidence),
        "",
        f"Why: {md.text(finding.reason)}.",
        "",
        f"Takes effect: {TAKES_EFFECT[finding.phase]}.",
        "",
    ]
    if finding.phase is Phase.RUNTIME:  # runtime fixes are commands; boot and container
        return [*lines, *md.fence(commands(finding), "sh"), ""]  # fixes are edits to files
    return [*lines, *(f"Fix: {md.text(line)}" for line in commands(finding)), ""]


RENDERERS: dict[str, Callable[[Report, bool], str]] = {
    "text": text,
    "json": as_json,
    "markdown": markdown,
}
