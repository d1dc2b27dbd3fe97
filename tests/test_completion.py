"""Issue #35, item 4: <TAB> offers what the operator would type next, through click's own
completion protocol (what `eval "$(tune completion bash)"` asks the program)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.shell_completion import BashComplete
from conftest import BLACKWELL, UNTUNED, copy_host, run_tune

from reconciler.cli.main import cli

TUNE = Path(sys.executable).parent / "tune"


def offered(*words: str) -> list[tuple[str, str]]:
    """What bash is offered after `tune WORDS...` (the last word is the one being typed): each
    item's type (plain, file, dir) and value."""
    *args, incomplete = words
    completion = BashComplete(cli, {}, "tune", "_TUNE_COMPLETE")
    return [(item.type, item.value) for item in completion.get_completions(args, incomplete)]


def test_profile_offers_the_bundled_names_then_the_files() -> None:
    for command in ("plan", "check", "apply", "validate", "snapshot"):
        assert offered(command, "") == [
            ("plain", "base-gpu-inference"),
            ("plain", "blackwell-8x"),
            ("file", ""),
        ], command
    assert offered("plan", "bl") == [("plain", "blackwell-8x"), ("file", "bl")]
    assert offered("export", "machineconfig", "base") == [
        ("plain", "base-gpu-inference"),
        ("file", "base"),
    ]


def test_the_protocol_bash_speaks_offers_the_bundled_profiles() -> None:
    """`tune plan <TAB>` after `pipx install`, as the script of `tune completion bash` asks."""
    env = {
        **os.environ,
        "_TUNE_COMPLETE": "bash_complete",
        "COMP_WORDS": "tune plan ",
        "COMP_CWORD": "2",
    }
    done = subprocess.run([TUNE], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["plain,base-gpu-inference", "plain,blackwell-8x", "file,"]


def test_root_offers_archives_and_leaves_directories_to_the_shell(tmp_path: Path) -> None:
    (tmp_path / "snap.tar.gz").write_bytes(b"")
    (tmp_path / "snap-dir").mkdir()
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "old.tgz").write_bytes(b"")
    # The working directory is tmp_path (conftest).
    assert offered("plan", str(BLACKWELL), "--root", "") == [
        ("plain", "old.tgz"),
        ("plain", "snap.tar.gz"),
        ("dir", ""),
    ]
    assert offered("audit", "--root", f"{tmp_path}/sn") == [
        ("plain", f"{tmp_path}/snap.tar.gz"),
        ("dir", f"{tmp_path}/sn"),
    ]
    assert offered("check", "--root", "/nowhere/x") == [("dir", "/nowhere/x")]


def commands(group: click.Group = cli, prefix: str = "") -> list[tuple[str, click.Command]]:
    context = click.Context(group)
    found: list[tuple[str, click.Command]] = []
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None
        if isinstance(command, click.Group):
            found += commands(command, f"{prefix}{name} ")
        else:
            found.append((f"{prefix}{name}", command))
    return found


@pytest.mark.parametrize(("name", "command"), commands(), ids=[n for n, _ in commands()])
def test_every_root_and_every_profile_completes(name: str, command: click.Command) -> None:
    for param in command.params:
        if param.name in ("root", "profile", "target"):
            context = click.Context(command)
            values = [item.type for item in param.shell_complete(context, "")]
            assert values[-1] in ("dir", "file"), (name, param.name, values)


def test_rollback_and_report_offer_the_host_s_runs_newest_first(tmp_path: Path) -> None:
    root = copy_host(UNTUNED, tmp_path / "host")
    for _ in range(2):
        assert run_tune("apply", BLACKWELL, "--root", root, "--runtime-only", "--yes").code == 0
        assert run_tune("rollback", "--root", root, "--yes").code == 0
    runs = sorted(p.stem for p in (root / "var/lib/tune/runs").glob("*.jsonl"))[::-1]
    assert len(runs) >= 2
    for command in ("rollback", "report"):
        shown = offered(command, "--root", str(root), "")
        assert shown == [("plain", run) for run in runs], command
        assert offered(command, "--root", str(root), runs[0][:-3]) == [("plain", runs[0])]
    assert offered("rollback", "--root", str(tmp_path / "none"), "") == []


def test_rollout_ids_are_those_this_controller_journaled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journals = tmp_path / "state" / "rollouts"
    journals.mkdir(parents=True)
    for rollout_id in ("20261201T100000Z-aaaaaa", "20261203T100000Z-bbbbbb"):
        (journals / f"{rollout_id}.json").write_text("{}")
    for command in ("status", "resume"):
        assert offered("rollout", command, "") == [
            ("plain", "20261203T100000Z-bbbbbb"),
            ("plain", "20261201T100000Z-aaaaaa"),
        ]
        assert offered("rollout", command, "20261201") == [("plain", "20261201T100000Z-aaaaaa")]


def test_examples_offer_their_names_then_their_files() -> None:
    assert ("plain", "systemd") in offered("examples", "")
    assert offered("examples", "cr") == [("plain", "cron")]
    assert offered("examples", "systemd", "tune-check.") == [
        ("plain", "tune-check.service"),
        ("plain", "tune-check.timer"),
    ]
    assert offered("examples", "nosuch", "") == []
