"""The JSON every command writes with `--format json`: one document per host, versioned.

Each document starts with `format_version` and `kind` (the command) and names its `host`; a
fleet's output is a list of the same documents, one per host, a host that failed being a
document with `"status": "error"`. `schemas.py` describes each kind; `tune schema --KIND`
prints it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..core.changes import Phase, Plan
from ..core.errors import TuneError
from ..hosts.fleet import HostResult

# Raised when a document changes incompatibly (a field removed, renamed or retyped); new fields
# keep it. 2: a count named `changes` counts changes (profile entries that differ), never writes
# (knobs written): the plan's `summary.changes`, `runtime` and `reboot`, apply's and history's
# `changes`, a rollout host's `changes`; the writes are `writes` beside them.
FORMAT_VERSION = 2

T = TypeVar("T")


# Every command that reports, in the order `tune schema --help` lists them.
KINDS = (
    "plan",
    "check",
    "apply",
    "rollback",
    "verify",
    "status",
    "history",
    "report",
    "audit",
    "probe",
    "snapshot",
    "validate",
    "profiles",
    "config",
    "rollout",
)


def versioned(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"format_version": FORMAT_VERSION, "kind": kind} | body


def document(kind: str, host: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The document of a command that read or worked on `host`."""
    return versioned(kind, {"host": host} | body)


def named(name: str) -> dict[str, Any]:
    """The host of a command that knows only its name (history, rollback, a failed host)."""
    return {"name": name}


def failed(kind: str, name: str, error: BaseException | None) -> dict[str, Any]:
    """A host of a fleet that could not be read or worked on."""
    return document(kind, named(name), {"status": "error", "error": "\n".join(problems(error))})


def problems(error: BaseException | None) -> list[str]:
    """An error's problems, one a line, as the host said them (JSON escapes them itself)."""
    return error.problems() if isinstance(error, TuneError) else [str(error)]


def fleet(
    kind: str, results: Sequence[HostResult[T]], body: Callable[[T], dict[str, Any]]
) -> list[dict[str, Any]]:
    """One document per host, in the fleet's order, each with the `target` the fleet named
    it by (the host's own name, in `host`, may be another)."""
    return [
        (failed(kind, r.name, r.error) if r.value is None else body(r.value)) | {"target": r.name}
        for r in results
    ]


def plan_summary(plan: Plan) -> dict[str, Any]:
    """The counts the text plan's last line gives, for a script that only wants those, in
    the text's words: `changes`, the profile entries that differ (a governor on 128 CPUs is
    one change), by phase, and `writes`, the knobs they write (that governor is 128 writes).
    `entries` counts entries as check's summary does (`entries.changes` is `changes`)."""
    from .folding import entries

    changes = plan.changes
    runtime = [c for c in changes if c.phase is Phase.RUNTIME]
    reboot = [c for c in changes if c.phase is Phase.REBOOT]
    writes = {"total": len(changes), "runtime": len(runtime), "reboot": len(reboot)}
    return {
        "changes": entries(changes),
        "runtime": entries(runtime),
        "reboot": entries(reboot),
        "writes": writes,
        "in_sync": len(plan.in_sync),
        "pending": len(plan.pending),
        "checks": len(plan.checks),
        "failed_checks": len(plan.failed_checks),
        "entries": {
            "changes": entries(changes),
            "runtime": entries(runtime),
            "reboot": entries(reboot),
            "in_sync": entries(plan.in_sync),
        },
    }


def plan_document(plan: Plan) -> dict[str, Any]:
    """The plan: each change and pending reboot with what the text and Markdown views show
    of it (`changes.py`), and the knobs already in sync, which the Markdown report lists."""
    from .changes import changes_json, in_sync_json, pending_json

    status = "in-sync" if plan.is_clean else "changes"
    body = plan.to_json() | {
        "changes": changes_json(plan.changes),
        "pending": [pending_json(p) for p in plan.pending],
    }
    return document("plan", body.pop("host"), {"status": status, **body}) | {
        "in_sync_knobs": in_sync_json(plan.in_sync),
        "summary": plan_summary(plan),
    }
