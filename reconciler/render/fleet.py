"""Plans of many hosts: one summary table, then the details of every host that is not in sync;
and, after a fleet apply, what each host came to.

A consumer of the same per-host plans the single-host renderers show; JSON gives one object per
host so a script can pick hosts by status.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..core.changes import Phase, Plan
from ..core.errors import ApplyFailed
from ..core.jsontext import indented
from ..core.printable import printable
from ..core.words import counted
from ..hosts.fleet import HostResult
from . import documents, md
from .folding import entries

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
    """`error`, `in sync`, or how many changes (profile entries that differ) and failed checks
    the host has."""
    if result.error is not None or result.value is None:
        return "error"
    plan = result.value
    if plan.is_clean:
        return "in sync"
    parts = []
    if plan.changes:
        parts.append(counted(entries(plan.changes), "change"))
    if plan.failed_checks:
        parts.append(counted(len(plan.failed_checks), "failed check"))
    return ", ".join(parts)


def _row(result: HostResult[Plan], plan_label: str = "-") -> list[str]:
    plan = result.value
    if plan is None:
        return [result.name, "error", "-", "-", "-", "-", "-", "-"]
    runtime = [c for c in plan.changes if c.phase is Phase.RUNTIME]
    reboot = [c for c in plan.changes if c.phase is Phase.REBOOT]
    passed = len(plan.checks) - len(plan.failed_checks)
    return [
        result.name,
        status(result),
        str(entries(runtime)),
        str(entries(reboot)),
        str(len(plan.changes)),
        str(len(plan.pending)),
        f"{passed}/{len(plan.checks)}",
        plan_label,
    ]


# RUNTIME and REBOOT count changes (profile entries, as the plan's summary does: a governor on
# 128 CPUs is one); WRITES the knobs they write (that governor is 128).
HEADER = ["HOST", "STATUS", "RUNTIME", "REBOOT", "WRITES", "PENDING", "CHECKS OK", "PLAN"]


def totals(results: Sequence[HostResult[Plan]]) -> str:
    errors = sum(r.error is not None for r in results)
    clean = sum(r.value is not None and r.value.is_clean for r in results)
    changed = len(results) - errors - clean
    return (
        f"{counted(len(results), 'host')}: {clean} in sync, {changed} with changes, "
        f"{errors} unreachable or failed" + lacking(sum(bool(skipped(r)) for r in results)) + "."
    )


def skipped(result: HostResult[Any]) -> int:
    """The entries a host's apply skips (or skipped): knobs the host does not have, and
    those --skip-missing left out."""
    value = result.value
    if isinstance(value, Plan):
        return entries(value.missing)
    return 0 if value is None else len(value.skipped)


def lacking(hosts: int) -> str:
    """What a fleet's summary adds for hosts where entries are skipped."""
    if not hosts:
        return ""
    return (
        f"; {hosts} of them skip entries, lacking the knob or module (never written, nor kept "
        "for the next boot; `tune plan` notes say which)"
    )


