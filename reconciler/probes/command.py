"""`tune probe`: run a profile's probes and print what they measured."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import ExitCode, UsageError
from ..host import open_host
from ..profile import load_profile

ROOT_HELP = "Read the host from a snapshot directory instead of this machine."


@click.command("probe")
@click.argument("profile", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--root", metavar="PATH", help=ROOT_HELP)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def probe_cmd(profile: str, root: str | None, fmt: str) -> int:
    """Run PROFILE's probes on the host and print median, min and max of each.

    Probes run on the machine tune runs on; for a snapshot (--root DIR) they get TUNE_ROOT=DIR
    in their environment, so a probe script can measure the snapshot's state.
    """
    from .gates import judge
    from .runner import run_probe
    from .table import render

    loaded = load_profile(profile)
    open_host(root)  # refuse a missing snapshot before running anything
    if not loaded.profile.probes:
        raise UsageError(f"{profile} defines no probes.")
    env = {"TUNE_ROOT": str(Path(root).resolve())} if root else {}
    results = [run_probe(n, s, env=env) for n, s in loaded.profile.probes.items()]
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
