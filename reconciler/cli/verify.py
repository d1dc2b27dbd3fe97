"""`tune verify`: after the reboot a reboot-phase apply prepared, check the boot and promote or
roll back its configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..core.errors import ExitCode
from ..core.printable import printable
from ..hosts.base import Host
from ..render import documents
from ..render.verify import runtime_lines
from .complete import roots
from .exits import exits
from .helptext import UNTUNED, examples
from .one_host import RESTART_HELP, apply_runtime, engine_of, verified_lines
from .output import Output, output_options
from .remote import RemoteOptions, one_host_options

if TYPE_CHECKING:
    from ..boot.reboot import BootFailed
    from ..boot.verify import BootVerdict
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
    ExitCode.CHANGES,
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
    """After the reboot that a reboot-phase apply prepared: check that the boot brought what the
    run configured for it (kernel parameters, NVIDIA majors of each container).

    \b
    Runtime knobs of the profile that differ are reported, never a reason to
    roll the boot back: those no run applied as not applied (exit 0), those
    a run applied that no longer hold as drift (exit 2, as tune check).
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
    from ..boot.reboot import BootFailed
    from ..flow.orchestration import verify_one

    engine = engine_of(root, remote)
    try:
        verified = verify_one(
            engine, keep_on_regression=keep_on_regression, restart_containers=restart_containers
        )
    except BootFailed as failed:
        if not out.json:
            # What differs besides the boot, said before the failure (never its cause).
            again = apply_runtime(root, remote, engine.host)
            for line in runtime_lines(failed.verdict.not_applied, failed.verdict.drifted, again):
                out.echo(printable(line))
            raise
        # The whole list the message names the first few of.
        out.document(failed_document(engine.host, failed))
        return failed.exit_code
    finally:
        engine.host.close()
    host = engine.host
    if out.json:
        out.document(verify_document(host, verified))
        drifted = verified is not None and verified.verdict.drifted
        return ExitCode.CHANGES if drifted else ExitCode.IN_SYNC
    if verified is None:
        out.echo(f"Nothing to verify on {host.describe()}: no reboot-phase apply pending.")
        return ExitCode.IN_SYNC
    again = apply_runtime(root, remote, host)
    return verified_lines(verified.verdict, verified.pending, host, verified.kept, out.echo, again)


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
    body |= runtime_json(verified.verdict if verified is not None else None)
    return documents.document("verify", documents.named(host.name), body)


def failed_document(host: Host, failed: BootFailed) -> dict[str, Any]:
    """A boot that did not hold, its configuration rolled back: every thing that failed."""
    body: dict[str, Any] = {
        "status": "rolled-back",
        "run": failed.run_id,
        "held": failed.verdict.held,
        "failed": failed.verdict.failed,
        "rolled_back": failed.undone,
        "promoted": False,
        "kept_gates": [],
    }
    body |= runtime_json(failed.verdict)
    return documents.document("verify", documents.named(host.name), body)


def runtime_json(verdict: BootVerdict | None) -> dict[str, Any]:
    """The runtime knobs that differ after the boot, each knob (never rolled back for)."""
    return {
        "not_applied": [c.to_json() for c in verdict.not_applied] if verdict else [],
        "drift": [c.to_json() for c in verdict.drifted] if verdict else [],
    }
