"""Help that teaches: each command's examples (its `--help` epilog and its man page's EXAMPLES,
run by `tests/test_help_examples.py`, so none can rot) and groups that list their commands'
summaries whole, not cut at the terminal's width."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

C = TypeVar("C", bound=click.Command)

# The example hosts of a checkout (README, first command): snapshots, never this machine.
UNTUNED = "examples/hosts/rtx6000bw-untuned"
TUNED = "examples/hosts/rtx6000bw-tuned"
HEADING = "Examples:"


def examples(*pairs: tuple[str, str]) -> Callable[[C], C]:
    """Decorate a command with 1-3 examples, each (what it shows, the command line). The epilog
    is one `\\b` block: click prints it as written, never rewrapped."""
    if not 1 <= len(pairs) <= 3:
        raise ValueError("a command's help has 1 to 3 examples")

    def decorate(command: C) -> C:
        lines = [line for why, run in pairs for line in (f"  # {why}", f"  {run}")]
        command.epilog = "\n".join(["\b", HEADING, *lines])
        return command

    return decorate


def example_lines(command: click.Command) -> list[tuple[str, str]]:
    """A command's examples as `examples` was given them: (what it shows, the command line)."""
    lines = (command.epilog or "").split("\n")
    if HEADING not in lines:
        return []
    body = [line.strip() for line in lines[lines.index(HEADING) + 1 :]]
    return [(why.removeprefix("# "), run) for why, run in zip(body[::2], body[1::2], strict=True)]


class SummaryGroup(click.Group):
    """A group whose command list shows each command's first sentence whole (click cuts it
    to the terminal's width with `...`); the list wraps instead."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
