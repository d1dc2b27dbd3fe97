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
# keep it.
FORMAT_VERSION = 1

T = TypeVar("T")


# Every command that reports, in the order `tune schema --help` lists them.
KINDS = (
    "plan",
    "check",
    "apply",
    "rollback",
    "verify",
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


def plan_summary(plan: Plan) -> dict[str, int]:
    """The counts the text plan's last line gives, for a script that only wants those."""
    runtime = sum(c.phase is Phase.RUNTIME for c in plan.changes)
    return {
        "changes": len(plan.changes),
        "runtime": runtime,
        "reboot": len(plan.changes) - runtime,
        "in_sync": len(plan.in_sync),
        "pending": len(plan.pending),
        "checks": len(plan.checks),
        "failed_checks": len(plan.failed_checks),
    }


def plan_document(plan: Plan) -> dict[str, Any]:
    status = "in-sync" if plan.is_clean else "changes"
    body = plan.to_json()
    return document("plan", body.pop("host"), {"status": status, **body}) | {
        "summary": plan_summary(plan)
    }
