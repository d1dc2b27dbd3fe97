"""`tune slurm ...`: the programs slurmd runs on a node (docs/engines/slurm.md)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import click

from ..core.errors import ExitCode, UsageError
from ..engines import slurm as engine
from .complete import roots
from .helptext import UNTUNED, SummaryGroup, examples
from .pinned import PULL_ENV, Pinned, pinned

ROOT_HELP = "A snapshot directory instead of this machine (tests and labs)."
NODE_HELP = "The node's Slurm name (default: $SLURMD_NODENAME, else the short host name)."


def _tune_argv() -> tuple[str, ...]:
    """How this tune starts again as a process: the same interpreter, the same package."""
    return (sys.executable, "-m", "reconciler.cli")


def _node(node: str | None) -> str:
    return node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def _pin(root: str | None) -> Pinned:
    """The profile this node keeps: the one a Slurm feature last chose, else the pull pin."""
    chosen = engine.NodeFiles(root).read_json(engine.CHOSEN)
    if chosen and isinstance(chosen.get("profile"), str) and isinstance(chosen.get("digest"), str):
        return Pinned(chosen["profile"], chosen["digest"])
    return pinned(Path(root) / PULL_ENV.relative_to("/") if root else PULL_ENV)


def _finish(outcome: engine.ProgramEnd) -> None:
    click.echo(outcome.message, err=outcome.code != ExitCode.IN_SYNC)
    sys.exit(outcome.code)


@examples(
    (
        "The feature of the profile the host is pinned to",
        f"tune slurm features --root {UNTUNED}",
    ),
)
@click.group("slurm", cls=SummaryGroup)
def slurm_group() -> None:
    """Programs for slurm.conf: RebootProgram, HealthCheckProgram, the node-features helper."""


@examples(
    (
        "What slurmd runs as HealthCheckProgram on node gpu1",
        "tune slurm health-check --node gpu1",
    ),
)
@slurm_group.command("health-check")
@click.option("--root", metavar="DIR", shell_complete=roots, help=ROOT_HELP)
@click.option("--node", metavar="NAME", help=NODE_HELP)
def health_check_cmd(root: str | None, node: str | None) -> None:
    """HealthCheckProgram (or one NHC check): `tune verify` after a reboot with a pending run,
    otherwise `tune check` of the pinned profile (/etc/tune/pull.env).

    \b
    On failure, drains the node with a reason that starts with `tune:` and
    notes that drain in /var/lib/tune/slurm-drain.json. Once verified or in
    sync again, resumes the node only if its reason is still the one tune set
    (or the one of a reboot tune ran, `nextstate=DOWN`). Does nothing while a
    tune run holds the host's lock. Never touches a node someone else drained.

    Exit codes: 0 healthy (or a tune run holds the lock), 2 unhealthy (drained,
    or left drained by someone else), 1 Slurm did not answer, 64 no pin.
    """
    pin = _pin(root)
    outcome = engine.health_check(
        engine.NodeFiles(root),
        engine.Tune(_tune_argv(), root),
        engine.Slurm(_node(node)),
        pin.profile,
        pin.digest,
    )
    _finish(outcome)


@examples(
    (
        "What slurmd runs as RebootProgram on node gpu1",
        "tune slurm reboot-program --node gpu1",
    ),
)
@slurm_group.command("reboot-program")
@click.option("--root", metavar="DIR", shell_complete=roots, help=ROOT_HELP)
@click.option("--node", metavar="NAME", help=NODE_HELP)
def reboot_program_cmd(root: str | None, node: str | None) -> None:
    """RebootProgram: arm the pinned profile's reboot phase (a try-once boot), ask systemd for
    the reboot without waiting, return. Never waits for the boot, never calls scontrol reboot.

    Exit codes: 0 armed and reboot asked, 3 arming failed (the reboot is asked all the same:
    Slurm asked for it), 1 the reboot could not be asked, 64 no pin.
    """
    pin = _pin(root)
    reboot = engine.snapshot_reboot(root) if root else engine.systemd_reboot
    outcome = engine.reboot_program(
        engine.NodeFiles(root),
        engine.Tune(_tune_argv(), root),
        engine.Slurm(_node(node)),
        pin.profile,
        pin.digest,
        reboot,
    )
    _finish(outcome)


@examples(
    (
        "The feature of the profile the host is pinned to (tune_<name>)",
        f"tune slurm features --root {UNTUNED}",
    ),
)
@slurm_group.command("features")
@click.argument("feature", required=False)
@click.option("--root", metavar="DIR", shell_complete=roots, help=ROOT_HELP)
@click.option(
    "--profiles",
    metavar="DIR",
    default="/etc/tune/profiles",
    show_default=True,
    help="Where the profile of each feature lies: tune_NAME is DIR/NAME.yaml.",
)
def features_cmd(feature: str | None, root: str | None, profiles: str) -> None:
    """The node-features helper (helpers.conf `Helper=`): without FEATURE, print the feature
    of the profile the node is pinned to (`tune_<name>`); with FEATURE, arm that profile's
    reboot phase for the reboot Slurm does next, and keep it as the node's profile
    (/var/lib/tune/slurm-profile.json, which the other programs read before the pin).

    Exit codes: 0 printed or armed, 64 no such profile, otherwise tune apply's.
    """
    if feature is None:
        click.echo(engine.feature_of(_pin(root).profile))
        return
    if not feature.startswith(engine.FEATURE_PREFIX):
        raise UsageError(f"{feature} is not one of tune's features (tune_<profile>).")
    name = feature.removeprefix(engine.FEATURE_PREFIX)
    path = Path(profiles) / f"{name}.yaml"
    if not path.is_file():
        raise UsageError(f"{feature}: no profile {path}.")
    from ..profile.load import load_profile
    from ..profile.source import shown

    digest = shown(load_profile(path).digest)
    armed = engine.Tune(_tune_argv(), root).arm(str(path), digest)
    if armed.code != 0:
        click.echo(f"tune: arming {path} failed: {armed.last_line()}", err=True)
        sys.exit(armed.code)
    # The node keeps this profile from now on: its health check and its next reboot use it.
    engine.NodeFiles(root).write_json(engine.CHOSEN, {"profile": str(path), "digest": digest})
    click.echo(f"tune: armed {path}")
