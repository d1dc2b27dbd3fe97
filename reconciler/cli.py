"""The `tune` command. The only place that turns errors into messages and exit codes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from . import __version__
from .errors import ExitCode, TuneError, UsageError
from .host import Host, open_host, write_archive
from .observe import observe, request
from .plan import make_plan
from .profile import LoadedProfile, load_profile, schema
from .render import RENDERERS

ROOT_HELP = "Read the host from a snapshot directory or .tar.gz instead of this machine."
profile_arg = click.argument("profile", type=click.Path(exists=True, dir_okay=False, readable=True))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tune")
def cli() -> None:
    """Tuning-as-code for Linux GPU inference hosts.

    \b
    Exit codes: 0 in sync, 2 changes or failed checks, 1 host unreadable,
    3 apply failed and rolled back, 64 usage error, 65 invalid profile.
    """


@cli.command()
@profile_arg
@click.option("--root", metavar="PATH", help=ROOT_HELP)
@click.option(
    "--format", "fmt", type=click.Choice(sorted(RENDERERS)), default="text", show_default=True
)
def plan(profile: str, root: str | None, fmt: str) -> int:
    """Show what differs between PROFILE and the host, and why. Changes nothing."""
    loaded = load_profile(profile)
    host = open_host(root)
    result = make_plan(loaded, observe(host, loaded.profile))
    color = fmt == "text" and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    click.echo(RENDERERS[fmt](result, color), nl=False, color=color)
    return ExitCode.IN_SYNC if result.is_clean else ExitCode.CHANGES


@cli.command()
@profile_arg
def validate(profile: str) -> int:
    """Check PROFILE (and every profile it extends) without reading a host."""
    loaded = load_profile(profile)
    parents = f" (with {', '.join(loaded.files[:-1])})" if len(loaded.files) > 1 else ""
    click.echo(f"{profile}: valid profile {loaded.profile.name!r}{parents}")
    return ExitCode.IN_SYNC


@cli.command("schema")
def schema_cmd() -> int:
    """Print the profile's JSON Schema (for editor completion)."""
    click.echo(json.dumps(schema(), indent=2))
    return ExitCode.IN_SYNC


@cli.command()
@profile_arg
@click.option("-o", "--output", required=True, metavar="FILE.tar.gz", help="Archive to write.")
@click.option("--root", metavar="PATH", help=ROOT_HELP)
def snapshot(profile: str, output: str, root: str | None) -> int:
    """Capture exactly the files PROFILE reads from the host, for offline plans."""
    loaded: LoadedProfile = load_profile(profile)
    host: Host = open_host(root)
    files = host.fetch(request(loaded.profile))
    count = write_archive(files, output)
    click.echo(f"{output}: {count} files from {host.describe()}")
    return ExitCode.IN_SYNC


@cli.command()
@profile_arg
@click.option("--root", metavar="PATH", help=ROOT_HELP)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def probe(profile: str, root: str | None, fmt: str) -> int:
    """Run PROFILE's probes on the host and print median, min and max of each.

    Probes run on the machine tune runs on; for a snapshot (--root DIR) they get TUNE_ROOT=DIR
    in their environment, so a probe script can measure the snapshot's state.
    """
    from .probes.gates import judge
    from .probes.runner import run_probe
    from .probes.table import render

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


def main(argv: list[str] | None = None) -> None:
    """Entry point: exit codes per the contract, errors as one line, never a traceback."""
    try:
        code: Any = cli.main(args=argv, prog_name="tune", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc), err=True)
        code = ExitCode.USAGE
    except click.UsageError as exc:
        exc.show()
        code = ExitCode.USAGE
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        code = 130
    except TuneError as exc:
        click.echo(str(exc), err=True)
        code = exc.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        code = 130
    except Exception as exc:
        if os.environ.get("TUNE_DEBUG"):
            raise
        click.echo(
            f"tune: internal error: {type(exc).__name__}: {exc} (set TUNE_DEBUG=1 for a traceback)",
            err=True,
        )
        code = 70
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
