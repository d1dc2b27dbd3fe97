"""`tune probe`: run a profile's probes and print what they measured."""

from __future__ import annotations

import click

from ..core.errors import ExitCode, UsageError
from ..hosts.base import Host
from ..profile.load import load_profile
from ..render import documents
from .complete import roots
from .exits import COMPARES, exits
from .helptext import UNTUNED, examples
from .options import profile_argument
from .output import Output, output_options
from .remote import RemoteOptions, on_one_host, one_host_options

ROOT_HELP = "Read the host from a snapshot directory instead of this machine."


@examples(
    (
        "Run the probes that probes.yaml defines on the example host",
        f"tune probe probes.yaml --root {UNTUNED}",
    ),
)
@exits(*COMPARES)
@click.command("probe")
@profile_argument()
@click.option("--root", metavar="PATH", shell_complete=roots, help=ROOT_HELP)
@output_options("text", "json")
@one_host_options
def probe_cmd(profile: str, root: str | None, out: Output, remote: RemoteOptions) -> int:
    """Run PROFILE's probes on the host and print median, min and max of each.

    \b
    Probes run where the host is: on this machine, or with -H on the
    target over SSH (one round trip per run; the timeout kills the probe's
    whole process group there; gpu-p2p uses the target's python3). For a
    snapshot (--root DIR) they get TUNE_ROOT=DIR in their environment, so
    a probe script can measure the snapshot's state.
    """
    from ..apply.engines import engine_for
    from ..probes.gates import judge
    from ..probes.runner import ProbeResult, run_probe
    from ..probes.table import render

    loaded = load_profile(profile)
    if not loaded.profile.probes:
        raise UsageError(f"{profile} defines no probes.")
    probes = loaded.profile.probes

    names: list[str] = []
    waiting = out.progress()

    def measure(host: Host) -> list[ProbeResult]:
        names.append(host.name)
        execute, env = engine_for(host, root=root, timeout=remote.command_timeout).probe_executor()
        return [run_probe(name, spec, execute, env, waiting) for name, spec in probes.items()]

    # Opening the host refuses a missing snapshot before anything runs.
    try:
        results = on_one_host(root, remote, measure)
    finally:
        waiting.clear()
    failed_gates = [
        (r.name, v.message)
        for r in results
        if (spec := loaded.profile.probes[r.name]).gate is not None
        and not (v := judge(spec.gate, spec.better, None, r.median)).ok
    ]
    if out.json:
        body = {
            "probes": [r.to_json() for r in results],
            "gates": [{"probe": n, "message": m} for n, m in failed_gates],
        }
        out.document(documents.document("probe", documents.named(names[0]), body))
    else:
        out.echo(render(results), nl=False)
        for name, message in failed_gates:
            out.echo(f"gate failed: {name}: {message}")
    if any(not r.ok for r in results):
        return ExitCode.HOST_ERROR
    return ExitCode.CHANGES if failed_gates else ExitCode.IN_SYNC
