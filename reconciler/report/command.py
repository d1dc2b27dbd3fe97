"""`tune report`: write the record of a run, read from its journal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..cli.exits import exits
from ..cli.options import format_option
from ..cli.remote import RemoteOptions, on_one_host, remote_options
from ..errors import ExitCode, HostError, UsageError

if TYPE_CHECKING:
    from ..apply.journal import Run
    from ..audit.model import HostSummary
    from ..hosts.base import ReadableHost

ROOT_HELP = "Read the runs of a snapshot directory instead of this machine."


@exits(ExitCode.IN_SYNC, ExitCode.HOST_ERROR, ExitCode.JOURNAL, ExitCode.USAGE)
@click.command("report")
@click.argument("run_id", required=False)
@click.option("--root", metavar="DIR", help=ROOT_HELP)
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE, not stdout.")
@format_option("markdown", "json")
@remote_options
def report_cmd(
    run_id: str | None, root: str | None, output: str | None, fmt: str, remote: RemoteOptions
) -> int:
    """The record of a run (the newest by default): probes before and after, what was
    changed and why, by priority, with the exact operations, and what still needs a reboot
    or the BIOS. With -H, the run is read from the target's journal.
    """
    from .build import build
    from .render import as_json, markdown

    if remote.is_fleet:
        raise UsageError("tune report reads one -H host at a time.")
    run, summary = on_one_host(root, remote, lambda host: _read(host, run_id))
    chosen = run.run_id
    data = build(run, None if summary is None else summary.to_json())
    rendered = as_json(data) if fmt == "json" else markdown(data)
    if output is None:
        click.echo(rendered, nl=False)
        return ExitCode.IN_SYNC
    try:
        Path(output).write_text(rendered, encoding="utf-8")
    except OSError as exc:
        raise HostError(f"{output}: cannot write ({exc.strerror}).") from exc
    click.echo(f"{output}: run {chosen} ({data['run']['outcome']}).")
    return ExitCode.IN_SYNC


def _read(host: ReadableHost, run_id: str | None) -> tuple[Run, HostSummary | None]:
    """The run (the newest by default) and the host summary: three reads, whatever the host."""
    from ..apply.journal import chosen_run
    from ..audit.engine import host_summary

    return chosen_run(host, run_id, "report"), host_summary(host)
