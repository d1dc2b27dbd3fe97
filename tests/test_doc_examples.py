"""Issue #35, item 3: every `tune ...` line of the documentation (docs/**/*.md and README.md) is
tried, so none can rot. The rule, as docs/contributing/tests.md states it:

- A fenced block tagged `sh`, `bash`, `shell` or `console` holds commands. A line is one when it
  starts with `tune` (or a path ending in `/tune`, or `sudo tune`); in a `console` block after
  the prompt `$ ` or `# `, and the lines without a prompt there are its output, each of which it
  must print. `a && b`, `a; b` and a `for V in ...; do ... done` loop are taken apart as sh
  would. A page's blocks run in order in one workspace (tests/examples_run.py): copies of the
  example hosts, profiles/, profile.yaml (the reader's own profile), hosts.ini; a path under
  /tmp/ lands in the workspace's tmp/. `cp`, `mkdir`, `tar` and `cat` run as written there when
  every path they name is in it; any other program (kubectl, reboot, ...) is the reader's, not
  tune's, and is left out.
- Each tune command runs in-process and must end with the exit code its comment names
  (`# exit 2: changes`); without one, for a block's only tune command, the first `exit code N`
  of the prose that follows it (up to the next heading or example); else 0. `prints "TEXT"` in
  its comment is output it must print (a `...` at the end of TEXT is left out). `> FILE` into
  the workspace gets its standard output. Where tune asks before writing, the reader answers
  yes at a terminal.
- A command in PARSED_ONLY needs what the suite must not have (SSH hosts, a reboot, this
  machine as root): click parses it, so an unknown option, a removed command or a wrong count
  of arguments still fails. A command that would read this machine and is not listed fails.
- A block with no tag (or `text`) is a synopsis (`tune plan PROFILE [--root DIR] ...`): its
  commands must exist and every option it names must be one of theirs. So must a code span of
  the prose that starts with `tune ` (up to a `|`; `…` marks a catalogue's placeholder, left
  out)."""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from conftest import PROJECT
from examples_run import parsed, promised_exit, run_example, workspace

from reconciler.cli.main import cli

SHELL = {"sh", "bash", "shell", "console"}
SYNOPSIS = {"", "text"}
# Programs a page runs to set its example up, run as written in the workspace when every path
# they name lies in it (this machine's /etc is never written).
SETUP = {"cp", "mkdir", "tar", "cat"}

# Examples that need what the suite must not have: parsed, never run.
THIS_MACHINE = "this machine, as root: the suite reads and writes snapshots only"
PARSED_ONLY = {
    "tune plan blackwell-8x": THIS_MACHINE,
    "tune apply --runtime-only": THIS_MACHINE,
    "tune check blackwell-8x": THIS_MACHINE,
    "tune plan my-gpu-node.yaml": THIS_MACHINE,
    "tune apply --reboot-phase --reboot": THIS_MACHINE + ", and reboots it",
    "tune check my-gpu-node.yaml": THIS_MACHINE,
    "tune check --quiet --since-apply --prometheus /var/lib/prometheus/node-exporter/tune.prom": (
        THIS_MACHINE
    ),
    "tune apply profiles/blackwell-8x.yaml --reboot-phase": THIS_MACHINE + " (the reboot phase)",
    "tune verify": "follows a reboot of this machine",
    "tune apply profiles/blackwell-8x.yaml --reboot -H gpu-node-07 --reboot-timeout 600": (
        "reaches a host over SSH and reboots it"
    ),
    "tune verify -H gpu-node-07": "reaches a host over SSH after its reboot",
    "tune kube gpu-operator profile.yaml": "on a node: reads the GPU Operator's mark there",
}

PAGES = [*sorted((PROJECT / "docs").rglob("*.md")), PROJECT / "README.md"]


