"""`tune probe`: run a profile's probes and print what they measured."""

from __future__ import annotations

import json

import click

from ..cli.exits import COMPARES, exits
from ..cli.options import format_option
from ..cli.remote import RemoteOptions, on_one_host, remote_options
from ..errors import ExitCode, UsageError
from ..hosts.base import Host
from ..profile.load import load_profile

ROOT_HELP = "Read the host from a snapshot directory instead of this machine."


@exits(*COMPARES)
@click.command("probe")
@click.argument("profile", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--root", metavar="PATH", help=ROOT_HELP)
@format_option("text", "json")
@remote_options
def probe_cmd(profile: str, root: str | None, fmt: str, remote: RemoteOptions) -> int:
    """Run PROFILE's probes on the host and print median, min and max of each.

    \b
    Probes run where the host is: on this machine, or with -H on the
    target over SSH (one round trip per run; the timeout kills the probe's
    whole process group there; gpu-p2p uses the target's python3). For a
    snapshot (--root DIR) they get TUNE_ROOT=DIR in their environment, so
    a probe script can measure the snapshot's state.
    """
    from ..apply.engines import engine_for
    from .gates import judge
    from .runner import ProbeResult, run_probe
    from .table import render

    loaded = load_profile(profile)
    if not loaded.profile.probes:
        raise UsageError(f"{profile} defines no probes.")
    if remote.is_fleet:
        raise UsageError("tune probe measures one -H host at a time.")
    probes = loaded.profile.probes

    def measure(host: Host) -> list[ProbeResult]:
        execute, env = engine_for(host, root=root, timeout=remote.command_timeout).probe_executor()
        return [run_probe(name, spec, execute, env) for name, spec in probes.items()]

    # Opening the host refuses a missing snapshot before anything runs.
    results = on_one_host(root, remote, measure)
    failed_gates = [
        (r.name, v.message)
        for r in results
        if (spec := loaded.profile.probes[r.name]).gate is not None
        and not (v := judge(spec.gate, spec.better, None, r.median)).ok
    ]
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "probes": [r.to_json() for r in results],
                    "gates": [{"probe": n, "message": m} for n, m in failed_gates],
                },
                indent=2,
            )
        )
    else:
        click.echo(render(results), nl=False)
        for name, message in failed_gates:
            click.echo(f"gate failed: {name}: {message}")
    if any(not r.ok for r in results):
        return ExitCode.HOST_ERROR
    return ExitCode.CHANGES if failed_gates else ExitCode.IN_SYNC
