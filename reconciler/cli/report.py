"""`tune report`: write the record of a run, read from its journal."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..core.errors import ExitCode
from ..render import documents
from .complete import roots, run_ids
from .exits import exits
from .helptext import UNTUNED, examples
from .output import Output, output_options
from .remote import RemoteOptions, on_one_host, one_host_options

if TYPE_CHECKING:
    from ..apply.journal import Run
    from ..audit.model import HostSummary
    from ..hosts.base import ReadableHost

ROOT_HELP = "Read the runs of a snapshot directory instead of this machine."


@examples(
    (
        "What the newest run did, in Markdown for a ticket",
        f"tune report --root {UNTUNED}",
    ),
    (
        "The same as JSON, into a file",
        f"tune report --root {UNTUNED} --format json -o run.json",
    ),
)
@exits(ExitCode.IN_SYNC, ExitCode.HOST_ERROR, ExitCode.JOURNAL, ExitCode.USAGE)
@click.command("report")
@click.argument("run_id", required=False, shell_complete=run_ids)
@click.option("--root", metavar="DIR", shell_complete=roots, help=ROOT_HELP)
@output_options("markdown", "json")
@one_host_options
def report_cmd(run_id: str | None, root: str | None, out: Output, remote: RemoteOptions) -> int:
    """The record of a run (the newest by default): probes before and after, what was
    changed and why, by priority, with the exact operations, and what still needs a reboot
    or the BIOS. With -H, the run is read from the target's journal.
    """
    from ..render.report import markdown
    from ..report.build import build

    run, summary, name = on_one_host(root, remote, lambda host: _read(host, run_id))
    data = build(run, None if summary is None else summary.to_json())
    if out.json:
        out.document(documents.document("report", documents.named(name), data))
    else:
        out.echo(markdown(data), nl=False)
    if out.to_file:
        click.echo(f"{out.path}: run {run.run_id} ({data['run']['outcome']}).", err=True)
    return ExitCode.IN_SYNC


def _read(host: ReadableHost, run_id: str | None) -> tuple[Run, HostSummary | None, str]:
    """The run (the newest by default), the host summary and the host's name: three reads,
    whatever the host."""
    from ..apply.journal import chosen_run
    from ..audit.engine import host_summary

    return chosen_run(host, run_id, "report"), host_summary(host), host.name
