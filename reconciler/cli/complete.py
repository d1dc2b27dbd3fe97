"""What the shell offers at <TAB> (`tune completion bash`): the bundled profiles' names beside
files for PROFILE, directories and archives for --root, the runs of the host for rollback and
report, the rollouts this controller journaled (the examples' names are
`installed.example_names`).

Each function is click's `shell_complete` of one parameter; each reads only what is already on
this machine and never fails: a completion that raises breaks the operator's shell line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

ARCHIVES = (".tar.gz", ".tgz")


def _item(value: str, **kwargs: str) -> CompletionItem:
    """click's item, its module imported only when the shell asks (never on a plain run)."""
    from click.shell_completion import CompletionItem

    return CompletionItem(value, **kwargs)


def _files(incomplete: str) -> CompletionItem:
    """Leave files to the shell: it quotes, expands ~ and walks into directories itself."""
    return _item(incomplete, type="file")


def profiles(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The bundled profiles whose name starts with `incomplete`, then the files there."""
    from ..profile.bundled import bundled

    names = [
        _item(profile.name, help=f"bundled profile ({profile.path.name})")
        for profile in bundled()
        if profile.name.startswith(incomplete)
    ]
    return [*names, _files(incomplete)]


def roots(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """--root: snapshot archives (.tar.gz) that start with `incomplete`; directories are the
    shell's."""
    folder, slash, start = incomplete.rpartition("/")
    try:
        entries = sorted(os.scandir(folder or slash or "."), key=lambda entry: entry.name)
    except OSError:
        entries = []
    archives = [
        _item(folder + slash + entry.name)
        for entry in entries
        if entry.name.startswith(start) and entry.name.endswith(ARCHIVES) and entry.is_file()
    ]
    return [*archives, _item(incomplete, type="dir")]


def run_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The runs journaled on the host (this machine, or the --root directory already on the
    line), newest first."""
    from ..steps.state import RUN_SUFFIX, RUNS

    root = ctx.params.get("root") or "/"
    try:
        found = [p.name for p in (Path(root) / RUNS.lstrip("/")).iterdir()]
    except OSError:  # not a directory (an archive), or not ours to read
        return []
    ids = sorted(
        (n.removesuffix(RUN_SUFFIX) for n in found if n.endswith(RUN_SUFFIX)), reverse=True
    )
    return [_item(run_id) for run_id in ids if run_id.startswith(incomplete)]


def rollout_ids(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The rollouts this controller journaled, newest first."""
    from ..rollout.journal import rollouts_directory

    try:
        found = [p.stem for p in rollouts_directory().glob("*.json")]
    except OSError:
        return []
    ids = sorted((stem for stem in found if stem.startswith(incomplete)), reverse=True)
    return [_item(rollout_id) for rollout_id in ids]
