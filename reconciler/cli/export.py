"""`tune export ...`: a profile as the documents of engines that own the node's boot line
(OpenShift's MachineConfig, a NodeWright package). tune writes them for the operator to commit;
it never writes the boot line of a node such an engine manages. docs/engines/kubernetes.md."""

from __future__ import annotations

from pathlib import Path

import click

from ..core.errors import ExitCode
from .exits import exits
from .helptext import SummaryGroup, examples
from .options import profile_argument, profile_digest_option
from .output import Output, output_options


@examples(
    (
        "The bundled profile's kernel arguments as an OpenShift MachineConfig",
        "tune export machineconfig blackwell-8x",
    ),
)
@click.group("export", cls=SummaryGroup)
def export_group() -> None:
    """A profile as another engine's document: MachineConfig kernel arguments, a NodeWright
    package."""


@exits(ExitCode.IN_SYNC, ExitCode.USAGE, ExitCode.INVALID_PROFILE)
@examples(
    (
        "The bundled profile's kernel arguments for the worker pool",
        "tune export machineconfig blackwell-8x --role worker",
    ),
)
@export_group.command("machineconfig")
@profile_argument()
@profile_digest_option
@click.option("--role", default="worker", show_default=True, help="The machine config pool role.")
@click.option("--name", help="The object's name (default 99-ROLE-tune-PROFILE).")
@output_options("text")
def machineconfig_cmd(
    profile: str, profile_digest: str | None, role: str, name: str | None, out: Output
) -> int:
    """Print an OpenShift MachineConfig whose kernelArguments are PROFILE's cmdline.set; the
    Machine Config Operator drains, writes the boot line and reboots, pool by pool. A
    cmdline.remove cannot be said there: it is named in a comment. Exit codes: 0 printed, 64
    usage (nothing to export), 65 invalid profile."""
    from ..engines.export import machineconfig
    from ..profile.load import load_profile

    loaded = load_profile(profile, profile_digest)
    out.echo(machineconfig(loaded, role, name), nl=False)
    return ExitCode.IN_SYNC


@exits(ExitCode.IN_SYNC, ExitCode.USAGE, ExitCode.INVALID_PROFILE)
@examples(
    (
        "A NodeWright package of the bundled profile",
        "tune export nodewright blackwell-8x -d nodewright-blackwell",
    ),
)
@export_group.command("nodewright")
@profile_argument()
@profile_digest_option
@click.option(
    "-d",
    "--directory",
    required=True,
    metavar="DIR",
    help="The package directory to make (new, or empty).",
)
@click.option("--version", "version", default="1.0.0", show_default=True, help="Package version.")
@output_options("text")
def nodewright_cmd(
    profile: str, profile_digest: str | None, directory: str, version: str, out: Output
) -> int:
    """Make a NodeWright package of PROFILE in DIR: config.json, the profile (parents merged)
    and step scripts that call tune on the host (apply, arm, verify, check, rollback). The
    reboot is the agent's interrupt, declared where the package is deployed. Exit codes: 0
    made, 64 usage (DIR not empty, a bad version), 65 invalid profile."""
    from ..engines.export import STAGES, nodewright_package
    from ..profile.load import load_profile

    loaded = load_profile(profile, profile_digest)
    made = nodewright_package(loaded, Path(directory), version)
    out.echo(f"{made}: NodeWright package {loaded.profile.name} {version}")
    for mode, script in STAGES:
        out.echo(f"  {mode:<22} skyhook_dir/{script}")
    return ExitCode.IN_SYNC
