"""The man pages, in roff, written from the click commands themselves: tune(1), the whole manual,
and a page a command (tune-apply(1), tune-rollout(1), tune-rollout-status(1), ...). Each says
what `--help` says, so it cannot drift from it; the wheel ships them in share/man/man1
(`man/man1/` of the checkout, which `tests/test_man_pages.py` holds equal to these).

A group has its page (its commands, each with its own page) and each of its commands has one:
a subcommand has its own synopsis, options and exit codes, as git's and systemd's tools do."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import click

from .. import __version__
from ..core.errors import EXIT_CODES
from .helptext import example_lines


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


def _flags(command: click.Command) -> set[str]:
    return {flag for param in command.params for flag in getattr(param, "opts", ())}


@dataclass(frozen=True)
class PageEntry:
    """One line of ENVIRONMENT or FILES: what, what it means, which commands it concerns."""

    name: str
    text: str
    concerns: Callable[[str, click.Command], bool]


def _with(*flags: str) -> Callable[[str, click.Command], bool]:
    return lambda name, command: bool(_flags(command) & set(flags))


def _named(*names: str) -> Callable[[str, click.Command], bool]:
    return lambda name, command: name in names or name.split(" ")[0] in names


def _always(name: str, command: click.Command) -> bool:
    return True


def _either(*tests: Callable[[str, click.Command], bool]) -> Callable[[str, click.Command], bool]:
    return lambda name, command: any(test(name, command) for test in tests)


ENVIRONMENT = (
    PageEntry("TUNE_INVENTORY", "The inventory --limit reads when -i is not given.", _with("-i")),
    PageEntry("TUNE_FORKS", "Hosts worked on at once (--forks).", _with("--forks")),
    PageEntry("TUNE_SSH_CONFIG", "The ssh_config file (--ssh-config).", _with("--ssh-config")),
    PageEntry("TUNE_SUDO", "Run commands on SSH hosts through sudo (--sudo).", _with("--sudo")),
    PageEntry(
        "TUNE_STATE_DIR",
        "The controller's state: rollout journals (default $XDG_STATE_HOME/tune, else "
        "~/.local/state/tune).",
        _named("apply", "rollout"),
    ),
    PageEntry(
        "TUNE_CACHE_DIR",
        "The cache of validated profiles (default $XDG_CACHE_HOME/tune, else ~/.cache/tune); "
        "empty turns it off.",
        lambda name, command: any(p.name in ("profile", "target") for p in command.params),
    ),
    PageEntry(
        "NO_COLOR",
        "Set to anything but the empty string: no colour with --color auto (no-color.org).",
        _with("--color"),
    ),
    PageEntry("TUNE_DEBUG", "Set: an internal error shows its Python traceback.", _always),
)

REMOTE = _with("-H", "-i")
FILES = (
    PageEntry(
        "/etc/tune/config.toml, ~/.config/tune/config.toml",
        "Defaults for inventory, forks, ssh_config and sudo (`tune config` shows them).",
        _either(REMOTE, _named("config")),
    ),
    PageEntry(
        "/var/lib/tune/runs/",
        "The journal of each run on the host: every change recorded before its write.",
        _named("apply", "rollback", "verify", "history", "report", "status", "check"),
    ),
    PageEntry(
        "/var/lib/tune/profile.yaml",
        "The profile last applied on the host: what `tune check` compares by default.",
        _named("apply", "check", "status"),
    ),
    PageEntry(
        "/var/lib/tune/status.json",
        "What tune last left on the host (`tune status`).",
        _named("apply", "check", "verify", "status"),
    ),
    PageEntry(
        "/var/lib/tune/check/first-seen.json",
        "When `tune check` first saw each drift.",
        _named("check"),
    ),
    PageEntry(
        "/run/tune/tune.lock",
        "Held while a run writes to the host.",
        _named("apply", "rollback", "verify"),
    ),
    PageEntry(
        ".tune/plan.json", "The plan `tune plan` saved for `tune apply`.", _named("plan", "apply")
    ),
    PageEntry(
        "$TUNE_STATE_DIR/rollouts/",
        "The journal of each rollout this controller ran.",
        _named("apply", "rollout"),
    ),
)


def _exit_codes(help_text: str) -> list[int]:
    """The codes a command's help names (`Exit codes: 0 ..., 2 ...`), as the contract reads
    them (tests/test_contract.py)."""
    said = re.search(r"Exit codes: ([^.]*)", " ".join(help_text.split()))
    if said is None:
        return []
    found = re.findall(r"(?<![\w.])(\d+)(?= |,|$)", said.group(1))
    return sorted({int(code) for code in found if int(code) in EXIT_CODES})


def _exit_status(codes: list[int]) -> list[str]:
    out = [".SH EXIT STATUS"]
    for code in codes:
        out += [".TP", f"\\fB{code}\\fR", roff(EXIT_CODES[code].replace("`", ""))]
    return out


def _entries(
    title: str, entries: tuple[PageEntry, ...], name: str, command: click.Command
) -> list[str]:
    chosen = [entry for entry in entries if entry.concerns(name, command)]
    out = [f".SH {title}"]
    if not chosen:
        return [*out, f"\\fBtune {roff(name)}\\fR uses none of its own."]
    for entry in chosen:
        out += [".TP", f"\\fB{roff(entry.name)}\\fR", roff(entry.text.replace("`", ""))]
    return out


def _examples(command: click.Command) -> list[str]:
    out = [".SH EXAMPLES"]
    for why, line in example_lines(command):
        out += [".PP", roff(why), ".PP", ".RS 4", ".nf", f"\\fB{roff(line)}\\fR", ".fi", ".RE"]
    return out


def page_name(path: tuple[str, ...]) -> str:
    """`tune-rollout-status`: the page of `tune rollout status`."""
    return "-".join(("tune", *path))


def _header(path: tuple[str, ...]) -> str:
    return f'.TH {page_name(path).upper()} 1 "" "tune {__version__}" "User Commands"'


def _see_also(pages: list[str]) -> str:
    return ",\n".join(f"\\fB{roff(name)}\\fR(1)" for name in pages)


def commands(
    group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command, click.Context]]:
    """Every visible command under `group`, a group before its own commands."""
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub = click.Context(command, info_name=name, parent=ctx)
        yield (*path, name), command, sub
        if isinstance(command, click.Group):
            yield from commands(command, sub, (*path, name))


def page(path: tuple[str, ...], command: click.Command, ctx: click.Context) -> str:
    """The page of one command (or group) `tune PATH...`."""
    name = " ".join(path)
    help_text = command.help or ""
    usage = " ".join(command.collect_usage_pieces(ctx))
    summary = command.get_short_help_str(limit=10_000)
    out = [
        _header(path),
        ".SH NAME",
        f"{page_name(path)} \\- {roff(summary)}",
        ".SH SYNOPSIS",
        f".B tune {roff(name)}",
        roff(usage),
        ".SH DESCRIPTION",
        _paragraphs(help_text),
    ]
    options = _options(ctx, command)
    if options:
        out += [".SH OPTIONS", *options]
    related: list[str] = []
    if isinstance(command, click.Group):
        out.append(".SH COMMANDS")
        for sub_path, sub, _ in commands(command, ctx, path):
            if len(sub_path) == len(path) + 1:
                short = sub.get_short_help_str(limit=10_000)
                out += [".TP", f"\\fB{page_name(sub_path)}\\fR(1)", roff(short)]
                related.append(page_name(sub_path))
    if isinstance(command, click.Group):
        out += [".SH EXIT STATUS", "That of the command it runs; 64 without one."]
    else:
        out += _exit_status(_exit_codes(help_text))
    out += _entries("ENVIRONMENT", ENVIRONMENT, name, command)
    out += _entries("FILES", FILES, name, command)
    if example_lines(command):
        out += _examples(command)
    parents = [page_name(path[:end]) for end in range(len(path) - 1, 0, -1)]
    out += [".SH SEE ALSO", _see_also(["tune", *parents, *related])]
    return "\n".join(out) + "\n"


def manual(group: click.Group, ctx: click.Context) -> str:
    """tune(1), the whole manual: the group's help and options, then each command's, then what
    every command shares (exit status, environment, files)."""
    summary = (group.help or "").strip().splitlines()[0]
    description = (group.help or "").split("\b")[0]  # the exit codes table has its section
    out = [
        _header(()),
        ".SH NAME",
        f"tune \\- {roff(summary)}",
        ".SH SYNOPSIS",
        ".B tune",
        "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        _paragraphs(description),
        ".SH OPTIONS",
        *_options(ctx, group),
        ".SH COMMANDS",
    ]
    pages = []
    for path, command, sub in commands(group, ctx):
        name = " ".join(path)
        usage = " ".join(command.collect_usage_pieces(sub))
        out += [f'.SS "tune {roff(name)} {roff(usage)}"', _paragraphs(command.help or "")]
        options = _options(sub, command)
        if options and not isinstance(command, click.Group):
            out += [".PP", "Options:", ".RS", *options, ".RE"]
        out += [".PP", f"See \\fB{page_name(path)}\\fR(1)."]
        pages.append(page_name(path))
    out += _exit_status(list(EXIT_CODES))
    for title, entries in (("ENVIRONMENT", ENVIRONMENT), ("FILES", FILES)):
        out.append(f".SH {title}")
        for entry in entries:
            out += [".TP", f"\\fB{roff(entry.name)}\\fR", roff(entry.text.replace("`", ""))]
    out += _examples(group)
    out += [
        ".SH SEE ALSO",
        _see_also(pages) + ",\n\\fBansible\\-inventory\\fR(1), \\fBssh_config\\fR(5)",
    ]
    return "\n".join(out) + "\n"


def root_context(group: click.Group) -> click.Context:
    """The context `tune` runs its commands in (its -h included)."""
    return click.Context(group, info_name="tune", **group.context_settings)


def pages(group: click.Group) -> dict[str, str]:
    """Every page by its file name: tune.1, then tune-COMMAND.1 for each command and group."""
    ctx = root_context(group)
    written = {"tune.1": manual(group, ctx)}
    for path, command, sub in commands(group, ctx):
        written[f"{page_name(path)}.1"] = page(path, command, sub)
    return written
