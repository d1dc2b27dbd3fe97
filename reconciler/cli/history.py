"""`tune history`: the runs journaled on one host, or on each host of a fleet."""

from __future__ import annotations

from typing import Any

import click

from ..apply.journal import DamagedJournal, Run, every_run
from ..core.errors import ExitCode, JournalError
from ..core.printable import printable
from ..hosts.base import ReadableHost
from ..hosts.directory import open_host
from ..plan.entries import journaled_entries
from ..render import documents
from ..steps.records import StepRecord
from .complete import roots
from .exits import exits
from .helptext import UNTUNED, examples
from .one_host import one_remote
from .output import Output, output_options
from .remote import RemoteOptions, no_root, remote_options


@examples(
    (
        "The runs journaled on the host, newest first",
        f"tune history --root {UNTUNED}",
    ),
)
@exits(ExitCode.IN_SYNC, ExitCode.HOST_ERROR, ExitCode.JOURNAL, ExitCode.USAGE)
@click.command()
@click.option(
    "--root",
    metavar="DIR",
    shell_complete=roots,
    help="Read a snapshot directory instead of this machine.",
)
@output_options("text", "json")
@remote_options
def history(root: str | None, out: Output, remote: RemoteOptions) -> int:
    """List the runs journaled on the host(s): time, profile, outcome, changes and writes. A
    damaged journal's run is listed as far as it reads, outcome "damaged"; then exit 6. Over
    several hosts, one table with a HOST column (JSON: one object per host)."""
    if remote.is_fleet:
        no_root(root)
        return _fleet_history(remote, out)
    # Read-only: only apply and rollback write (mypy holds it).
    host: ReadableHost = one_remote(root, remote) if remote.wanted else open_host(root)
    try:
        runs, damaged = every_run(host)
    finally:
        host.close()
    _history_table(host, _history_rows(runs, damaged), out)
    if damaged:  # after the table: the other runs are still worth seeing
        raise JournalError(*(p for d in damaged for p in d.problems()))
    return ExitCode.IN_SYNC


HISTORY_KEYS = ("run_id", "started", "profile", "phase", "outcome", "changes", "writes")
# CHANGES: the profile entries the run changed (a governor on 128 CPUs is one), WRITES: the
# knobs it wrote (that governor is 128).
HISTORY_HEADER = ["RUN", "STARTED", "PROFILE", "PHASE", "OUTCOME", "CHANGES", "WRITES"]


def _history_rows(runs: list[Run], damaged: list[DamagedJournal]) -> list[dict[str, Any]]:
    broken = {d.readable.run_id for d in damaged}
    return [
        {
            "run_id": run.run_id,
            "started": run.header.started if run.header else None,
            "finished": run.finished,
            "profile": run.header.profile if run.header else None,
            "phase": run.header.phase if run.header else None,
            "outcome": "damaged" if run.run_id in broken else run.outcome,
            "changes": journaled_entries(run.of_type(StepRecord)),
            "writes": len(run.steps),
        }
        for run in runs
    ]


def _fleet_history(remote: RemoteOptions, out: Output) -> int:
    """Every host's runs: one table, each row led by its host; unreachable hosts after it.
    JSON: one history document per host, as one host's."""
    from ..hosts.fleet import fleet_exit_code, for_each_host
    from ..render.fleet import problems
    from .remote import progress_on_terminal

    results = for_each_host(
        remote.open(), every_run, remote.fleet_forks(), progress_on_terminal(out)
    )
    damaged = [d for r in results if r.value is not None for d in r.value[1]]
    if out.json:

        def body(value: tuple[list[Run], list[DamagedJournal]]) -> dict[str, Any]:
            status = "damaged" if value[1] else "ok"
            return documents.versioned("history", {"status": status, "runs": _history_rows(*value)})

        # The journal does not name its host: the inventory's name is the host's here.
        listed = documents.fleet("history", results, body)
        out.document([{"host": documents.named(d["target"])} | d for d in listed])
    else:
        table: list[list[str]] = []
        for result in results:
            if result.value is None:
                table.append([result.name, "-", "-", "-", "-", "error", "-", "-"])
                continue
            rows = _history_rows(*result.value)
            table += [[result.name, *(str(r[key]) for key in HISTORY_KEYS)] for r in rows]
            if not rows:
                table.append([result.name, "-", "-", "-", "-", "no runs", "-", "-"])
        _table(["HOST", *HISTORY_HEADER], table, out)
        for result in results:
            if result.error is not None:
                out.echo(f"\n== {printable(result.name)}: error\n{problems(result)}")
    if damaged:
        raise JournalError(*(p for d in damaged for p in d.problems()))
    return fleet_exit_code(results, lambda _: True)


def _history_table(host: ReadableHost, rows: list[dict[str, Any]], out: Output) -> None:
    if out.json:
        out.document(documents.document("history", documents.named(host.name), {"runs": rows}))
    elif rows:
        _table(HISTORY_HEADER, [[str(r[key]) for key in HISTORY_KEYS] for r in rows], out)
    else:
        out.echo(f"No tune runs on {host.describe()}.")


def _table(header: list[str], rows: list[list[str]], out: Output) -> None:
    cells = [[printable(cell) for cell in row] for row in [header, *rows]]  # the journals' text
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        out.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
