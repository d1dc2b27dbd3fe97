"""Command-line options that several subcommands declare alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def profile_argument(*, required: bool = True) -> Callable[[F], F]:
    """PROFILE: a profile file, a `file://` URL, or the name of one bundled with tune (a path
    that exists wins)."""

    def resolved(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        from ..core.errors import UsageError
        from ..profile.bundled import resolve

        if value is None:
            return None
        try:
            path = resolve(value)
        except UsageError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
        if Path(path).is_dir():
            raise click.BadParameter(f"{path}: is a directory, not a profile.", ctx, param)
        return path

    from .complete import profiles

    return click.argument("profile", required=required, callback=resolved, shell_complete=profiles)


def profile_digest_option(command: F) -> F:
    """`--profile-digest sha256:HEX` (the parameter `profile_digest`: the hex, or None)."""

    def pinned(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        from ..core.errors import UsageError
        from ..profile.source import pinned

        if value is None:
            return None
        try:
            return pinned(value)
        except UsageError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    return click.option(
        "--profile-digest",
        metavar="sha256:HEX",
        callback=pinned,
        help="Refuse PROFILE unless it and every profile it extends are the bytes this digest "
        "pins (`tune validate` prints it).",
    )(command)


def format_option(*choices: str, help: str | None = None) -> Callable[[F], F]:
    """`--format` (the parameter `fmt`), the first choice the default."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default=choices[0],
        show_default=True,
        help=help,
    )


def verbose_option(command: F) -> F:
    """`-v/--verbose` (the parameter `verbose`) of a command over several hosts."""
    return click.option(
        "-v",
        "--verbose",
        is_flag=True,
        help="Over several hosts: each host's plan and error in full, host by host (by default "
        "a row a host, and each plan once with the hosts it is for).",
    )(command)
