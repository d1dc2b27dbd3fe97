"""Command-line options that several subcommands declare alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


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