@dataclass
class Block:
    page: Path
    number: int  # the line of its opening fence
    tag: str
    lines: list[tuple[int, str]]
    end: int = 0  # the line of its closing fence
    after: str = ""  # the prose after it, up to the next heading or example


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of a page, each with the prose that follows it up to the next heading
    or the next block with a tune command."""
    lines = (page.read_text() if text is None else text).splitlines()
    found: list[Block] = []
    current: Block | None = None
    fence = ""
    for number, line in enumerate(lines, 1):
        opened = re.match(r"^\s*(`{3,}|~{3,})\s*([\w-]*)", line)
        if current is None and opened:
            fence, current = opened.group(1), Block(page, number, opened.group(2), [])
        elif current is not None and line.strip().startswith(fence):
            current.end = number
            found.append(current)
            current = None
        elif current is not None:
            current.lines.append((number, line))
    for block in found:
        prose = []
        for number in range(block.end + 1, len(lines) + 1):
            inside = next((b for b in found if b.number <= number <= b.end), None)
            if inside is not None and has_tune(inside):
                break
            if inside is None:
                if lines[number - 1].startswith("#"):
                    break
                prose.append(lines[number - 1])
        block.after = "\n".join(prose)
    return found


def code_spans(page: Path, found: list[Block], text: str | None = None) -> list[Block]:
    """The prose's `tune ...` code spans, each as a one-line synopsis block."""
    lines = (page.read_text() if text is None else text).splitlines()
    fenced = {n for b in found for n in range(b.number, b.end + 1)}
    prose = "\n".join("" if n in fenced else line for n, line in enumerate(lines, 1))
    spans = []
    for span in re.finditer(r"(?<!`)`(tune [^`]+)`(?!`)", prose):
        if "…" in span.group(1):
            continue
        number = prose.count("\n", 0, span.start()) + 1
        command = span.group(1).split(" | ")[0].replace("\n", " ")
        spans.append(Block(page, number, "", [(number, command)], end=number))
    return spans


def has_tune(block: Block) -> bool:
    if block.tag in SHELL:
        return any(tune_words(words) is not None for words in words_of(block))
    return block.tag in SYNOPSIS and any(t.strip().startswith("tune ") for _, t in block.lines)


