"""`tune status`: what tune last left on a host, from /var/lib/tune/status.json."""

from __future__ import annotations

import click

from ..core.errors import ExitCode, HostError
from ..core.files import Request
from ..hosts.base import ReadableHost
from ..hosts.directory import open_host
from ..render import status as render
from ..steps.status import STATUS
from .complete import roots
from .exits import exits
from .helptext import UNTUNED, examples
from .one_host import one_remote
from .output import Output, output_options
from .remote import RemoteOptions, one_host_options


@examples(
    (
        "What tune last left on the host",
        f"tune status --root {UNTUNED}",
    ),
    (
        "The same as JSON, for a monitoring script",
        f"tune status --root {UNTUNED} --format json",
    ),
)
@exits(ExitCode.IN_SYNC, ExitCode.HOST_ERROR, ExitCode.USAGE)
@click.command()
@click.option(
    "--root",
    metavar="DIR",
    shell_complete=roots,
    help="Read a snapshot directory instead of this machine.",
)
@output_options("text", "json")
@one_host_options
def status(root: str | None, out: Output, remote: RemoteOptions) -> int:
    """Print what tune last left on the host: the profile and its digest, in sync or the
    drift found, a boot configuration waiting for the reboot (armed: a one-time boot,
    `tune apply --reboot-phase --arm`), the last verification with its boot id and verdict.

    \b
    Reads /var/lib/tune/status.json, which tune apply, tune verify and tune check
    (on this machine or a snapshot tune applied to) replace whole after each run.
    JSON (--format json): the file's fields. A host with no status yet prints
    so and exits 0 (JSON: every field null or false); exits 1 when the file
    cannot be read or is not one tune wrote. Reads only, one round trip.
    """
    from ..flow.status import parse

    host: ReadableHost = one_remote(root, remote) if remote.wanted else open_host(root)
    try:
        files = host.fetch(Request.of(whole=[STATUS]))
    finally:
        host.close()
    if STATUS in files.errors:
        raise HostError(f"{host.describe()}: {STATUS}: cannot read it ({files.errors[STATUS]}).")
    found = parse(files.read(STATUS))
    if out.json:
        out.document(render.document(host.name, found))
    else:
        out.echo(render.text(host.describe(), found, out.color), nl=False)
    return ExitCode.IN_SYNC
