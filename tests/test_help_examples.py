"""Issue #35, item 3: every command's --help teaches by 1-3 examples, and every example is a real
command: run here on a copy of the example hosts (those that change a host change the copy),
its exit code the one its comment promises. Examples that reach hosts over SSH or need Slurm
are parsed by click, not run: nothing here leaves 127.0.0.0/8."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import click
import pytest
from conftest import HOSTS, copy_host, run_tune
from small_host import write_profile

from reconciler.cli.helptext import example_lines
from reconciler.cli.main import cli
from reconciler.core.errors import ExitCode

# What an example needs that this machine must not do: parsed, never run.
NOT_RUN = {
    "-i hosts.ini": "reaches an inventory's hosts over SSH",
    "-H gpu1": "reaches a host over SSH",
    "tune slurm health-check": "asks Slurm (sinfo, scontrol)",
    "tune slurm reboot-program": "asks Slurm and reboots",
}
# The examples that change the host run last (the others read it as their comments say), apply
# before report, which shows its run, and rollback, which undoes it.
LAST = ("apply", "report", "rollback")


def every_command(
    group: click.Group = cli, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    context = click.Context(group)
    found: list[tuple[tuple[str, ...], click.Command]] = [(path, group)]
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None
        if isinstance(command, click.Group):
            found += every_command(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


COMMANDS = every_command()


def name_of(path: tuple[str, ...]) -> str:
    return " ".join(("tune", *path))


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[name_of(p) for p, _ in COMMANDS])
def test_every_help_has_one_to_three_examples_shown_as_written(
    path: tuple[str, ...], command: click.Command
) -> None:
    examples = example_lines(command)
    assert 1 <= len(examples) <= 3, name_of(path)
    shown = run_tune(*path, "--help").out
    for why, line in examples:
        assert line.startswith("tune "), line
        # As written: click did not rewrap the line, however long.
        assert f"\n    # {why}\n    {line}\n" in shown, line


def the_command(line: str) -> list[str]:
    """The tune command of an example line: before a pipe or a redirection, `~` expanded."""
    words = shlex.split(line)
    for index, word in enumerate(words):
        if word in ("|", ">", ">>"):
            words = words[:index]
            break
    return [os.path.expanduser(word) for word in words[1:]]


def parses(words: list[str]) -> None:
    """click's own parse of `words`, every parameter's callback included; nothing runs."""
    command: click.Command = cli
    context = cli.make_context("tune", list(words), resilient_parsing=False)
    rest = [*context._protected_args, *context.args]
    while isinstance(command, click.Group):
        name, sub, rest = command.resolve_command(context, rest)
        assert sub is not None and name is not None
        command = sub
        context = command.make_context(name, rest, parent=context)
        rest = [*getattr(context, "_protected_args", []), *context.args]


def test_every_example_runs_on_the_example_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The working directory is tmp_path (conftest): the examples' relative paths land here.
    untuned = copy_host(HOSTS / "rtx6000bw-untuned", tmp_path / "examples/hosts/rtx6000bw-untuned")
    copy_host(HOSTS / "rtx6000bw-tuned", tmp_path / "examples/hosts/rtx6000bw-tuned")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # What the examples name: an inventory (parsed only), a profile with a probe, and the pin
    # slurm's programs read.
    (tmp_path / "hosts.ini").write_text("[gpu]\ngpu1 ansible_host=127.0.0.1 ansible_port=1\n")
    probe = {"run": ["echo", "value: 1"], "metric": "value: ([0-9]+)"}
    write_profile(tmp_path / "probes.yaml", {"probes": {"echoed": probe}})
    digest = run_tune("validate", "blackwell-8x", "--format", "json")
    pinned = f"PROFILE_URL=blackwell-8x\nPROFILE_DIGEST={_digest(digest.out)}\n"
    (untuned / "etc/tune").mkdir(parents=True, exist_ok=True)
    (untuned / "etc/tune/pull.env").write_text(pinned)

    def order(entry: tuple[tuple[str, ...], click.Command]) -> int:
        path = entry[0]
        return LAST.index(path[0]) + 1 if path[:1] and path[0] in LAST else 0

    ran = parsed = 0
    for _, command in sorted(COMMANDS, key=order):
        for why, line in example_lines(command):
            words = the_command(line)
            if any(marker in line for marker in NOT_RUN):
                parses(words)
                parsed += 1
                continue
            done = run_tune(*words)
            said = f"{line}: exit {done.code}\n{done.err[-2000:]}"
            assert done.code not in (ExitCode.USAGE, ExitCode.INTERNAL), said
            promised = re.search(r"\(exit (\d+)", why)
            assert done.code == (int(promised.group(1)) if promised else ExitCode.IN_SYNC), said
            ran += 1
    assert ran >= 30 and parsed >= 4, (ran, parsed)


def _digest(validated: str) -> str:
    import json

    digest = json.loads(validated)["digest"]
    assert isinstance(digest, str)
    return digest
