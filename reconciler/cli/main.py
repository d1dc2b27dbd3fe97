"""The `tune` command. The only place that turns errors into messages and exit codes."""

from __future__ import annotations

import dataclasses
import gc
import importlib
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from .. import __version__
from ..core.changes import Phase, Plan
from ..core.errors import ExitCode, OutputError, ProfileError, TuneError, UsageError, reason
from ..core.printable import printable
from ..hosts.base import FULL, Host, ReadableHost
from ..plan import saved
from ..plan.make import make_plan
from ..plan.observe import observation, observe, request
from ..profile.load import LoadedProfile, load_profile, schema
from ..render import RENDERERS, documents
from .complete import roots
from .exits import COMPARES, exits, table_help
from .helptext import TUNED, UNTUNED, SummaryGroup, examples
from .options import profile_argument, profile_digest_option, verbose_option
from .output import STDOUT, Output, output_options
from .remote import (
    RemoteOptions,
    no_root,
    on_one_host,
    one_host_options,
    progress_on_terminal,
    remote_options,
)

ROOT_HELP = "Read the host from a snapshot directory or .tar.gz instead of this machine."
profile_arg = profile_argument()


class LazyGroup(SummaryGroup):
    """A group whose commands from other modules load only when they run (or --help lists
    them): `tune plan` on a fleet of hosts must not pay for importing apply, audit or probes."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, attr = self.lazy[cmd_name].split(":")
            command = getattr(importlib.import_module(module, __package__), attr)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


@examples(
    (
        "Plan the bundled profile against the untuned example host (exit 2: changes)",
        f"tune plan blackwell-8x --root {UNTUNED}",
    ),
    ("The profiles that come with tune", "tune profiles"),
    ("A command's help, with its examples", "tune apply --help"),
)
@click.group(
    cls=LazyGroup,
    lazy={
        "apply": ".apply:apply",
        "rollback": ".rollback:rollback",
        "history": ".history:history",
        "verify": ".verify:verify",
        "status": ".status:status",
        "audit": ".audit:audit_cmd",
        "probe": ".probes:probe_cmd",
        "report": ".report:report_cmd",
        "profiles": ".installed:profiles_cmd",
        "examples": ".installed:examples_cmd",
        "completion": ".installed:completion_cmd",
        "man": ".installed:man_cmd",
        "config": ".config:config_cmd",
        "rollout": ".rollout:rollout_group",
        "kube": ".kube:kube_group",
        "export": ".export:export_group",
        "slurm": ".slurm:slurm_group",
    },
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Tuning-as-code for Linux GPU inference hosts.\n\n" + table_help(),
)
@click.version_option(__version__, "-V", "--version", prog_name="tune")
def cli() -> None:
    pass


@examples(
    (
        "What would change on the example host, and why (exit 2: changes)",
        f"tune plan blackwell-8x --root {UNTUNED}",
    ),
    (
        "Only the live settings, as JSON (exit 2: changes)",
        f"tune plan blackwell-8x --root {UNTUNED} --runtime-only --format json",
    ),
    (
        "Every host of an inventory group, over SSH",
        "tune plan blackwell-8x -i hosts.ini --limit gpu",
    ),
)
@exits(*COMPARES)
@cli.command()
@profile_arg
@profile_digest_option
@click.option("--root", metavar="PATH", shell_complete=roots, help=ROOT_HELP)
@output_options("text", *sorted(set(RENDERERS) - {"text"}))
@click.option(
    "--save",
    metavar="FILE.json",
    help=f"Save the plan for `tune apply` here (default {saved.DEFAULT}).",
)
@click.option("--no-persist", is_flag=True, help="Leave tune's boot-time files out of the plan.")
@click.option(
    "--runtime-only", is_flag=True, help="Only live settings: what `apply --runtime-only` writes."
)
@click.option(
    "--reboot-phase",
    is_flag=True,
    help="Only boot configuration: what `apply --reboot-phase` does.",
)
@verbose_option
@remote_options
def plan(
    profile: str,
    profile_digest: str | None,
    root: str | None,
    out: Output,
    save: str | None,
    no_persist: bool,
    runtime_only: bool,
    reboot_phase: bool,
    verbose: bool,
    remote: RemoteOptions,
) -> int:
    """Show what differs between PROFILE and the host(s), and why. Changes nothing on a host;
    for one host, saves the plan for `tune apply` (.tune/plan.json, or --save FILE), with the
    phases it covers (both, unless --runtime-only or --reboot-phase)."""
    if runtime_only and reboot_phase:
        raise UsageError("--runtime-only and --reboot-phase exclude each other.")
    if save == STDOUT:
        raise UsageError(
            "--save -: a saved plan is a file `tune apply FILE` reads, and standard output "
            "has the plan itself: give a path (`--format json` prints the plan as JSON)."
        )
    phases = saved.chosen_phases(runtime_only, reboot_phase)
    loaded = load_profile(profile, profile_digest)

    # Only a profile with optional entries pays for reading the last run's journal: it says
    # which of them the kernel refused there.
    optional = any(entry.optional for entry in loaded.profile.entries())

    def plan_of(host: ReadableHost) -> Plan:
        if not optional:
            observed = observe(host, loaded.profile, not no_persist)
            return saved.of_phases(make_plan(loaded, observed, not no_persist), phases)
        from ..apply import applied
        from ..steps import state

        wanted = request(loaded.profile, not no_persist)
        files = host.fetch(wanted | state.runs_request(applied.JOURNAL_BATCH))
        made = make_plan(loaded, observation(host, files), not no_persist)
        notes = applied.unsupported_notes(host, files)
        return saved.of_phases(dataclasses.replace(made, notes=(*made.notes, *notes)), phases)

    if remote.is_fleet:
        from ..hosts.fleet import fleet_exit_code, for_each_host
        from ..render import fleet as fleet_render

        no_root(root)
        results = for_each_host(
            remote.open(), plan_of, remote.fleet_forks(), progress_on_terminal(out)
        )
        shown = fleet_render.render(results, out.fmt, out.color, verbose=verbose)
        out.echo(shown, nl=False)
        return fleet_exit_code(results, lambda p: p.is_clean)
    result = on_one_host(root, remote, plan_of)
    out.echo(RENDERERS[out.fmt](result, out.color), nl=False)
    # A saved plan is applied where it was made, and a bare `tune apply` applies to this
    # machine: a remote plan is not saved, or it would be taken for this machine's.
    if not remote.wanted:
        target = save or saved.DEFAULT
        try:
            saved.save(target, loaded, result, root, not no_persist, phases)
            click.echo(_saved_line(str(target), phases, save is not None), err=True)
        except OSError as exc:  # making its directory
            where = exc.filename or target
            said = f"tune: could not save the plan: {where}: {reason(exc)}."
            click.echo(printable(said), err=True)
        except OutputError as exc:  # the sentence names the file and the reason
            click.echo(printable(f"tune: {exc}"), err=True)
        except TuneError as exc:
            click.echo(printable(f"tune: could not save the plan: {exc}"), err=True)
    return ExitCode.IN_SYNC if result.is_clean else ExitCode.CHANGES


def _saved_line(path: str, phases: tuple[Phase, ...], named: bool) -> str:
    """The one stderr line of every `tune plan` that saved: where, and how to apply it."""
    apply = "tune apply" + (f" {path}" if named else "")
    if phases != saved.BOTH:
        return f"tune: plan saved in {path}; `{apply}` applies it ({saved.phases_text(phases)})."
    return (
        f"tune: plan saved in {path}; `{apply} --runtime-only` applies its live settings, "
        f"`{apply}` both phases."
    )


@examples(
    (
        "Drift of the tuned example host from the bundled profile (exit 0: none)",
        f"tune check blackwell-8x --root {TUNED}",
    ),
    (
        "What cron runs: silent unless a knob drifted; metrics for node_exporter",
        f"tune check blackwell-8x --root {TUNED} -q --prometheus tune.prom",
    ),
)
@cli.command("check")
@profile_argument(required=False)
@profile_digest_option
@click.option("--root", metavar="PATH", shell_complete=roots, help=ROOT_HELP)
@output_options("text", "json")
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="Print nothing unless a knob drifted; then one line a drift.",
)
@click.option(
    "--prometheus", metavar="FILE", help="Write node_exporter textfile metrics to FILE atomically."
)
@click.option("--since-apply", is_flag=True, help="Also report knobs changed after the last apply.")
@click.option("--strict", is_flag=True, help="Failed audit checks exit 2 and print, as drift does.")
@click.option(
    "--no-persist",
    is_flag=True,
    help="Ignore tune's boot-time files (for hosts applied with --no-persist).",
)
@verbose_option
@remote_options
def check_cmd(
    profile: str | None,
    profile_digest: str | None,
    root: str | None,
    out: Output,
    quiet: bool,
    prometheus: str | None,
    since_apply: bool,
    strict: bool,
    no_persist: bool,
    verbose: bool,
    remote: RemoteOptions,
) -> int:
    """Report drift of the host(s) from PROFILE (default: the profile last applied there).

    Drift is a knob tune applied, or found in sync, that has moved since. Knobs of a phase
    never applied (--runtime-only leaves the reboot phase), a rolled-back run and pending
    reboots are reported but are not drift; failed audit checks are reported, and are drift
    only with --strict.

    Exit codes: 0 no drift, 2 drift, 1 could not check, 5 the first apply was interrupted
    and awaits `tune rollback` (as apply says), 6 the last run's journal is damaged
    (--since-apply), 65 invalid profile (or not the one --profile-digest pins). Writes
    nothing to a host but the metrics FILE (local) and, on this machine or a snapshot
    directory tune has applied to, when it first saw each drift
    (/var/lib/tune/check/first-seen.json) and what it found (/var/lib/tune/status.json,
    which `tune status` prints); never over SSH.
    """
    from ..drift import first_seen
    from ..drift.check import DriftReport, run_check
    from ..flow.status import write_after_check
    from ..render import check as render_check
    from ..render import metrics

    if profile_digest is not None and profile is None:
        raise UsageError("--profile-digest pins a profile file: give PROFILE too.")
    fmt, color = out.fmt, out.color
    now = time.time()

    def check_of(host: Host) -> DriftReport:
        report = run_check(
            host,
            profile,
            since_apply=since_apply,
            strict=strict,
            with_persistence=not no_persist,
            digest=profile_digest,
        )
        report = first_seen.remember(host, report, now)
        # status.json where the check keeps first sightings (`flow.status.check_writes`).
        digest = load_profile(profile, profile_digest).pinned_as if profile else None
        notes = write_after_check(host, report, digest)
        return dataclasses.replace(report, notes=(*report.notes, *notes)) if notes else report

    if remote.is_fleet:
        if prometheus:
            raise UsageError("--prometheus describes one host; run it on each host instead.")
        from ..hosts.fleet import fleet_exit_code, for_each_host

        no_root(root)
        results = for_each_host(
            remote.open(), check_of, remote.fleet_forks(), progress_on_terminal(out)
        )
        shown = render_check.fleet(results, fmt, quiet=quiet, color=color, verbose=verbose)
        out.echo(shown, nl=False)
        return fleet_exit_code(results, lambda r: not r.needs_attention)
    try:
        report = on_one_host(root, remote, check_of)
    except TuneError:
        if prometheus:
            metrics.write_atomically(prometheus, metrics.exposition(None, now))
        raise
    out.echo(render_check.render(report, fmt, quiet=quiet, color=color), nl=False)
    if prometheus:
        metrics.write_atomically(prometheus, metrics.exposition(report, now))
    return ExitCode.CHANGES if report.needs_attention else ExitCode.IN_SYNC


@examples(
    (
        "Check a profile and print the digest that pins it",
        "tune validate blackwell-8x",
    ),
    (
        "The verdict as JSON, for an editor or CI; an invalid profile exits 65",
        "tune validate blackwell-8x --format json",
    ),
)
@exits(ExitCode.IN_SYNC, ExitCode.USAGE, ExitCode.INVALID_PROFILE)
@cli.command()
@profile_arg
@profile_digest_option
@output_options("text", "json")
def validate(profile: str, profile_digest: str | None, out: Output) -> int:
    """Check PROFILE (and every profile it extends) without reading a host; print the digest
    of them all, which --profile-digest pins."""
    try:
        loaded = load_profile(profile, profile_digest)
    except ProfileError as exc:
        if out.json:  # the problems as data too, for an editor or CI; the exit code says 65
            out.document(validation_document(profile, None, exc.problems()))
        raise
    if out.json:
        out.document(validation_document(profile, loaded, []))
        return ExitCode.IN_SYNC
    from ..profile.bundled import shown

    files = [shown(path) for path in loaded.files]
    parents = f" (with {', '.join(files[:-1])})" if len(files) > 1 else ""
    out.echo(
        f"{shown(profile)}: valid profile {loaded.profile.name!r}{parents}; {loaded.pinned_as}"
    )
    return ExitCode.IN_SYNC


def validation_document(
    path: str, loaded: LoadedProfile | None, problems: list[str]
) -> dict[str, Any]:
    return documents.versioned(
        "validate",
        {
            "profile": path,
            "valid": loaded is not None,
            "name": loaded.profile.name if loaded else None,
            "files": list(loaded.files) if loaded else [],
            "digest": loaded.pinned_as if loaded else None,
            "problems": problems,
        },
    )


def schema_options(command: Callable[..., int]) -> Callable[..., int]:
    """`--profile` (the default), then `--plan`, `--check`, ...: one flag a schema, one choice."""
    flags = [("profile", "The profile's schema, for editor completion (the default).")]
    flags += [(kind, f"The schema of `tune {kind} --format json`.") for kind in documents.KINDS]
    for kind, help in reversed(flags):
        # Only the first has a default: flags that share a destination and each declared one
        # would compete for it.
        if kind == "profile":
            option = click.option("--profile", "which", flag_value=kind, default=True, help=help)
        else:
            option = click.option(f"--{kind}", "which", flag_value=kind, help=help)
        command = option(command)
    return command


@examples(
    (
        "The profile's JSON Schema, for an editor",
        "tune schema -o tune-profile.schema.json",
    ),
    (
        "The schema of what `tune plan --format json` prints",
        "tune schema --plan",
    ),
)
@exits(ExitCode.IN_SYNC)
@cli.command("schema")
@schema_options
@output_options("json")
def schema_cmd(which: str, out: Output) -> int:
    """Print a JSON Schema: the profile's (the default), or that of a command's --format json."""
    from ..render.schemas import SCHEMAS

    out.document(schema() if which == "profile" else SCHEMAS[which])
    return ExitCode.IN_SYNC


@examples(
    (
        "The files the bundled profile reads from the example host, as an archive",
        f"tune snapshot blackwell-8x --root {UNTUNED} -o host.tar.gz",
    ),
    (
        "Then plan offline against the archive (exit 2: changes)",
        "tune plan blackwell-8x --root host.tar.gz",
    ),
    (
        "A host reached over SSH",
        "tune snapshot blackwell-8x -H gpu1 -o gpu1.tar.gz",
    ),
)
@exits(
    ExitCode.IN_SYNC,
    ExitCode.HOST_ERROR,
    ExitCode.USAGE,
    ExitCode.INVALID_PROFILE,
    ExitCode.NO_SPACE,
)
@cli.command()
@profile_arg
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="FILE.tar.gz",
    help="Archive to write; - writes it to standard output (then the summary is on stderr).",
)
@click.option("--root", metavar="PATH", shell_complete=roots, help=ROOT_HELP)
@output_options("text", "json", output=False)
@one_host_options
def snapshot(
    profile: str, output: str, root: str | None, out: Output, remote: RemoteOptions
) -> int:
    """Capture exactly the files PROFILE reads from the host, for offline plans."""
    from ..hosts.archive import write_archive

    loaded: LoadedProfile = load_profile(profile)
    source: list[ReadableHost] = []

    def capture(host: ReadableHost) -> int:
        source.append(host)
        archive = sys.stdout.buffer if output == STDOUT else output
        return write_archive(host.fetch(request(loaded.profile)), archive)

    count = on_one_host(root, remote, capture)
    if output == STDOUT:  # standard output is the archive
        out = dataclasses.replace(out, stream=sys.stderr)
    if out.json:
        body = {"archive": output, "files": count, "profile": loaded.path}
        host = {"name": source[0].name, "source": source[0].describe()}
        out.document(documents.document("snapshot", host, body))
    else:
        out.echo(f"{output}: {count} files from {source[0].describe()}")
    return ExitCode.IN_SYNC


def main(argv: list[str] | None = None) -> None:
    """Entry point: exit codes per the contract, errors as one line, never a traceback."""
    from ..hosts import lock

    lock.invoked(sys.argv[1:] if argv is None else argv)
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
        code = ExitCode.INTERRUPTED
    except TuneError as exc:
        # Messages quote host paths and values: one line a problem, whatever they hold.
        click.echo("\n".join(printable(p) for p in exc.problems()), err=True)
        code = exc.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        code = ExitCode.INTERRUPTED
    except Exception as exc:  # the last line of defence against tracebacks
        if os.environ.get("TUNE_DEBUG"):
            raise
        if isinstance(exc, OSError) and exc.errno in FULL:
            # Every write that changes a host is journaled and rolled back where it fails;
            # what reaches here is tune's own file (the lock, a saved plan, a report).
            where = printable(str(exc.filename or "tune"))
            said = f"{where}: no space left on the device; nothing was changed."
            code = ExitCode.NO_SPACE
        elif isinstance(exc, OSError) and exc.strerror:
            # Likewise tune's own file, that it could not read or write: a sentence with the
            # system's reason, not Python's `[Errno 30] ...: '/path'`.
            where = printable(str(exc.filename or "tune"))
            said = f"{where}: {printable(reason(exc))}."
            code = ExitCode.HOST_ERROR
        else:
            said = f"tune: internal error: {type(exc).__name__}: {printable(str(exc))}"
            said += " (set TUNE_DEBUG=1 for a traceback)"
            code = ExitCode.INTERNAL
        click.echo(said, err=True)
    if argv is None:
        # Run as the program: the interpreter's last act is a full collection of every object,
        # ~20-30 ms of CPU spent finding garbage the process's exit frees anyway. A caller in
        # the same process (tests, an embedding tool) keeps its collector as it was.
        gc.freeze()
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
