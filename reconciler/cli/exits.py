"""Exit codes where an operator reads them: the whole table in `tune --help`, and each
command's own codes in its `--help` (the meanings are `errors.EXIT_CODES`, written once)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TypeVar

import click

from ..core.errors import EXIT_CODES, ExitCode

C = TypeVar("C", bound=click.Command)

# A command that holds a host up against a profile and reports what differs (plan, probe).
COMPARES = (
    ExitCode.IN_SYNC,
    ExitCode.HOST_ERROR,
    ExitCode.CHANGES,
    ExitCode.USAGE,
    ExitCode.INVALID_PROFILE,
)


def table_help() -> str:
    """`errors.EXIT_CODES` as `tune --help` prints it, a line a code."""
    lines = [f"  {code:>3}  {meaning.replace('`', '')}" for code, meaning in EXIT_CODES.items()]
    return "\b\nExit codes:\n" + "\n".join(lines)


def exits(*codes: int) -> Callable[[C], C]:
    """Decorate a command (above `@click.command`) with the codes it exits with: its help then
    ends with them, and `tests/test_contract.py` holds them to the table."""
    unknown = [code for code in codes if code not in EXIT_CODES]
    if unknown:
        raise ValueError(f"exit codes {unknown} are not in errors.EXIT_CODES")

    def decorate(command: C) -> C:
        listed = ", ".join(str(code) for code in codes)
        line = f"Exit codes: {listed} (`tune --help` says what each means)."
        # cleandoc first: click dedents a docstring only when all of it is indented alike
        command.help = f"{inspect.cleandoc(command.help or '')}\n\n{line}".strip()
        return command

    return decorate
