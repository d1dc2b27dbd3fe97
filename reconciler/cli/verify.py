"""`tune verify`: after the reboot a reboot-phase apply prepared, check the boot and promote or
roll back its configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..core.errors import ExitCode
from ..hosts.base import Host
from ..render import documents
from .complete import roots
from .exits import exits
from .helptext import UNTUNED, examples
from .one_host import RESTART_HELP, engine_of, verified_lines
from .output import Output, output_options
from .remote import RemoteOptions, one_host_options

if TYPE_CHECKING:
    from ..flow.orchestration import BootHeld


@examples(
    (
        "After the reboot: promote the boot configuration, or roll it back",
        f"tune verify --root {UNTUNED}",
    ),
)
@exits(
    ExitCode.IN_SYNC,
    ExitCode.HOST_ERROR,
    ExitCode.APPLY_FAILED,
    ExitCode.JOURNAL,
    ExitCode.NOT_REBOOTED,
    ExitCode.USAGE,
)
@click.command()
@click.option(
    "--root",
    metavar="DIR",
    shell_complete=roots,
    help="Verify a snapshot directory instead of this machine.",
)
@click.option(
    "--keep-on-regression",
    is_flag=True,
    help="Keep the boot configuration even when a probe gate fails after the boot.",
)
@click.option("--restart-containers", is_flag=True, help=RESTART_HELP)
@output_options("text", "json")
@one_host_options
def verify(
    root: str | None,
    keep_on_regression: bool,
    restart_containers: bool,
    out: Output,
    remote: RemoteOptions,
) -> int:
    """After the reboot that a reboot-phase apply prepared: check that the boot brought what it
    must (kernel parameters, NVIDIA majors of each container, the runtime part still held).

    \b
    With --restart-containers (or when the apply asked for it), then restarts
    each container of the profile and checks it sees every /dev/nvidia* node.
    Then the probes the apply measured before run again; a gate that fails
    counts as a failed check unless --keep-on-regression. On failure, rolls
    the boot configuration back, says what did not hold, exits 3. After a
    one-time boot (`tune apply --reboot`, or --arm and a reboot by anyone),
    success makes the new configuration the default. Before that boot (the
    same boot id), checks nothing and exits 10: not rebooted yet.
    """
    from ..flow.orchestration import verify_one

    engine = engine_of(root, remote)
    try:
        verified = verify_one(
            engine, keep_on_regression=keep_on_regression, restart_containers=restart_containers
        )
    finally:
        engine.host.close()
    host = engine.host
    if out.json:
        out.document(verify_document(host, verified))
        return ExitCode.IN_SYNC
    if verified is None:
        out.echo(f"Nothing to verify on {host.describe()}: no reboot-phase apply pending.")
        return ExitCode.IN_SYNC
    return verified_lines(verified.verdict, verified.pending, host, verified.kept, out.echo)


def verify_document(host: Host, verified: BootHeld | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": "nothing-pending",
        "run": None,
        "held": [],
        "promoted": False,
        "kept_gates": [],
    }
    if verified is not None:
        body = {
            "status": "verified",
            "run": verified.pending.run_id,
            "held": verified.verdict.held,
            "promoted": bool(verified.pending.promote),
            "kept_gates": [{"probe": f.probe, "message": f.verdict.message} for f in verified.kept],
        }
    return documents.document("verify", documents.named(host.name), body)
