"""Where a command's output goes and how it looks: `--format`, `-o FILE` and `--color`, the same
in every command (docs/conventions.md).

`-o FILE` takes what the command would print on standard output, in the chosen format; `-` is
standard output itself. Questions, progress and the line that says where the output went are on
standard error, so a file or a pipe gets the output and nothing else.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

import click

from ..core.errors import TuneError
from ..core.jsontext import indented
from ..hosts.replaced import write_output
from .options import format_option

STDOUT = "-"
COLORS = ("auto", "always", "never")


def wants_color(choice: str, stream: IO[str]) -> bool:
    """`--color`: `always` and `never` win over everything; `auto` colours a terminal unless
    NO_COLOR is set to anything but the empty string (no-color.org) or TERM is `dumb`."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return stream.isatty()


@dataclass
class Output:
    """One command's output: its format, its destination (None or `-`: standard output) and
    whether text is coloured. A file is written once, whole, when the command ends."""

    fmt: str
    path: str | None = None
    color_choice: str = "auto"
    # None: standard output as it is when written to (a test's capture included).
    stream: IO[str] | None = None
    _held: list[str] = field(default_factory=list)

    @property
    def to_file(self) -> bool:
        return self.path not in (None, STDOUT)

    @property
    def json(self) -> bool:
        return self.fmt == "json"

    @property
    def color(self) -> bool:
        """Colour for the output itself: text on a terminal, never in a file or in JSON."""
        if self.fmt != "text" or self.to_file:
            return False
        return wants_color(self.color_choice, self.stream or sys.stdout)

    @property
    def live(self) -> bool:
        """Redraw in place (a rollout's table): text on standard output that is a terminal
        able to move its cursor (not TERM=dumb). Colour stays `color`'s: `--color never` and
        NO_COLOR redraw the table without colour; a pipe or a file gets a line per event."""
        if self.fmt != "text" or self.to_file or os.environ.get("TERM") == "dumb":
            return False
        return (self.stream or sys.stdout).isatty()

    @property
    def stderr_color(self) -> bool:
        """Colour for what goes to standard error (questions, progress)."""
        return wants_color(self.color_choice, sys.stderr)

    def echo(self, text: str = "", nl: bool = True) -> None:
        if self.to_file:
            self._held.append(text + ("\n" if nl else ""))
        else:
            # color=True: `--color always` keeps its escapes in a pipe, where click strips them.
            click.echo(text, file=self.stream, nl=nl, color=self.color)

    def progress(self) -> Progress:
        """A status line for a long wait: on a terminal only, never with JSON."""
        return Progress(not self.json and sys.stderr.isatty())

    def document(self, data: Any) -> None:
        """A JSON document, indented as every command writes one."""
        self.echo(indented(data))

    def close(self) -> None:
        """Write the file, when something was said: a command that failed before its first
        line leaves an existing file as it was."""
        if not self.to_file or not self._held:
            return
        assert self.path is not None
        write_atomically(self.path, "".join(self._held))
        self._held.clear()


class Progress:
    """One status line on standard error, rewritten in place while a wait lasts (`\\r`, no
    terminal escapes: TERM=dumb reads it too); `clear` before the next line of output."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.width = 0

    def __call__(self, text: str) -> None:
        if not self.enabled:
            return
        sys.stderr.write("\r" + text.ljust(self.width))
        sys.stderr.flush()
        self.width = len(text)

    def clear(self) -> None:
        if self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()
            self.width = 0


def write_atomically(path: str, content: str) -> None:
    """`content` in `path`, replacing it whole: a reader never sees half a report (a device or
    a FIFO is written through, `hosts.replaced`)."""
    write_output(path, content, "write the output")


OUTPUT_HELP = "Write the output to FILE in the chosen --format; - is standard output."


def color_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--color",
        "color_choice",
        type=click.Choice(COLORS),
        default="auto",
        show_default=True,
        help="Colour the text output: auto is a terminal without NO_COLOR or TERM=dumb.",
    )(command)


def output_options(
    *formats: str, help: str | None = None, output: bool = True
) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """`--format` (the first of `formats` the default), `-o/--output FILE` and `--color`; the
    command receives them as one `out: Output`, whose file is written when the command ends
    (also on an error after output: `tune history`'s table before its exit 6). `output`
    False: the command has its own `-o` (snapshot's archive)."""

    def decorate(command: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> int:
            out = Output(
                kwargs.pop("fmt"),
                kwargs.pop("out_path") if output else None,
                kwargs.pop("color_choice"),
            )
            try:
                code = command(*args, out=out, **kwargs)
            except TuneError:  # a result with its exit code: what was said is the output
                out.close()
                raise
            # Anything else (Ctrl-C, a bug) leaves the file as it was: no half a report.
            out.close()
            return code

        decorated: Callable[..., int] = color_option(wrapper)
        if output:
            decorated = click.option(
                "-o", "--output", "out_path", metavar="FILE", help=OUTPUT_HELP
            )(decorated)
        return format_option(*formats, help=help)(decorated)

    return decorate
