"""Plans of many hosts: one summary table, then the details of every host that is not in sync;
and, after a fleet apply, what each host came to.

A consumer of the same per-host plans the single-host renderers show; JSON gives one object per
host so a script can pick hosts by status.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..core.changes import Phase, Plan
from ..core.errors import ApplyFailed
from ..core.printable import printable
from ..core.words import counted
from ..hosts.fleet import HostResult
from . import documents, md

if TYPE_CHECKING:
    from ..apply.engines import ApplyResult
    from ..steps.ops import Skipped

Renderer = Callable[[Plan, bool], str]
T = TypeVar("T")


def problems(result: HostResult[Any]) -> str:
    """A failed host's error for a terminal: one printable line a problem (it quotes the
    host's paths and values); JSON keeps the error as it is."""
    return "\n".join(printable(line) for line in documents.problems(result.error))


def status(result: HostResult[Plan]) -> str:
    """`error`, `in sync`, or how many changes (and failed checks) the host has."""
    if result.error is not None or result.value is None:
        return "error"
    plan = result.value
    if plan.is_clean:
        return "in sync"
    parts = []
    if plan.changes:
        parts.append(f"{len(plan.changes)} change{'s' * (len(plan.changes) != 1)}")
    if plan.failed_checks:
        failed = len(plan.failed_checks)
        parts.append(f"{failed} failed check{'s' * (failed != 1)}")
    return ", ".join(parts)


def _row(result: HostResult[Plan]) -> list[str]:
    plan = result.value
    if plan is None:
        return [result.name, "error", "-", "-", "-", "-"]
    runtime = sum(c.phase is Phase.RUNTIME for c in plan.changes)
    passed = len(plan.checks) - len(plan.failed_checks)
    return [
        result.name,
        status(result),
        str(runtime),
        str(len(plan.changes) - runtime),
        str(len(plan.pending)),
        f"{passed}/{len(plan.checks)}",
    ]


HEADER = ["HOST", "STATUS", "RUNTIME", "REBOOT", "PENDING", "CHECKS OK"]


def totals(results: Sequence[HostResult[Plan]]) -> str:
    errors = sum(r.error is not None for r in results)
    clean = sum(r.value is not None and r.value.is_clean for r in results)
    changed = len(results) - errors - clean
    return (
        f"{counted(len(results), 'host')}: {clean} in sync, {changed} with changes, "
        f"{errors} unreachable or failed."
    )


def table(header: list[str], rows: list[list[str]], color: bool) -> list[str]:
    """Host and status left-aligned, counts right-aligned; each row shaded by its status."""
    rows = [header, *([printable(cell) for cell in row] for row in rows)]  # inventory names
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]

    def line(row: list[str], index: int) -> str:
        cells = [
            cell.ljust(widths[i]) if i < 2 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        ]
        rendered = "  ".join(cells).rstrip()
        if not color or index == 0:
            return click.style(rendered, bold=True) if color else rendered
        return click.style(rendered, fg=SHADES.get(row[1], "yellow"))

    return [line(row, n) for n, row in enumerate(rows)]


SHADES = {
    "error": "red",
    "rolled back": "red",
    "in sync": "green",
    "applied": "green",
    "clean": "green",
}


def text(results: Sequence[HostResult[Plan]], color: bool, each: Renderer) -> str:
    out = table(HEADER, [_row(r) for r in results], color)
    out += ["", totals(results)]
    for result in results:
        if result.error is not None:
            out += ["", f"== {printable(result.name)}: error", problems(result)]
        elif result.value is not None and not result.value.is_clean:
            out += ["", f"== {printable(result.name)}", each(result.value, color).rstrip("\n")]
    return "\n".join(out) + "\n"


def hosts_markdown(
    header: list[str],
    rows: list[list[str]],
    summary: str,
    results: Sequence[HostResult[T]],
    each: Callable[[T], str | None],
) -> str:
    """A table of hosts, the summary, then each failed host's problems and what `each` says of
    every other host (None: nothing)."""
    out = ["# Fleet audit", "", "| " + " | ".join(header) + " |"]
    out.append("|" + "---|" * len(header))
    out += ["| " + " | ".join(md.text(cell) for cell in row) + " |" for row in rows]
    out += ["", summary]
    for result in results:
        if result.error is not None:  # a list: a problem quoting the host starts no block
            lines = problems(result).split("\n")
            out += ["", f"# {md.text(result.name)}: error", "", *(f"- {md.text(p)}" for p in lines)]
        elif result.value is not None:
            shown = each(result.value)
            out += [] if shown is None else ["", shown.rstrip("\n")]
    return "\n".join(out) + "\n"