def table(header: list[str], rows: list[list[str]], color: bool) -> list[str]:
    """Host and status left-aligned, counts right-aligned (a last PLAN column left-aligned);
    each row shaded by its status."""
    rows = [header, *([printable(cell) for cell in row] for row in rows)]  # inventory names
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    left = {0, 1} | ({len(header) - 1} if header[-1] == "PLAN" else set())

    def line(row: list[str], index: int) -> str:
        cells = [
            cell.ljust(widths[i]) if i in left else cell.rjust(widths[i])
            for i, cell in enumerate(row)
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

# Without -v, the plans of this many groups of hosts are shown in full (those of most hosts),
# and this many more by a line each: a thousand hosts' plans, most of them alike, stay a
# table and a few plans (issue 36: under 2,000 lines at 1,000 hosts).
IN_FULL = 3
BY_LINE = 20
# Hosts named in a group's heading; the table's PLAN column names every one.
NAMED = 8


def plan_key(plan: Plan) -> Hashable:
    """What two hosts' plans must share to be shown once: all but the host itself."""
    return (
        plan.profile,
        plan.changes,
        plan.pending,
        plan.checks,
        plan.notes,
        plan.in_sync,
        plan.missing,
    )


def letters(n: int) -> str:
    """`A`..`Z`, then `AA`, `AB`..: a group's name, as a spreadsheet names columns."""
    name = ""
    n += 1
    while n:
        n, rest = divmod(n - 1, 26)
        name = chr(ord("A") + rest) + name
    return name


def named(names: Sequence[str]) -> str:
    """The first few of `names`, and how many more."""
    shown = ", ".join(printable(n) for n in names[:NAMED])
    more = len(names) - NAMED
    return shown + (f" and {more} more" if more > 0 else "")


def groups(
    results: Sequence[HostResult[T]], key: Callable[[T], Hashable | None]
) -> list[list[HostResult[T]]]:
    """The hosts with something to show (`key` not None), in groups of identical plans (equal
    keys), each where its first host is."""
    found: dict[Hashable, list[HostResult[T]]] = {}
    for result in results:
        if result.value is not None and (k := key(result.value)) is not None:
            found.setdefault(k, []).append(result)
    return list(found.values())


def labels(found: Sequence[Sequence[HostResult[T]]]) -> dict[str, str]:
    """The PLAN column: each host's group by name (`A`, `B`, ...)."""
    return {r.name: letters(n) for n, members in enumerate(found) for r in members}


def text(
    results: Sequence[HostResult[Plan]],
    color: bool,
    each: Renderer,
    *,
    verbose: bool = False,
) -> str:
    """One row a host, the summary, then each plan once with the hosts it is for and the
    errors, alike ones once. `verbose`: every host's plan and error in full, host by host."""
    found = groups(results, lambda plan: None if plan.is_clean else plan_key(plan))
    named_as = labels(found)
    out = table(HEADER, [_row(r, named_as.get(r.name, "-")) for r in results], color)
    out += ["", totals(results), *details(results, found, lambda p: each(p, color), verbose)]
    return "\n".join(out) + "\n"


def details(
    results: Sequence[HostResult[T]],
    found: Sequence[Sequence[HostResult[T]]],
    each: Callable[[T], str],
    verbose: bool,
    noun: str = "Plan",
) -> list[str]:
    """What follows a fleet's table: each group's plan (`each`, whose first line names its
    host, its last sums it up), those of most hosts in full, then the errors; `verbose`:
    every host's plan and error in full, host by host."""
    out: list[str] = []
    if verbose:
        shown = {r.name for members in found for r in members}
        for result in results:
            if result.error is not None:
                out += ["", f"== {printable(result.name)}: error", problems(result)]
            elif result.value is not None and result.name in shown:
                out += ["", f"== {printable(result.name)}", each(result.value).rstrip("\n")]
        return out
    largest = sorted(range(len(found)), key=lambda n: -len(found[n]))
    in_full = sorted(largest[:IN_FULL])
    by_line = sorted(largest[IN_FULL : IN_FULL + BY_LINE])
    for n in in_full:
        members = found[n]
        # Its first line names one host; the heading says which hosts it is for.
        body = each(members[0].value).rstrip("\n").split("\n", 1)[-1].lstrip("\n")  # type: ignore[arg-type]
        heading = f"== {noun} {letters(n)}, for {counted(len(members), 'host')}: "
        out += ["", heading + named([m.name for m in members]), body]
    if by_line:
        out += ["", f"Other {noun.lower()}s, each by its last line (-v shows each in full):"]
        for n in by_line:
            members = found[n]
            last = each(members[0].value).rstrip("\n").rsplit("\n", 1)[-1]  # type: ignore[arg-type]
            out.append(f"    {letters(n)}, for {named([m.name for m in members])}: {last}")
    hidden = len(found) - len(in_full) - len(by_line)
    if hidden:
        more = counted(hidden, f"more {noun.lower()}")
        out.append(f"    and {more} (-v or --format json shows them).")
    return out + error_lines(results)


def error_lines(results: Sequence[HostResult[Any]], heading: str = "Errors") -> list[str]:
    """Each error once, with the hosts that had it: its first problem (a host's own name in it
    read as `<host>` where several hosts share it) and how many more there are."""
    alike: dict[str, list[tuple[str, str]]] = {}
    for result in results:
        if result.error is None:
            continue
        said = documents.problems(result.error) or ["(no message)"]
        first = said[0].removeprefix(f"{result.name}: ")
        more = f" (+{len(said) - 1} more; -v shows them)" if len(said) > 1 else ""
        alike.setdefault(first.replace(result.name, "<host>") + more, []).append(
            (result.name, first + more)
        )
    out = ["", f"{heading}:"] if alike else []
    for shared, hosts in alike.items():
        if len(hosts) == 1:
            out.append(printable(f"    {hosts[0][0]}: {hosts[0][1]}"))
        else:
            names = named([name for name, _ in hosts])
            out.append(f"    {names} ({len(hosts)} hosts): {printable(shared)}")
    return out


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

    rows = [_row(r)[:-1] for r in results]  # each host's plan follows: no PLAN column
    return hosts_markdown(HEADER[:-1], rows, totals(results), results, details)


def as_json(results: Sequence[HostResult[Plan]]) -> str:
    """One plan document per host (`documents.py`), an error document for a failed one."""
    return indented(documents.fleet("plan", results, documents.plan_document)) + "\n"


# CHANGES: the profile entries the host's run changed, as its plan counts them; WRITES: the
# knobs it wrote (optional ones the kernel refused are not counted).
APPLIED_HEADER = ["HOST", "RESULT", "CHANGES", "WRITES", "SKIPPED", "RUN"]


def _applied(result: HostResult[ApplyResult]) -> tuple[str, int | None, str | None]:
    """Result (applied, in sync, rolled back, error), writes and run id of one host."""
    done = result.value
    if done is None:
        return "rolled back" if isinstance(result.error, ApplyFailed) else "error", None, None
    return "in sync" if done.run_id is None else "applied", done.writes, done.run_id


def _made(result: HostResult[ApplyResult], plan: Plan | None) -> int | None:
    """The changes (profile entries) a host's run made: those of its plan (the part the apply
    was to change) but for optional knobs the kernel refused; None where not known."""
    done = result.value
    if done is None or plan is None:
        return None
    if done.run_id is None:
        return 0
    refused = {line.split(" ", 1)[0] for line in done.unsupported}
    return entries(c for c in plan.changes if c.id not in refused)


def _applied_row(result: HostResult[ApplyResult], plan: Plan | None) -> list[str]:
    state, writes, run = _applied(result)
    made = _made(result, plan)
    lacks = 0 if plan is None else skipped(HostResult(result.name, plan))
    skips = "-" if result.value is None else str(skipped(result) + lacks)
    wrote = "-" if writes is None else str(writes)
    return [result.name, state, "-" if made is None else str(made), wrote, skips, run or "-"]


def applied(
    results: Sequence[HostResult[ApplyResult]],
    color: bool,
    plans: Sequence[HostResult[Plan]] = (),
    *,
    verbose: bool = False,
) -> str:
    """After a fleet apply: what each host came to, then why for each host that failed
    (alike errors once; `verbose`: each host's in full)."""
    planned = {p.name: p.value for p in plans}
    rows = [_applied_row(r, planned.get(r.name)) for r in results]
    counts = dict.fromkeys(("applied", "in sync", "rolled back", "error"), 0)
    for row in rows:
        counts[row[1]] += 1
    out = table(APPLIED_HEADER, rows, color)
    out += [
        "",
        f"{counted(len(results), 'host')}: {counts['applied']} applied, {counts['in sync']} "
        f"already in sync, {counts['rolled back']} rolled back, {counts['error']} unreachable "
        f"or failed" + lacking(sum(row[4] not in ("-", "0") for row in rows)) + ".",
    ]
    if not verbose:
        return "\n".join(out + error_lines(results)) + "\n"
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
        status, changes, writes, run = "dry-run", None, None, None
    else:
        state, writes, run = _applied(result)
        changes = _made(result, plan)
        status = APPLIED_STATUS.get(state, "error")
    body: dict[str, Any] = {
        "status": status,
        "changes": changes,  # profile entries the run changed
        "writes": writes,  # knobs it wrote
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
    return indented(objects) + "\n"


def render(
    results: Sequence[HostResult[Plan]], fmt: str, color: bool, *, verbose: bool = False
) -> str:
    from . import RENDERERS

    if fmt == "json":
        return as_json(results)
    if fmt == "markdown":
        return markdown(results, RENDERERS["markdown"])
    return text(results, color, RENDERERS["text"], verbose=verbose)
