"""What comes with an installed tune: its bundled profiles, the systemd and cron examples with
the installed command's path filled in, shell completion and the man page."""

from __future__ import annotations

import re
import shutil
import sys
from importlib import resources
from pathlib import Path

import click
from click.shell_completion import CompletionItem

from ..core.errors import ExitCode, UsageError
from ..render import documents
from .exits import exits
from .helptext import examples
from .output import Output, output_options

# A `tune` that runs a subcommand, as the examples write it (never `/var/lib/tune`).
# systemd's `-` before a command (its exit status ignored) may precede the path.
_COMMAND = re.compile(
    r"(?<![\w/.])(?<![\w.]-)(?:/usr/local/bin/)?tune(?= (?:check|apply|plan|slurm)\b)"
)
# Examples that run no tune: alert rules name its commands to the person paged, as typed.
_AS_WRITTEN = frozenset({"prometheus"})


@exits(ExitCode.IN_SYNC, ExitCode.USAGE)
@examples(
    (
        "The profiles that come with tune",
        "tune profiles",
    ),
    (
        "As JSON, with where each file lies",
        "tune profiles --format json",
    ),
)
@click.command("profiles")
@output_options("text", "json")
def profiles_cmd(out: Output) -> int:
    """List the profiles bundled with tune; `tune plan NAME` takes a name (a path that exists
    wins)."""
    from ..profile.bundled import bundled
    from ..profile.load import load_profile

    rows = []
    for profile in bundled():
        loaded = load_profile(profile.path).profile
        rows.append(
            {"name": profile.name, "description": loaded.description, "path": str(profile.path)}
        )
    if out.json:
        out.document(documents.versioned("profiles", {"profiles": rows}))
        return ExitCode.IN_SYNC
    width = max((len(r["name"]) for r in rows), default=0)
    for row in rows:
        out.echo(f"{row['name'].ljust(width)}  {row['description'] or ''}".rstrip())
    return ExitCode.IN_SYNC


def examples_directory() -> Path:
    return Path(str(resources.files("reconciler") / "examples"))


def tune_command() -> str:
    """The installed `tune`: beside this interpreter (a virtual environment, pipx), else on
    PATH."""
    beside = Path(sys.executable).parent / "tune"
    if beside.exists():
        return str(beside)
    return shutil.which("tune") or "tune"


def filled_in(text: str, command: str) -> str:
    """`text` with `command` for each `tune` it runs; comments, which talk about tune, as they
    are (systemd, cron and sh alike take `#` at the start of a line for a comment)."""
    return "".join(
        line if line.lstrip().startswith("#") else _COMMAND.sub(lambda _: command, line)
        for line in text.splitlines(keepends=True)
    )


def example_names(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    names = sorted(p.name for p in examples_directory().iterdir() if p.is_dir())
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def example_files(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The files of the example NAME already on the line."""
    name = ctx.params.get("name")
    folder = examples_directory() / str(name)
    if not name or "/" in str(name) or not folder.is_dir():
        return []
    files = sorted(p.name for p in folder.iterdir())
    return [CompletionItem(file) for file in files if file.startswith(incomplete)]


@exits(ExitCode.IN_SYNC, ExitCode.USAGE)
@examples(
    (
        "List the examples",
        "tune examples",
    ),
    (
        "One file, with the path of this tune filled in, ready to install",
        "tune examples systemd tune-check.service > /etc/systemd/system/tune-check.service",
    ),
)
@click.command("examples")
@click.argument("name", required=False, shell_complete=example_names)
@click.argument("file", required=False, shell_complete=example_files)
def examples_cmd(name: str | None, file: str | None) -> int:
    """Print an installed example (systemd, cron) with the path of this tune filled in; with
    FILE, only that file, ready to redirect into place. Without NAME, list them."""
    directory = examples_directory()
    available = sorted(p.name for p in directory.iterdir() if p.is_dir())
    if name is None:
        for example in available:
            listed = ", ".join(sorted(p.name for p in (directory / example).iterdir()))
            click.echo(f"{example}: {listed} (in {directory / example})")
        return ExitCode.IN_SYNC
    if name not in available:
        raise UsageError(f"no example {name!r}; there are: {', '.join(available)}.")
    files = sorted((directory / name).iterdir())
    if file is not None:
        files = [p for p in files if p.name == file]
        if not files:
            raise UsageError(f"example {name} has no file {file!r}.")
    command = tune_command()
    for index, path in enumerate(files):
        text = path.read_text(encoding="utf-8")
        if name not in _AS_WRITTEN:
            text = filled_in(text, command)
        if len(files) > 1:
            click.echo(("\n" if index else "") + f"# ==> {path.name} <==")
        click.echo(text, nl=False)
    return ExitCode.IN_SYNC


@exits(ExitCode.IN_SYNC, ExitCode.USAGE)
@examples(
    (
        "bash: complete commands, profiles and options (bash-completion loads it)",
        "tune completion bash > ~/.local/share/bash-completion/completions/tune",
    ),
    (
        "fish: the same, where fish looks for completions",
        "tune completion fish > ~/.config/fish/completions/tune.fish",
    ),
)
@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_cmd(shell: str) -> int:
    """Print the shell completion script (click's). bash: `eval "$(tune completion bash)"` in
    ~/.bashrc; zsh: the same in ~/.zshrc; fish: `tune completion fish >
    ~/.config/fish/completions/tune.fish`."""
    from click.shell_completion import get_completion_class

    root = click.get_current_context().find_root().command
    completion = get_completion_class(shell)
    assert completion is not None  # the choice holds only shells click knows
    click.echo(completion(root, {}, "tune", "_TUNE_COMPLETE").source())
    return ExitCode.IN_SYNC


@exits(ExitCode.IN_SYNC, ExitCode.USAGE)
@examples(
    (
        "Read tune(1) without installing it",
        "tune man | man -l -",
    ),
    (
        "One command's page",
        "tune man apply | man -l -",
    ),
    (
        "Install every page where man finds them",
        "tune man --directory ~/.local/share/man/man1",
    ),
)
@click.command("man")
@click.argument("command", nargs=-1)
@click.option(
    "--directory",
    metavar="DIR",
    help="Write every page (tune.1, tune-COMMAND.1, ...) into DIR instead.",
)
def man_cmd(command: tuple[str, ...], directory: str | None) -> int:
    """Print the man page of COMMAND (`tune man rollout status`), or tune(1), the whole
    manual; written from these commands' help, as the pages the package installs are."""
    from .manpage import commands, page, page_name, pages, root_context

    root = click.get_current_context().find_root()
    assert isinstance(root.command, click.Group)
    if directory is not None:
        if command:
            raise UsageError("--directory writes every page: give no COMMAND.")
        written = pages(root.command)
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        for name, text in written.items():
            (target / name).write_text(text, encoding="utf-8")
        click.echo(f"{target}: {len(written)} pages", err=True)
        return ExitCode.IN_SYNC
    if not command:
        click.echo(pages(root.command)["tune.1"], nl=False)
        return ExitCode.IN_SYNC
    for path, found, context in commands(root.command, root_context(root.command)):
        if path == command:
            click.echo(page(path, found, context), nl=False)
            return ExitCode.IN_SYNC
    raise UsageError(f"no command `tune {' '.join(command)}`, so no page {page_name(command)}(1).")
