"""`tune report` as Markdown that reads well on GitHub, and as JSON (the same data). The run
record quotes the host (values, paths, messages) and the profile: each value goes through `md`
(a code span, or escaped text); tune's own words do not."""

from __future__ import annotations

from typing import Any

from ..core.changes import Change, Phase, Priority, Value
from ..core.printable import printable_data
from ..core.words import counted
from ..plan.entries import entry_of
from ..report.build import NOT_MEASURED
from . import md
from .folding import Group, blocks, fold_key, same_but_subject, subjects

OUTCOMES = {
    "applied": "applied",
    "rolled-back": "rolled back",
    "boot-rolled-back": "boot configuration rolled back by `tune verify` after the boot",
    "rollback-failed": "rollback FAILED: some changes are not restored",
    "interrupted": "interrupted (no end record; `tune rollback` restores it)",
}


def markdown(report: dict[str, Any]) -> str:
    report = printable_data(report, frozenset({"operations"}))
    run = report["run"]
    out = [
        f"# tune run {md.text(run['run_id'])}: {md.text(run['profile'])} on {md.text(run['host'])}",
        "",
        "| | |",
        "|---|---|",
        f"| Profile | {md.text(run['profile'])} |",
        f"| Phase | {md.text(run['phase'])} |",
        f"| Started | {md.text(run['started'])} |",
        f"| Finished | {md.text(run['finished'] or 'not finished')} |",
        f"| Outcome | {_outcome(run['outcome'], report['probes'])} |",
    ]
    if run["failure"]:
        out.append(f"| Why | {md.text(run['failure'])} |")
    out += ["", *_probes(report["probes"]), *_changes(report["changes"], run["outcome"])]
    out += _still_needed(report["still_needed"])
    if report["host_summary"] is not None:
        from ..audit.model import Device, HostSummary
        from .audit import host_section

        data = dict(report["host_summary"])
        gpus = tuple(Device(**d) for d in data.pop("gpus"))
        nics = tuple(Device(**d) for d in data.pop("nics"))
        data["tune_files"] = tuple(data["tune_files"])
        summary = HostSummary(**data, gpus=gpus, nics=nics)
        out += ["## Host (as observed for this report)", "", *host_section(summary)]
    return "\n".join(out).rstrip("\n") + "\n"


def _outcome(outcome: str, probes: list[dict[str, Any]]) -> str:
    kept = [md.text(p["name"]) for p in probes if p["gate"] is not None and p["gate"]["kept"]]
    if outcome == "applied" and kept:
        return f"applied, kept despite the failed gate of {', '.join(kept)} (--keep-on-regression)"
    return OUTCOMES.get(outcome, md.text(outcome))


def _probes(probes: list[dict[str, Any]]) -> list[str]:
    out = ["## Probes before and after", ""]
    if not probes:
        return [*out, "No probes ran in this run.", ""]
    # A reboot-phase run measures after the boot (tune verify), never right after the phase.
    after_boot = _measured_at(probes, "after_boot")
    columns = [("before", "Before")]
    columns += [("after", "After")] if _measured_at(probes, "after") or not after_boot else []
    columns += [("after_boot", "After the boot")] if after_boot else []
    out += [
        f"| Probe | {' | '.join(title for _, title in columns)} | Change | Gate |",
        f"|---|{'---:|' * len(columns)}---:|---|",
    ]
    for p in probes:
        cells = [_measured(p[key], p["unit"], p[f"{key}_note"]) for key, _ in columns]
        name = f"{md.text(p['name'])} ({md.code(p['metric'], cell=True)}, {p['better']} is better)"
        out.append(
            f"| {name} | {' | '.join(cells)} | "
            f"{_change(p['change_percent'], p['better'])} | {_gate(p['gate'])} |"
        )
    return [*out, ""]


def _measured_at(probes: list[dict[str, Any]], key: str) -> bool:
    return any(p[key] is not None or p[f"{key}_note"] != NOT_MEASURED for p in probes)


def _changes(changes: list[dict[str, Any]], outcome: str) -> list[str]:
    title = "## What was changed and why" if outcome == "applied" else "## What this run changed"
    out = [title, ""]
    if not changes:
        return [*out, "Nothing: the run made no changes.", ""]
    by_priority: dict[str, list[dict[str, Any]]] = {}
    for change in changes:
        by_priority.setdefault(change["priority"] or "unrecorded priority", []).append(change)
    for priority, rows in by_priority.items():
        made = len({entry_of(r["kind"], r["id"], r["setting"], r["subject"]) for r in rows})
        shown = _folded(rows)
        count = counted(made, "change") + (
            f", {counted(len(rows), 'write')}" if len(rows) != made else ""
        )
        out += [f"### {md.text(priority)} ({count})", ""]
        for block in shown:
            c = block[0]
            # A block of more than one is of rows `_as_change` reads (`_folded`).
            group = Group(tuple(ch for ch in map(_as_change, block) if ch is not None))
            label = c["id"] if len(block) == 1 else group.label
            why = f" Why: {_sentence(c['reason'])}" if c["reason"] else ""
            out.append(
                f"- **{md.text(label)}**: {_value(c['prior'])} → {_value(c['desired'])} "
                f"({md.text(c['status'])}).{why}"
            )
            ops = c["operations"] or ["(made by the step before it)"]
            out += ["", *md.fence((line for op in ops for line in op.splitlines()), indent="  ")]
            if len(block) > 1:
                out += ["", f"  The same for {md.text(subjects(group.changes[1:]))}."]
        out.append("")
    return out


