"""What the commands on one host share (`tune apply`, `verify`, `rollback`, and `history`
with one host): the host and engine the options name, and the lines of a boot that held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from ..apply.pending import PendingBoot
from ..boot.verify import BootVerdict
from ..core.errors import ExitCode
from ..core.printable import printable
from ..hosts.base import Host
from ..hosts.directory import open_host
from .remote import RemoteOptions, no_root

if TYPE_CHECKING:
    from ..apply.engines import Engine
    from ..probes.phase import GateFailure


ROOT_HELP = "Apply to a snapshot directory laid out like the host's / instead of this machine."
RESTART_HELP = (
    "After the boot is verified, restart the profile's containers and check that they see "
    "/dev/nvidia*."
)


def engine_of(root: str | None, remote: RemoteOptions) -> Engine:
    """The engine of the one host the options name: a -H host, a snapshot, or this machine."""
    from ..apply.engines import engine_for

    host = one_remote(root, remote) if remote.wanted else open_host(root)
    return engine_for(host, root=root, timeout=remote.command_timeout)


def one_remote(root: str | None, remote: RemoteOptions) -> Host:
    no_root(root)
    return remote.open()[0]


def verified_lines(
    verdict: BootVerdict,
    pending: PendingBoot,
    host: Host,
    kept: list[GateFailure],
    say: Callable[[str], None],
    apply_runtime: str = "tune apply PROFILE --runtime-only",
) -> int:
    """What a verification that held says: each check, a promotion, the gates kept failing,
    then the runtime knobs that differ (not the boot's: never rolled back for); exit 2 where
    some a run applied drifted, as `tune check` would. `apply_runtime`: the command that
    applies the runtime phase on this host."""
    from ..render.verify import runtime_lines

    for line in verdict.held:
        say(f"ok  {printable(line)}")  # a value read back from the host
    if pending.promote:
        say("The new boot configuration is now the default.")
    say(f"Verified run {pending.run_id} after the boot on {host.describe()}.")
    for line in runtime_lines(verdict.not_applied, verdict.drifted, apply_runtime):
        say(printable(line))  # values read from the host
    kept_lines(kept)
    return ExitCode.CHANGES if verdict.drifted else ExitCode.IN_SYNC


def apply_runtime(root: str | None, remote: RemoteOptions, host: Host) -> str:
    """The command that applies the runtime phase to the host these options name."""
    where = f" -H {host.name}" if remote.wanted else f" --root {root}" if root else ""
    return f"tune apply PROFILE --runtime-only{where}"


def kept_lines(failures: list[GateFailure]) -> None:
    for failure in failures:
        # The verdict quotes what the probe measured on the host.
        message = printable(failure.verdict.message)
        click.echo(f"gate failed, kept: {failure.probe}: {message}", err=True)
