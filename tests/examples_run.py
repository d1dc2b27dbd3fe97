"""How a documented example is tried (issue #35): the examples in every command's --help
(tests/test_help_examples.py) and the `tune ...` lines of the documentation
(tests/test_doc_examples.py) alike. An example runs in a workspace that holds copies of the
example hosts where the examples name them, or, where it needs what the suite must not have (a
host over SSH, Slurm, a reboot, this machine as root), is parsed by click, which still fails on
an unknown option, a removed command or a wrong count of arguments."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import click
import pytest
from conftest import BLACKWELL, HOSTS, PROFILES, Result, copy_host, run_tune
from small_host import write_profile

from reconciler.cli.main import cli
from reconciler.core.errors import ExitCode

# The parameters that name the host a command reads: none given, it reads this machine.
HOST_PARAMETERS = ("root", "hosts", "host", "inventory", "limit")


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


def the_command(line: str) -> list[str]:
    """The tune command of an example line: its words after `tune`, before a pipe or a
    redirection, `~` expanded."""
    words = shlex.split(line)
    for index, word in enumerate(words):
        if word in ("|", ">", ">>"):
            words = words[:index]
            break
    return [os.path.expanduser(word) for word in words[1:]]


def parsed(words: list[str]) -> tuple[click.Command, click.Context]:
    """click's own parse of `words` (after `tune`), every parameter's callback included;
    nothing runs. Returns the command reached and its context."""
    command: click.Command = cli
    context = cli.make_context("tune", list(words), resilient_parsing=False)
    rest = [*context._protected_args, *context.args]
    while isinstance(command, click.Group):
        name, sub, rest = command.resolve_command(context, rest)
        assert sub is not None and name is not None
        command = sub
        context = command.make_context(name, rest, parent=context)
        rest = [*getattr(context, "_protected_args", []), *context.args]
    return command, context


def parses(words: list[str]) -> None:
    parsed(words)


def reads_this_machine(words: list[str]) -> bool:
    """Whether `tune WORDS` would read (or write) the machine it runs on: a command that reads
    a host, given neither --root nor a host to reach."""
    try:
        command, context = parsed(words)
    except click.exceptions.Exit:  # --help, --version: nothing is read
        return False
    names = {parameter.name for parameter in command.params}
    if not names & set(HOST_PARAMETERS):
        return False
    return not any(context.params.get(name) for name in HOST_PARAMETERS)


def promised_exit(comment: str) -> int | None:
    """The exit code an example's comment promises: `exit N` (`(exit 2: changes)`)."""
    found = re.search(r"\bexit (\d+)", comment)
    return int(found.group(1)) if found else None


def run_example(words: list[str], code: int, said: str) -> Result:
    """Run `tune WORDS` in-process; it must end with `code` (never a usage or internal error,
    which would mean the example itself is wrong)."""
    assert not reads_this_machine(words), f"{said}: reads this machine: give it --root"
    done = run_tune(*words)
    told = f"{said}: exit {done.code}\n{done.out[-1000:]}\n{done.err[-2000:]}"
    assert done.code not in (ExitCode.USAGE, ExitCode.INTERNAL), told
    assert done.code == code, told
    return done


def workspace(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """What the examples name, laid out in `root` (their working directory): the example hosts
    (copies: an example that applies writes its copy), the bundled profiles as profiles/, the
    reader's own profile (profile.yaml, my-gpu-node.yaml), an inventory (its hosts are only
    parsed), a profile with a probe, the pin that Slurm's programs read, and a HOME of its
    own."""
    root.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(root)
    monkeypatch.setenv("HOME", str(root / "home"))
    untuned = copy_host(HOSTS / "rtx6000bw-untuned", root / "examples/hosts/rtx6000bw-untuned")
    copy_host(HOSTS / "rtx6000bw-tuned", root / "examples/hosts/rtx6000bw-tuned")
    shutil.copytree(PROFILES, root / "profiles")
    for mine in ("profile.yaml", "my-gpu-node.yaml"):
        shutil.copy(BLACKWELL, root / mine)
    shutil.copy(PROFILES / "base-gpu-inference.yaml", root)  # what they extend
    (root / "hosts.ini").write_text("[gpu]\ngpu1 ansible_host=127.0.0.1 ansible_port=1\n")
    probe = {"run": ["echo", "value: 1"], "metric": "value: ([0-9]+)"}
    write_profile(root / "probes.yaml", {"probes": {"echoed": probe}})
    validated = run_tune("validate", "blackwell-8x", "--format", "json")
    digest = json.loads(validated.out)["digest"]
    (untuned / "etc/tune").mkdir(parents=True, exist_ok=True)
    pinned = f"PROFILE_URL=blackwell-8x\nPROFILE_DIGEST={digest}\n"
    (untuned / "etc/tune/pull.env").write_text(pinned)
    return root
