"""A run's record as data, from its journal alone (plus the host summary where it can be read).

The Markdown and the JSON of `tune report` both render this dict, so they cannot disagree.
"""

from __future__ import annotations

from typing import Any

from ..apply.journal import Run
from ..plan.model import Priority
from ..probes.gates import change_percent
from ..probes.phase import AFTER_BOOT

# When a run measures its probes: around the phase, and after the boot (`tune verify`).
WHEN = ("before", "after", AFTER_BOOT)
NOT_MEASURED = "not measured"

# The last marker of a step decides its status; a rolled-back run restores what it wrote.
STATUS = {
    "written": "written, not verified",
    "verified": "applied",
    "restored": "rolled back",
    "unchanged": "rolled back (already at its prior value)",
    "restore-failed": "NOT restored",
}


def build(run: Run, host: dict[str, Any] | None) -> dict[str, Any]:
    header = run.header
    failed = [r for r in run.records if r.get("type") == "failed"]
    return {
        "run": {
            "run_id": run.run_id,
            "profile": header.get("profile"),
            "phase": header.get("phase"),
            "host": header.get("host"),
            "boot_id": header.get("boot_id"),
            "started": header.get("started"),
            "finished": run.finished,
            "outcome": run.outcome,
            "failure": failed[-1].get("error") if failed else None,
        },
        "host_summary": host,
        "changes": _changes(run),
        "still_needed": _still_needed(run),
        "probes": _probes(run),
    }


def _changes(run: Run) -> list[dict[str, Any]]:
    parsed = dict(run.steps)
    status: dict[int, str] = {}
    steps: list[dict[str, Any]] = []
    for record in run.records:
        kind = record.get("type")
        if kind == "step":
            steps.append(record)
        elif kind in STATUS and "seq" in record:
            status[int(record["seq"])] = STATUS[str(kind)]
    rows = [
        {
            "seq": step["seq"],
            "id": step["id"],
            "kind": step["kind"],
            "target": step["target"],
            "priority": step.get("priority"),
            "phase": step.get("phase"),
            "reason": step.get("reason", ""),
            "prior": step.get("prior"),
            "desired": step.get("desired"),
            # Runs journaled before steps carried their operations: describe the stored ops.
            "operations": step.get("operations")
            or [op.describe() for op in parsed[int(step["seq"])].do],
            "fix": step.get("fix"),
            "status": status.get(int(step["seq"]), "journaled, not written"),
        }
        for step in steps
    ]
    ranks = {p.value: i for i, p in enumerate(Priority)}
    return sorted(rows, key=lambda r: (ranks.get(r["priority"], len(ranks)), r["seq"]))


def _still_needed(run: Run) -> dict[str, Any] | None:
    plans = [r for r in run.records if r.get("type") == "plan"]
    if not plans:
        return None  # a run journaled before tune recorded its plan
    plan = plans[0]
    applied = run.outcome == "applied"
    return {
        # Written by this run but only read at the next boot (reboot-phase changes).
        "configured": [
            {k: c.get(k) for k in ("id", "current", "desired", "priority", "reason")}
            for c in plan.get("changes", [])
            if applied and c.get("applied_now") and c.get("phase") == "reboot"
        ],
        "reboot": [
            {k: c.get(k) for k in ("id", "current", "desired", "priority", "reason")}
            for c in plan.get("changes", [])
            if not c.get("applied_now") and c.get("phase") == "reboot"
        ],
        "not_applied": [
            {k: c.get(k) for k in ("id", "current", "desired", "priority", "reason")}
            for c in plan.get("changes", [])
            if not c.get("applied_now") and c.get("phase") != "reboot"
        ],
        "pending": plan.get("pending", []),
        "checks": plan.get("failed_checks", []),
        # tune verify restored the prior boot configuration: it runs from the next boot on.
        "reboot_to_restore": run.outcome == "boot-rolled-back",
    }


def _probes(run: Run) -> list[dict[str, Any]]:
    """One row per probe: its median before the run, after it, and after the boot (what
    `tune verify` measured); the change from before to the last of those; the last gate."""
    measured: dict[str, dict[str, dict[str, Any]]] = {}
    gates: dict[str, dict[str, Any]] = {}
    for record in run.records:
        if record.get("type") == "probes":
            for result in record.get("results", []):
                measured.setdefault(result["name"], {})[str(record.get("when"))] = result
        elif record.get("type") == "gate":
            gates[str(record.get("probe"))] = record
    rows = []
    for name, by_when in measured.items():
        before = by_when.get("before")
        first = next(iter(by_when.values()))
        medians = {when: by_when[when].get("median") if when in by_when else None for when in WHEN}
        b = medians["before"]
        last = medians[AFTER_BOOT] if AFTER_BOOT in by_when else medians["after"]
        gate = gates.get(name)
        rows.append(
            {
                "name": name,
                "metric": first.get("metric"),
                "unit": first.get("unit", ""),
                "better": first.get("better", "higher"),
                "before": b,
                "after": medians["after"],
                "after_boot": medians[AFTER_BOOT],
                "change_percent": None if last is None or b is None else change_percent(b, last),
                "before_note": _note(before),
                "after_note": _note(by_when.get("after")),
                "after_boot_note": _note(by_when.get(AFTER_BOOT)),
                "gate": None
                if gate is None
                else {
                    "ok": gate.get("ok"),
                    "message": gate.get("message"),
                    "kept": gate.get("kept"),
                },
            }
        )
    return rows


def _note(result: dict[str, Any] | None) -> str | None:
    if result is None:
        return NOT_MEASURED
    return result.get("error") or result.get("skipped")
