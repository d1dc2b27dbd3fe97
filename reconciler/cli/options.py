"""Command-line options that several subcommands declare alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def profile_argument(*, required: bool = True) -> Callable[[F], F]:
    """PROFILE: a profile file, or the name of one bundled with tune (a path that exists
    wins)."""

    def resolved(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        from ..errors import UsageError
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

    return click.argument("profile", required=required, callback=resolved)


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