def _folded(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rows in blocks, as `--dry-run` folds steps: the changes fold in the plan (`fold_key`),
    with the same outcome, and operations that differ only in their CPU or device."""

    def key(row: dict[str, Any]) -> tuple[object, ...] | None:
        change = _as_change(row)
        if change is None or not row["operations"]:
            return None
        operations = same_but_subject(row["operations"], change.subject)
        return (*fold_key(change), row["status"], operations)

    return blocks(rows, key)


def _as_change(row: dict[str, Any]) -> Change | None:
    """A journaled step's change, for the folding rule; None for one the journal names no
    subject of (a run journaled before steps carried it, a change of no CPU or device)."""
    if not row.get("subject") or row["phase"] not in PHASES or row["priority"] not in PRIORITIES:
        return None
    return Change(
        row["kind"],
        row["target"],
        _as_value(row["prior"]),
        _as_value(row["desired"]),
        Phase(row["phase"]),
        Priority(row["priority"]),
        row["reason"],
        setting=row["setting"],
        subject=row["subject"],
    )


PHASES = frozenset(p.value for p in Phase)
PRIORITIES = frozenset(p.value for p in Priority)


def _as_value(value: object) -> Value:
    return tuple(value) if isinstance(value, list) else value  # type: ignore[return-value]


def _still_needed(needed: dict[str, Any] | None) -> list[str]:
    out = ["## Still needs a reboot or the BIOS", ""]
    if needed is None:
        return [*out, "Not recorded: this run was journaled before tune recorded its plan.", ""]
    reboot, pending, checks = needed["reboot"], needed["pending"], needed["checks"]
    left, configured = needed["not_applied"], needed["configured"]
    if needed.get("reboot_to_restore"):
        out += [
            "`tune verify` rolled the boot configuration back after the boot: reboot again "
            "to boot the prior configuration.",
            "",
        ]
    elif not (reboot or pending or checks or left or configured):
        return [*out, "Nothing: after this run the host needs no reboot and no BIOS change.", ""]
    if reboot:
        out += ["### Boot-time changes this run did not make", ""]
        out += [
            _change_line(c) + (f". Why: {_sentence(c['reason'])}" if c["reason"] else ".")
            for c in reboot
        ]
        out += ["", "Run `tune apply` without `--runtime-only`, then reboot.", ""]
    if configured:
        out += _section(
            "Made by this run, in effect after the next reboot",
            [_change_line(c) for c in configured],
        )
    if pending:
        out += _section(
            "Configured, waiting for a reboot",
            [
                f"- **{md.text(p['id'])}**: running {_value(p['running'])}, "
                f"configured {_value(p['configured'])}"
                for p in pending
            ],
        )
    if checks:
        out += _section(
            "Needs the BIOS, hardware, a kernel or a driver change",
            [
                f"- **{md.text(c['id'])}**: {_value(c['observed'])}, "
                f"expected {md.text(c['expected'])}. Remedy: {_sentence(c['remedy'])}"
                for c in checks
            ],
        )
    if left:
        out += ["### Other changes this run did not make", ""]
        out += [
            f"- **{md.text(c['id'])}**: {_value(c['current'])} → {_value(c['desired'])}"
            for c in left
        ]
        out.append("")
    return out


def _measured(value: float | None, unit: str, note: str | None) -> str:
    if value is None:
        return md.text(note or "no result")
    return md.text(f"{_number(value)} {unit}".rstrip())


def _number(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _change(percent: float | None, better: str) -> str:
    if percent is None:
        return "n/a"
    if percent == 0:
        return "0.0% (no change)"
    improved = percent > 0 if better == "higher" else percent < 0
    return f"{percent:+.1f}% ({'better' if improved else 'worse'})"


def _gate(gate: dict[str, Any] | None) -> str:
    if gate is None:
        return "none"
    if gate["ok"]:
        return f"passed: {md.text(gate['message'])}"
    return f"FAILED, {'kept' if gate['kept'] else 'rolled back'}: {md.text(gate['message'])}"


def _value(value: object) -> str:
    if value is None:
        return "(absent)"
    if isinstance(value, list):
        return f"{len(value)} lines"
    return md.code(value)


def _sentence(text: str) -> str:
    """Host or profile text (a reason, a remedy) as a sentence, escaped."""
    text = md.text(text.strip())
    return text if text.endswith((".", "!", "?")) else text + "."


def _section(title: str, lines: list[str]) -> list[str]:
    """A third-level heading, its bullet lines and the blank line that ends them."""
    return [f"### {title}", "", *lines, ""]


def _change_line(change: dict[str, Any]) -> str:
    return (
        f"- **{md.text(change['id'])}** ({md.text(change['priority'])}): "
        f"{_value(change['current'])} → {_value(change['desired'])}"
    )
