"""A rollout as the operator reads it: a line (text) or a JSON object (JSON lines) per host
as it moves, the table of `tune rollout status`, and the summary: applied, rolled back,
failed, not started, and which hosts are on which configuration."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.printable import printable
from . import documents

if TYPE_CHECKING:
    from ..rollout.journal import HostEntry, Rollout

HEADER = ["WAVE", "HOST", "STATE", "CONFIGURATION", "ELAPSED", "WHY"]


def elapsed(entry: HostEntry, now: float | None = None) -> str:
    if entry.started is None:
        return "-"
    end = entry.finished if entry.finished is not None else (now or time.time())
    return f"{max(0.0, end - entry.started):.1f}s"


def host_document(rollout: Rollout, name: str, step: str | None = None) -> dict[str, Any]:
    """One host of the rollout as JSON: a line of `--format json` output, and an element of
    `tune rollout status --format json`."""
    entry = rollout.hosts[name]
    return documents.document(
        "rollout",
        documents.named(name),
        {
            "rollout": rollout.rollout_id,
            "wave": entry.wave + 1,
            "state": entry.state,
            "step": step or entry.state,
            "configuration": entry.configuration,
            "run": entry.run_id,
            "changes": entry.changes,
            "writes": entry.writes,
            "exit_code": entry.exit_code,
            "why": entry.why,
            "elapsed_s": None
            if entry.started is None or entry.finished is None
            else round(entry.finished - entry.started, 3),
        },
    )


def host_line(rollout: Rollout, name: str, step: str) -> str:
    entry = rollout.hosts[name]
    line = f"wave {entry.wave + 1}  {name}  {step}  {elapsed(entry)}"
    if entry.why and step == entry.state:
        line += f"  {entry.why}"
    return printable(line)  # the why quotes what a host said


def counts_line(rollout: Rollout) -> str:
    """How far the rollout is, in one line (a terminal's status line)."""
    counts = rollout.counts()
    return ", ".join(f"{count} {state}" for state, count in counts.items() if count)


def table(rollout: Rollout) -> str:
    rows = [HEADER] + [
        [
            str(entry.wave + 1),
            name,
            entry.state,
            entry.configuration,
            elapsed(entry),
            entry.why or "",
        ]
        for name, entry in rollout.hosts.items()
    ]
    cells = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    return "".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in cells
    )


def summary(rollout: Rollout) -> str:
    """The closing lines: the counts, then each configuration and its hosts."""
    counts = rollout.counts()
    lines = [
        f"Rollout {rollout.rollout_id}: {counts['done']} applied, {counts['rolled-back']} rolled "
        f"back, {counts['failed']} failed, {counts['not-started']} not started"
        + (f", {counts['in-flight']} in flight" if counts["in-flight"] else "")
        + "."
    ]
    for configuration, hosts in by_configuration(rollout).items():
        lines.append(f"  {configuration}: {printable(', '.join(hosts))}")  # inventory names
    if rollout.stopped:
        lines.append(printable(f"Stopped: {rollout.stopped}"))
    return "\n".join(lines) + "\n"


CONFIGURATIONS = {
    "new": "on the new configuration",
    "prior": "on the prior configuration",
    "pending": "boot not verified (tune verify -H HOST once it is up)",
    "unknown": "configuration unknown (see tune history -H HOST)",
}


def by_configuration(rollout: Rollout) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for configuration, said in CONFIGURATIONS.items():
        hosts = [n for n, e in rollout.hosts.items() if e.configuration == configuration]
        if hosts:
            found[said] = hosts
    return found


def summary_document(rollout: Rollout) -> dict[str, Any]:
    counts = rollout.counts()
    return documents.versioned(
        "rollout",
        {
            "rollout": rollout.rollout_id,
            "profile": rollout.profile,
            "digest": rollout.digest,
            "created": rollout.created,
            "stopped": rollout.stopped,
            "waves": rollout.waves,
            "counts": counts,
            "configurations": {
                c: [n for n, e in rollout.hosts.items() if e.configuration == c]
                for c in CONFIGURATIONS
            },
        },
    )


def no_rollout_document(directory: object) -> dict[str, Any]:
    return documents.versioned("rollout", {"rollout": None, "directory": str(directory)})


def status_document(rollout: Rollout) -> dict[str, Any]:
    return summary_document(rollout) | {
        "hosts": [host_document(rollout, name) for name in rollout.hosts]
    }


def json_line(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True)


@dataclass(frozen=True)
class UnreadableRollout:
    """A rollout journal `tune rollout list` could not read: its id and why."""

    rollout_id: str
    error: str


LIST_HEADER = ["ROLLOUT", "CREATED", "STATE", "HOSTS", "DONE", "FAILED", "LEFT", "PROFILE"]


def list_table(rollouts: list[Rollout | UnreadableRollout]) -> str:
    """`tune rollout list`: a row per rollout, as given (newest first)."""
    rows = [LIST_HEADER]
    for one in rollouts:
        if isinstance(one, UnreadableRollout):
            rows.append([one.rollout_id, "-", "unreadable", "-", "-", "-", "-", one.error])
            continue
        counts = one.counts()
        rows.append(
            [
                one.rollout_id,
                one.created,
                one.state(),
                str(len(one.hosts)),
                str(counts["done"]),
                str(counts["failed"] + counts["rolled-back"]),
                str(counts["not-started"] + counts["in-flight"]),
                one.profile,
            ]
        )
    cells = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(LIST_HEADER))]
    return "".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in cells
    )


def list_document(rollouts: list[Rollout | UnreadableRollout]) -> dict[str, Any]:
    """`tune rollout list --format json`: the rollouts, newest first."""
    listed: list[dict[str, Any]] = []
    for one in rollouts:
        if isinstance(one, UnreadableRollout):
            listed.append({"rollout": one.rollout_id, "state": "unreadable", "error": one.error})
            continue
        listed.append(
            {
                "rollout": one.rollout_id,
                "created": one.created,
                "state": one.state(),
                "profile": one.profile,
                "stopped": one.stopped,
                "hosts": len(one.hosts),
                "waves": len(one.waves),
                "counts": one.counts(),
            }
        )
    return documents.versioned("rollout", {"rollouts": listed})
