"""`tune kube ...`: what a Kubernetes node agent (a DaemonSet's pod, privileged, the host's
file system mounted) runs on the node. No API client and no credentials: each command leaves a
file that the cluster's own agents (kured, nfd-worker) read, or prints a document for the
operator. The contract: docs/engines/kubernetes.md."""

from __future__ import annotations

import click

from ..core.errors import ExitCode
from ..profile.bundled import shown
from .complete import roots
from .exits import exits
from .helptext import UNTUNED, SummaryGroup, examples
from .options import profile_argument, profile_digest_option
from .output import Output, output_options

ROOT_HELP = "Work on a snapshot directory instead of this machine."


@examples(
    (
        "The node's labels for Node Feature Discovery",
        f"tune kube features --root {UNTUNED}",
    ),
)
@click.group("kube", cls=SummaryGroup)
def kube_group() -> None:
    """Files for Kubernetes' node agents (kured's sentinel, Node Feature Discovery's labels)
    and the GPU Operator's ConfigMap, without an API client or credentials on the node."""


@exits(ExitCode.IN_SYNC, ExitCode.HOST_ERROR, ExitCode.USAGE)
@examples(
    (
        "Whether kured should reboot the node for tune",
        f"tune kube sentinel --root {UNTUNED}",
    ),
)
@kube_group.command("sentinel")
@click.option(
    "--path",
    default="/run/reboot-required",
    show_default=True,
    help="The sentinel kured watches (its --reboot-sentinel).",
)
@click.option("--root", metavar="DIR", shell_complete=roots, help=ROOT_HELP)
@output_options("text")
def sentinel(path: str, root: str | None, out: Output) -> int:
    """Make kured's reboot sentinel while a boot configuration tune wrote waits for a reboot
    (armed or prepared in this boot), only where no other tool made one; remove it once the
    boot happened (or the wait ended), only where tune made it. Run it every cycle: it does
    nothing when nothing changed. Exit codes: 0 done (whatever it found), 1 the host could
    not be read or written, 64 usage."""
    from ..engines.kube import reconcile_sentinel
    from ..hosts.directory import open_host

    host = open_host(root)
    try:
        outcome = reconcile_sentinel(host, root, path)
    finally:
        host.close()
    out.echo(outcome.said)
    return ExitCode.IN_SYNC


@exits(ExitCode.IN_SYNC, ExitCode.HOST_ERROR, ExitCode.USAGE)
@examples(
    (
        "The node's labels, into nfd-worker's local source",
        f"tune kube features --root {UNTUNED}",
    ),
)
@kube_group.command("features")
@click.option(
    "--path",
    default="/etc/kubernetes/node-feature-discovery/features.d/tune",
    show_default=True,
    help="The feature file nfd-worker's local source reads.",
)
@click.option("--root", metavar="DIR", shell_complete=roots, help=ROOT_HELP)
@output_options("text")
def features(path: str, root: str | None, out: Output) -> int:
    """Write Node Feature Discovery's feature file: tune-profile, tune-in-sync,
    tune-reboot-pending, tune-armed, tune-digest (labels under feature.node.kubernetes.io/),
    from /var/lib/tune/status.json and the pending boot, replaced by rename. Exit codes: 0
    written, 1 the host could not be read or written, 64 usage."""
    from ..engines.kube import write_features
    from ..hosts.directory import open_host

    host = open_host(root)
    try:
        labels = write_features(host, path)
    finally:
        host.close()
    for name, value in sorted(labels.items()):
        out.echo(f"{name}={value}")
    return ExitCode.IN_SYNC


@exits(ExitCode.IN_SYNC, ExitCode.HOST_ERROR, ExitCode.USAGE, ExitCode.INVALID_PROFILE)
@examples(
    (
        "The GPU Operator's kernel module ConfigMap for the bundled profile",
        f"tune kube gpu-operator blackwell-8x --root {UNTUNED}",
    ),
)
@kube_group.command("gpu-operator")
@profile_argument()
@profile_digest_option
@click.option("--name", default="kernel-module-params", show_default=True, help="ConfigMap name.")
@click.option("--namespace", default="gpu-operator", show_default=True, help="Its namespace.")
@click.option("--root", metavar="DIR", shell_complete=roots, help=ROOT_HELP)
@output_options("text")
def gpu_operator(
    profile: str,
    profile_digest: str | None,
    name: str,
    namespace: str,
    root: str | None,
    out: Output,
) -> int:
    """Print the GPU Operator's kernel-module ConfigMap carrying PROFILE's NVreg_ parameters.
    Where the operator's driver container owns the driver, these parameters are the
    operator's (driver.kernelModuleConfig.name), never /etc/modprobe.d: tune writes nothing
    there. Says on stderr whether this host (or --root) bears the driver container's mark.
    Exit codes: 0 printed, 1 the host could not be read, 64 usage, 65 invalid profile."""
    from ..engines.kube import (
        driver_container_owns,
        kernel_module_configmap,
        nvreg_params,
    )
    from ..facts.nvidia_params import DRIVER_CONTAINER_MARK
    from ..hosts.directory import open_host
    from ..profile.load import load_profile

    loaded = load_profile(profile, profile_digest)
    params = nvreg_params(loaded)
    host = open_host(root)
    try:
        owned = driver_container_owns(host)
    finally:
        host.close()
    where = host.describe()
    if owned:
        said = f"{where}: the GPU Operator's driver container owns the driver "
        said += f"({DRIVER_CONTAINER_MARK})."
    else:
        said = f"{where}: no GPU Operator driver container mark ({DRIVER_CONTAINER_MARK})."
    click.echo(said, err=True)
    if not params:
        click.echo(
            f"{shown(loaded.path)}: no NVreg_ parameters of nvidia; the ConfigMap is empty.",
            err=True,
        )
    out.echo(kernel_module_configmap(params, name, namespace), nl=False)
    return ExitCode.IN_SYNC