def split_comment(line: str) -> tuple[str, str]:
    """A shell line's code and its comment (`#` at a word's start, outside quotes)."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip(), line[index + 1 :].strip()
    return line.rstrip(), ""


@dataclass
class Command:
    number: int
    words: list[str]  # sh's words, operators (`&&`, `>`, `|`) among them
    comment: str
    output: list[str] = field(default_factory=list)  # what a console block shows after it


def commands_of(block: Block) -> Iterator[Command]:
    """A block's commands, a loop unrolled, each `&&`/`;`/`||` part its own."""
    lines = list(block.lines)
    last: Command | None = None
    while lines:
        number, line = lines.pop(0)
        text = line.strip()
        if block.tag == "console":
            if not text.startswith(("$ ", "# ")):
                if last is not None and text:
                    last.output.append(text)
                continue
            text = text[2:]
        while text.endswith("\\") and lines:  # a line continued, joined as sh joins it
            text = text[:-1] + " " + lines.pop(0)[1].strip().removeprefix("> ")
        code, comment = split_comment(text)
        if not code:
            continue
        loop = re.fullmatch(r"for (\w+) in (.+); do", code)
        if loop:
            body = []
            while lines and lines[0][1].strip() != "done":
                body.append(lines.pop(0))
            lines.pop(0)
            unrolled = [
                (n, re.sub(rf"\$\{{?{loop.group(1)}\}}?", value, b))
                for value in shlex.split(loop.group(2))
                for n, b in body
            ]
            lines[:0] = unrolled
            continue
        lexer = shlex.shlex(code, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        part: list[str] = []
        for word in [*lexer, ";"]:
            if word in ("&&", "||", ";"):
                if part:
                    last = Command(number, part, comment)
                    yield last
                part = []
            else:
                part.append(word)


def words_of(block: Block) -> list[list[str]]:
    return [command.words for command in commands_of(block)] if block.tag in SHELL else []


def tune_words(words: list[str]) -> list[str] | None:
    """The words after `tune` of a command that runs tune, else None."""
    if words[:1] == ["sudo"]:
        words = words[1:]
    if not words or Path(words[0]).name != "tune":
        return None
    return words[1:]


def key(words: list[str]) -> str:
    return " ".join(["tune", *words])


@dataclass
class Tally:
    ran: int = 0
    parsed: int = 0
    synopses: int = 0
    parsed_only: set[str] = field(default_factory=set)


def try_page(page: Path, root: Path, tally: Tally, text: str | None = None) -> None:
    """Try every example of a page in the workspace `root`, the reader at a terminal
    answering yes to each question."""
    (root / "tmp").mkdir(exist_ok=True)  # where the pages' /tmp/... land
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", Terminal("y\n" * 100))
        found = blocks(page, text)
        for block in found:
            if block.tag in SHELL:
                try_shell_block(block, root, tally)
            elif block.tag in SYNOPSIS:
                check_synopsis(block, tally)
        for span in code_spans(page, found, text):
            check_synopsis(span, tally)


class Terminal(io.StringIO):
    """Standard input that says it is a terminal: where tune asks, the reader answers."""

    def isatty(self) -> bool:
        return True


def try_shell_block(block: Block, root: Path, tally: Tally) -> None:
    found = list(commands_of(block))
    tunes = [c for c in found if tune_words(c.words) is not None]
    prose = re.search(r"[Ee]xit code `?(\d+)", block.after)
    for command in found:
        where = f"{block.page.relative_to(PROJECT)}:{command.number}"
        words = [in_workspace(word, root) for word in command.words]
        argv, target = redirected(words, root)
        args = tune_words(argv)
        if args is None:
            argv = [os.path.expanduser(word) for word in argv]
            if argv[0] in SETUP and all(inside(word, root) for word in argv[1:]):
                done = subprocess.run(argv, cwd=root, capture_output=True, text=True)
                assert done.returncode == 0, f"{where}: {' '.join(argv)}: {done.stderr}"
                if target is not None:
                    target.write_text(done.stdout)
            continue
        if key(args) in PARSED_ONLY:
            parse(args, where)
            tally.parsed += 1
            tally.parsed_only.add(key(args))
            continue
        parse(args, where)
        code = promised_exit(command.comment)
        if code is None:
            code = int(prose.group(1)) if prose and len(tunes) == 1 else 0
        done = run_example(args, code, where)
        shown = done.out + done.err
        for text in [*re.findall(r'\bprints "([^"]+)"', command.comment), *command.output]:
            text = text.removesuffix("...").rstrip()
            assert text in shown, f"{where}: {text!r} is not what it prints:\n{shown[-2000:]}"
        if target is not None:
            target.write_text(done.out)
        tally.ran += 1


def inside(word: str, root: Path) -> bool:
    """Whether a word names nothing outside the workspace (a relative path stays in it)."""
    return not word.startswith("/") or Path(word).resolve().is_relative_to(root.resolve())


def in_workspace(word: str, root: Path) -> str:
    return str(root / word[1:]) if word.startswith("/tmp/") else word


def redirected(words: list[str], root: Path) -> tuple[list[str], Path | None]:
    """The command before a pipe or a redirection, and the file in the workspace its standard
    output goes to (None: the terminal, a pipe, or a file outside the workspace)."""
    for index, word in enumerate(words):
        if word == "|":
            return words[:index], None
        if word in (">", ">>"):
            target = (root / Path(words[index + 1]).expanduser()).resolve()
            inside = target.is_relative_to(root.resolve())
            if inside:
                target.parent.mkdir(parents=True, exist_ok=True)
            return words[:index], target if inside else None
    return words, None


def parse(args: list[str], where: str) -> None:
    try:
        parsed(args)
    except click.exceptions.Exit:
        pass
    except click.ClickException as exc:
        raise AssertionError(f"{where}: tune {shlex.join(args)}: {exc.format_message()}") from exc


def check_synopsis(block: Block, tally: Tally) -> None:
    """`tune check|audit [--root DIR] ...`: each command named exists and takes each option."""
    reached: list[click.Command] = []
    for number, line in block.lines:
        code = re.split(r"\s#\s", line, maxsplit=1)[0]
        where = f"{block.page.relative_to(PROJECT)}:{number}"
        if code.strip().startswith("tune "):
            reached = synopsis_commands(code.split()[1:], where)
            tally.synopses += 1
        elif not (reached and code[:1].isspace()):
            reached = []
            continue
        for option in re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", code):
            for command in reached:
                known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
                assert option in known | {"--help", "-h"}, (
                    f"{where}: tune {command.name} has no option {option}"
                )


def synopsis_commands(words: list[str], where: str) -> list[click.Command]:
    reached: list[click.Command] = [cli]
    for word in words:
        names = word.split("|")
        groups = [c for c in reached if isinstance(c, click.Group)]
        if not groups or not all(re.fullmatch(r"[a-z][a-z-]*", n) for n in names):
            break
        subs = [g.get_command(click.Context(g), n) for g in groups for n in names]
        if all(s is None for s in subs):
            break
        assert all(s is not None for s in subs), f"{where}: no command {word}"
        reached = [s for s in subs if s is not None]
    # `tune --help`, `tune -V`: tune's own options, checked as a command's are.
    assert reached != [cli] or words[0].startswith("-"), f"{where}: names no command"
    return reached


def pages_with_examples() -> list[Path]:
    return [page for page in PAGES if any(has_tune(block) for block in blocks(page))]


EXAMPLE_PAGES = pages_with_examples()


@pytest.mark.parametrize(
    "page", EXAMPLE_PAGES, ids=[str(p.relative_to(PROJECT)) for p in EXAMPLE_PAGES]
)
def test_every_documented_example_runs_or_parses(
    page: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tally = Tally()
    try_page(page, workspace(scratch / "work", monkeypatch), tally)
    assert tally.ran + tally.parsed + tally.synopses >= 1


def test_the_rule_finds_the_examples_and_every_parsed_only_one_is_still_documented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docs' examples found as the rule says, and no entry of PARSED_ONLY is stale."""
    found = [
        key(args)
        for page in PAGES
        for block in blocks(page)
        for words in words_of(block)
        if (args := tune_words(redirected(words, tmp_path)[0])) is not None
    ]
    assert len(found) >= 30, found
    assert set(PARSED_ONLY) <= set(found), set(PARSED_ONLY) - set(found)
    assert len(EXAMPLE_PAGES) >= 15, EXAMPLE_PAGES


@pytest.mark.parametrize(
    ("page", "said"),
    [
        ("```sh\ntune plan --no-such-option\n```\n", "No such option '--no-such-option'"),
        ("```console\n$ tune plan --no-such-option\n```\n", "No such option"),
        ("```sh\ntune plan blackwell-8x \\\n    --no-such-option\n```\n", "No such option"),
        ("```\ntune plan --no-such-option\n```\n", "tune plan has no option --no-such-option"),
        ("```\ntune plan PROFILE\n           [--root DIR] [--nope]\n```\n", "no option --nope"),
        ("```sh\ntune frobnicate blackwell-8x\n```\n", "No such command 'frobnicate'"),
        ("```sh\ntune profiles blackwell-8x\n```\n", "unexpected extra argument"),
        ("```sh\ntune plan --root examples/hosts/rtx6000bw-tuned\n```\n", "Missing argument"),
        ("```sh\ntune check base-gpu-inference\n```\n", "reads this machine"),
        (
            "```sh\ntune plan blackwell-8x --root examples/hosts/rtx6000bw-untuned\n```\n",
            "exit 2",
        ),
        (
            "```sh\ntune validate blackwell-8x   # prints \"valid profile 'other'\"\n```\n",
            "is not what it prints",
        ),
        (
            "```console\n$ tune validate blackwell-8x\nvalid profile 'other'\n```\n",
            "is not what it prints",
        ),
        ("```\ntune rollout status|frobnicate [ID]\n```\n", "no command status|frobnicate"),
        ("Run `tune plan --no-such-option` first.\n", "tune plan has no option --no-such-option"),
        ("Or `tune plan PROFILE\n--nope`.\n", "tune plan has no option --nope"),
    ],
)
def test_a_wrong_example_in_a_page_fails(
    page: str, said: str, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tune plan --no-such-option` in a doc page, in any block, fails the test; so do a
    removed command, a wrong count of arguments, this machine, a wrong exit code or output."""
    root = workspace(scratch / "work", monkeypatch)
    with pytest.raises(AssertionError, match=re.escape(said)):
        try_page(PROJECT / "docs/page.md", root, Tally(), text=page)


def test_a_right_example_in_a_page_passes_and_its_output_is_checked(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = workspace(scratch / "work", monkeypatch)
    page = (
        "```console\n$ tune validate blackwell-8x\nvalid profile 'blackwell-8x'\n```\n"
        "```sh\nfor p in blackwell-8x base-gpu-inference; do\n  tune validate $p\ndone\n```\n"
        # Outside the workspace: left out (were it run, cp would fail: no such directory).
        "```sh\ncp profiles/blackwell-8x.yaml /nonexistent-tune-test/p.yaml\n```\n"
        "```sh\ncp -r examples/hosts/rtx6000bw-untuned /tmp/host\n"
        "tune plan blackwell-8x --root /tmp/host > plan.txt && cat plan.txt\n```\n"
        "Exit code `2`: changes.\n"
        "```\ntune check|audit [--root DIR] -H HOST\n```\n"
        "Then `tune --help`, `tune man apply | man -l -` and `tune …` (a placeholder).\n"
    )
    tally = Tally()
    try_page(PROJECT / "docs/page.md", root, tally, text=page)
    assert (tally.ran, tally.synopses) == (4, 3)
    assert "Plan: 29 to change" in (root / "plan.txt").read_text()
    assert (root / "tmp/host/proc").is_dir()
