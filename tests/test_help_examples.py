"""Issue #35, item 3: every command's --help teaches by 1-3 examples, and every example is a real
command: run here on a copy of the example hosts (those that change a host change the copy),
its exit code the one its comment promises. Examples that reach hosts over SSH or need Slurm
are parsed by click, not run: nothing here leaves 127.0.0.0/8."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from conftest import run_tune
from examples_run import every_command, parses, promised_exit, run_example, the_command, workspace

from reconciler.cli.helptext import example_lines
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


def test_every_example_runs_on_the_example_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The examples' relative paths land in the workspace, their working directory.
    workspace(tmp_path, monkeypatch)

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
            promised = promised_exit(why)
            run_example(words, ExitCode.IN_SYNC if promised is None else promised, line)
            ran += 1
    assert ran >= 30 and parsed >= 4, (ran, parsed)