def markdown(results: Sequence[HostResult[Plan]], each: Renderer) -> str:
    def details(plan: Plan) -> str | None:
        return None if plan.is_clean else each(plan, False)

    rows = [_row(r) for r in results]
    return hosts_markdown(HEADER, rows, totals(results), results, details)


def as_json(results: Sequence[HostResult[Plan]]) -> str:
    """One plan document per host (`documents.py`), an error document for a failed one."""
    return json.dumps(documents.fleet("plan", results, documents.plan_document), indent=2) + "\n"


APPLIED_HEADER = ["HOST", "RESULT", "CHANGES", "RUN"]


def _applied(result: HostResult[ApplyResult]) -> tuple[str, int | None, str | None]:
    """Result (applied, in sync, rolled back, error), changes and run id of one host."""
    done = result.value
    if done is None:
        return "rolled back" if isinstance(result.error, ApplyFailed) else "error", None, None
    return "in sync" if done.run_id is None else "applied", done.changes, done.run_id


def _applied_row(result: HostResult[ApplyResult]) -> list[str]:
    state, changes, run = _applied(result)
    return [result.name, state, "-" if changes is None else str(changes), run or "-"]


def applied(results: Sequence[HostResult[ApplyResult]], color: bool) -> str:
    """After a fleet apply: what each host came to, then why for each host that failed."""
    rows = [_applied_row(r) for r in results]
    counts = dict.fromkeys(("applied", "in sync", "rolled back", "error"), 0)
    for row in rows:
        counts[row[1]] += 1
    out = table(APPLIED_HEADER, rows, color)
    out += [
        "",
        f"{counted(len(results), 'host')}: {counts['applied']} applied, "
        f"{counts['in sync']} already in sync, {counts['rolled back']} rolled back, "
        f"{counts['error']} unreachable or failed.",
    ]
    for result, row in zip(results, rows, strict=True):
        if result.error is not None:
            out += ["", f"== {printable(result.name)}: {row[1]}", problems(result)]
    return "\n".join(out) + "\n"


APPLIED_STATUS = {"applied": "applied", "in sync": "in-sync", "rolled back": "rolled-back"}


def applied_document(
    name: str,
    result: HostResult[ApplyResult] | None,
    plan: Plan | None,
    skipped: Sequence[Skipped] = (),
) -> dict[str, Any]:
    """One host's apply: its status, the run it started, the changes it was to make (no
    `result`: a dry run), and those --skip-missing left out. The same document for `tune
    apply` on one host and on many."""
    if result is None:
        status, changes, run = "dry-run", None, None
    else:
        state, changes, run = _applied(result)
        status = APPLIED_STATUS.get(state, "error")
    body: dict[str, Any] = {
        "status": status,
        "changes": changes,
        "run": run,
        "skipped": [s.to_json() for s in skipped],
    }
    if result is not None and result.error is not None:
        body["error"] = "\n".join(documents.problems(result.error))
    if plan is not None:
        body["plan"] = documents.plan_document(plan)
    return documents.document("apply", documents.named(name), body)


def applied_json(
    results: Sequence[HostResult[ApplyResult]], plans: Sequence[HostResult[Plan]]
) -> str:
    """One apply document per host."""
    planned = {p.name: p.value for p in plans}
    objects = [
        applied_document(r.name, r, planned.get(r.name), r.value.skipped if r.value else ())
        | {"target": r.name}
        for r in results
    ]
    return json.dumps(objects, indent=2) + "\n"


def render(results: Sequence[HostResult[Plan]], fmt: str, color: bool) -> str:
    from . import RENDERERS

    if fmt == "json":
        return as_json(results)
    if fmt == "markdown":
        return markdown(results, RENDERERS["markdown"])
    return text(results, color, RENDERERS["text"])
