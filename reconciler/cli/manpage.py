"""tune(1) in roff, written from the click commands themselves: the man page says what
`--help` says, and cannot drift from it."""

from __future__ import annotations

import re

import click

from .. import __version__


def roff(text: str) -> str:
    """Text safe in roff: backslashes escaped, hyphens literal, no line taken for a request."""
    escaped = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(
        "\\&" + line if line[:1] in (".", "'") else line for line in escaped.splitlines()
    )


def _paragraphs(help_text: str) -> str:
    """click's help: `\\b` keeps a block's line breaks; other blocks are filled paragraphs."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n", help_text.strip()):
        lines = [line.strip() for line in block.splitlines()]
        if lines and lines[0] == "\b":
            out += [".nf", roff("\n".join(lines[1:])), ".fi"]
        else:
            out += [roff(" ".join(lines))]
        out.append(".PP")
    return "\n".join(out[:-1])


def _options(ctx: click.Context, command: click.Command) -> list[str]:
    out: list[str] = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        out += [".TP", f"\\fB{roff(names)}\\fR", roff(help_text) or "\\&"]
    return out


def manual(group: click.Group, ctx: click.Context) -> str:
    """The whole manual: the group's help and options, then each command's."""
    summary = (group.help or "").strip().splitlines()[0]
    out = [
        f'.TH TUNE 1 "" "tune {__version__}" "User Commands"',
        ".SH NAME",
        f"tune \\- {roff(summary)}",
        ".SH SYNOPSIS",
        ".B tune",
        "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        _paragraphs(group.help or ""),
        ".SH OPTIONS",
        *_options(ctx, group),
        ".SH COMMANDS",
    ]
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub = click.Context(command, info_name=name, parent=ctx)
        usage = " ".join(command.collect_usage_pieces(sub))
        out += [f'.SS "tune {name} {roff(usage)}"', _paragraphs(command.help or "")]
        options = _options(sub, command)
        if options:
            out += [".PP", "Options:", ".RS", *options, ".RE"]
    out += [".SH SEE ALSO", "\\fBansible\\-inventory\\fR(1), \\fBssh_config\\fR(5)"]
    return "\n".join(out) + "\n"
