"""The `tune audit` command: cli.py registers it."""

from __future__ import annotations

import os
import re

import click

from ..audit.thresholds import Thresholds
from ..core.errors import ExitCode, UsageError
from ..hosts.fleet import fleet_exit_code, for_each_host
from .complete import roots
from .helptext import UNTUNED, examples
from .output import Output, output_options, write_atomically
from .remote import RemoteOptions, no_root, on_one_host, progress_on_terminal, remote_options


@examples(
    (
        "What is wrong with the example host, without a profile (exit 2: findings)",
        f"tune audit --root {UNTUNED}",
    ),
    (
        "A Markdown report and a profile that fixes what it found (exit 2: findings)",
        f"tune audit --root {UNTUNED} --format markdown --write-profile fixes.yaml",
    ),
)
@click.command("audit")
@click.option(
    "--root",
    metavar="PATH",
    shell_complete=roots,
    help="Read the host from a snapshot directory or .tar.gz instead of this machine.",
)
@output_options("text", "json", "markdown")
@click.option(
    "--write-profile",
    metavar="FILE.yaml",
    help="Write a profile that fixes every actionable finding (a file there: see --force).",
)
@click.option("--force", is_flag=True, help="Let --write-profile replace a file that exists.")
@click.option(
    "--min-kernel",
    metavar="VERSION",
    default=Thresholds().min_kernel,
    show_default=True,
    help="Report a kernel older than this.",
)
@remote_options
def audit_cmd(
    root: str | None,
    out: Output,
    write_profile: str | None,
    force: bool,
    min_kernel: str,
    remote: RemoteOptions,
) -> int:
    """Find what is wrong with a GPU host, without a profile. Changes nothing. Over several
    hosts (-H ... -H ..., or -i INVENTORY): a table of hosts, one of findings, then each
    finding with what every host showed.

    \b
    Exit codes: 0 nothing actionable, 2 actionable findings, 1 host unreadable,
    64 usage error.
    """
    # The audit's modules load the knob kinds; import them only when auditing.
    from ..audit.engine import audit
    from ..render.audit import RENDERERS, summary

    if not re.fullmatch(r"\d+(\.\d+){0,2}", min_kernel):
        raise UsageError(f"--min-kernel: expected a version such as 6.14, not {min_kernel!r}.")
    thresholds = Thresholds(min_kernel=min_kernel)
    if write_profile and not force and os.path.lexists(write_profile):
        # Asked before the audit reads a host: a profile written by hand is not lost to a typo.
        raise UsageError(f"{write_profile}: exists; --force replaces it.")
    if remote.is_fleet:
        if write_profile:
            raise UsageError("--write-profile describes one host; give a single -H.")
        no_root(root)
        from ..render import audit_fleet as fleet

        results = for_each_host(
            remote.open(),
            lambda host: audit(host, thresholds),
            remote.fleet_forks(),
            progress_on_terminal(out),
        )
        out.echo(fleet.render(results, out.fmt, out.color), nl=False)
        if out.to_file:
            click.echo(f"{out.path}: {fleet.totals(results)}", err=True)
        return fleet_exit_code(results, lambda report: not report.actionable)
    report = on_one_host(root, remote, lambda host: audit(host, thresholds))
    out.echo(RENDERERS[out.fmt](report, out.color), nl=False)
    if out.to_file:
        click.echo(f"{out.path}: {summary(report)}", err=True)
    if write_profile:
        from ..audit.suggest import suggested_profile

        write_atomically(write_profile, suggested_profile(report))
        click.echo(f"{write_profile}: profile fixing {len(report.actionable)} findings", err=True)
    return ExitCode.CHANGES if report.actionable else ExitCode.IN_SYNC
