"""A run's record as data, from its journal alone (plus the host summary where it can be read).

The Markdown and the JSON of `tune report` both render this dict, so they cannot disagree.
"""

from __future__ import annotations

from typing import Any

from ..apply.journal import Run
from ..core.changes import Priority, jsonable
from ..probes.gates import change_percent
from ..probes.phase import AFTER_BOOT
from ..steps.records import (
    STEP_MARKERS,
    Failed,
    GateJudged,
    PlanRecord,
    ProbesMeasured,
    Record,
    RestoreFailed,
    StepRecord,
    StepRestored,
    StepUnchanged,
    Verified,
    Written,
)

# When a run measures its probes: around the phase, and after the boot (`tune verify`).
WHEN = ("before", "after", AFTER_BOOT)
NOT_MEASURED = "not measured"

# The last marker of a step decides its status; a rolled-back run restores what it wrote.
STATUS: dict[type[Record], str] = {
    Written: "written, not verified",
    Verified: "applied",
    StepRestored: "rolled back",
    StepUnchanged: "rolled back (already at its prior value)",
    RestoreFailed: "NOT restored",
}
CHANGE_FIELDS = ("id", "current", "desired", "priority", "reason")


def build(run: Run, host: dict[str, Any] | None) -> dict[str, Any]:
    header = run.header
    failed = run.of_type(Failed)
    return {
        "run": {
            "run_id": run.run_id,
            "profile": header.profile if header else None,
            "phase": header.phase if header else None,
            "host": header.host if header else None,
            "boot_id": header.boot_id if header else None,
            "started": header.started if header else None,
            "finished": run.finished,
            "outcome": run.outcome,
            "failure": failed[-1].error if failed else None,
        },
        "host_summary": host,
        "changes": _changes(run),
        "still_needed": _still_needed(run),
        "probes": _probes(run),
    }


def _changes(run: Run) -> list[dict[str, Any]]:
    status: dict[int, str] = {}
    for record in run.records:
        if isinstance(record, STEP_MARKERS) and type(record) in STATUS:
            status[record.seq] = STATUS[type(record)]
    rows = [
        {
            "seq": record.seq,
            "id": step.id,
            "kind": step.kind,
            "target": step.target,
            "priority": record.about.priority,
            "phase": record.about.phase,
            "reason": record.about.reason,
            "prior": jsonable(step.prior),
            "desired": jsonable(step.desired),
            # Runs journaled before steps carried their operations: describe the stored ops.
            "operations": list(record.about.operations) or [op.describe() for op in step.do],
            "fix": record.about.fix,
            "setting": record.about.setting,
            "subject": record.about.subject,
            "status": status.get(record.seq, "journaled, not written"),
        }
        for record in run.of_type(StepRecord)
        for step in (record.step,)
    ]
    ranks = {p.value: i for i, p in enumerate(Priority)}
    return sorted(rows, key=lambda r: (ranks.get(r["priority"], len(ranks)), r["seq"]))


def _still_needed(run: Run) -> dict[str, Any] | None:
    plans = run.of_type(PlanRecord)
    if not plans:
        return None  # a run journaled before tune recorded its plan
    plan = plans[0]
    applied = run.outcome == "applied"
    return {
        # Written by this run but only read at the next boot (reboot-phase changes).
        "configured": [
            {k: c.get(k) for k in CHANGE_FIELDS}
            for c in plan.changes
            if applied and c.get("applied_now") and c.get("phase") == "reboot"
        ],
        "reboot": [
            {k: c.get(k) for k in CHANGE_FIELDS}
            for c in plan.changes
            if not c.get("applied_now") and c.get("phase") == "reboot"
        ],
        "not_applied": [
            {k: c.get(k) for k in CHANGE_FIELDS}
            for c in plan.changes
            if not c.get("applied_now") and c.get("phase") != "reboot"
        ],
        "pending": list(plan.pending),
        "checks": list(plan.failed_checks),
        # tune verify restored the prior boot configuration: it runs from the next boot on.
        "reboot_to_restore": run.outcome == "boot-rolled-back",
    }


def _probes(run: Run) -> list[dict[str, Any]]:
    """One row per probe: its median before the run, after it, and after the boot (what
    `tune verify` measured); the change from before to the last of those; the last gate."""
    measured: dict[str, dict[str, dict[str, Any]]] = {}
    gates: dict[str, GateJudged] = {}
    for record in run.records:
        if isinstance(record, ProbesMeasured):
            for result in record.results:
                measured.setdefault(result["name"], {})[record.when] = result
        elif isinstance(record, GateJudged):
            gates[record.probe] = record
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
                else {"ok": gate.ok, "message": gate.message, "kept": gate.kept},
            }
        )
    return rows


def _note(result: dict[str, Any] | None) -> str | None:
    if result is None:
        return NOT_MEASURED
    return result.get("error") or result.get("skipped")
