"""The one confirmation every command that writes to a host asks for (`apply`, `rollback`).

No terminal and no `--yes` is a refusal, as Terraform refuses: cron, CI and `ssh host tune
apply` have nobody to answer, and a write nobody approved must not happen there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..core.errors import NotConfirmed

F = TypeVar("F", bound=Callable[..., Any])


def yes_option(command: F) -> F:
    return click.option(
        "-y",
        "--yes",
        is_flag=True,
        help="Do not ask: the answer is yes (needed where there is no terminal to ask on).",
    )(command)


def dry_run_option(command: F) -> F:
    return click.option(
        "--dry-run", is_flag=True, help="Print the exact operations; write nothing."
    )(command)


def confirm(
    question: str, *, yes: bool, command: str, err: bool = False, dry_run: bool = True
) -> None:
    """Return once the operator agreed to `question`; raise `NotConfirmed` otherwise.
    `command`: the command that asks (its `--yes` is named when nobody can be asked).
    `err`: ask on standard error (standard output holds JSON). `dry_run`: `command` takes
    --dry-run, so the refusal may suggest it."""
    if yes:
        return
    if not sys.stdin.isatty():
        said = f"no terminal to confirm on, so nothing was written: `{command} --yes` goes ahead"
        raise NotConfirmed(said + (", `--dry-run` shows what it would do." if dry_run else "."))
    try:
        agreed = click.confirm(question, default=False, err=err)
    except click.exceptions.Abort:  # end of input or Ctrl-C at the question
        agreed = False
    if not agreed:
        raise NotConfirmed("not confirmed: nothing was written.")
