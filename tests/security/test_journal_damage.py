"""A run journal that says nothing, or too much nesting to read, is damage (exit 6 with what is
known), never a run that changed nothing or tune's own crash: issue #30 items 12 and the low one.

An emptied or NUL-filled journal of a run that changed the host read as an interrupted run of
0 changes, and `tune rollback` answered "already rolled back" (exit 0) with every change still
made; a line of deeply nested JSON made history and rollback exit 70 (RecursionError)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import run_tune
from test_journal import applied, clear, journal_of

from reconciler.apply.journal import RUNS
from reconciler.core.errors import ExitCode


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, bytes]]:
    return applied(tmp_path_factory.mktemp("damage"))


def _fresh(host: tuple[Path, Path, dict[str, bytes]], target: Path) -> Path:
    shutil.copytree(host[0], target, symlinks=True)
    return target


@pytest.mark.parametrize("how", ["empty", "nul-filled", "nul-lines"])
def test_a_journal_that_says_nothing_of_its_run_is_refused_as_damage(
    host: tuple[Path, Path, dict[str, bytes]], tmp_path: Path, how: str
) -> None:
    root = _fresh(host, tmp_path / "h")
    path = journal_of(root)
    size = path.stat().st_size
    path.write_bytes(
        {"empty": b"", "nul-filled": b"\0" * size, "nul-lines": b"\0" * 100 + b"\n"}[how]
    )
    where = f"/{RUNS.lstrip('/')}/{path.name}:1: "
    changed = {k: v for k, v in host[2].items()}

    history = run_tune("history", "--root", root)
    clear(history)
    assert history.code == ExitCode.JOURNAL, history.out + history.err
    assert where in history.err
    assert "damaged" in history.out and "interrupted" not in history.out

    rollback = run_tune("rollback", "--root", root, "-y")
    clear(rollback)
    assert rollback.code == ExitCode.JOURNAL, rollback.out + rollback.err
    assert "already rolled back" not in rollback.out + rollback.err
    assert rollback.err.startswith(where)
    assert "check it by hand" in rollback.err or "checked by hand" in rollback.err
    assert changed  # the host is as the apply left it: nothing was restored from nothing

    refused = run_tune("apply", host[1], "--runtime-only", "--root", root, "-y")
    clear(refused)
    assert refused.code == ExitCode.JOURNAL, refused.err


def test_a_journal_line_nested_too_deeply_to_read_is_refused_as_damage(
    host: tuple[Path, Path, dict[str, bytes]], tmp_path: Path
) -> None:
    root = _fresh(host, tmp_path / "h")
    path = journal_of(root)
    lines = path.read_bytes().splitlines(keepends=True)
    nested = b'{"type":"step","seq":' + b"[" * 200_000 + b"]" * 200_000 + b"}\n"
    path.write_bytes(b"".join([*lines[:2], nested, *lines[2:]]))
    where = f"/{RUNS.lstrip('/')}/{path.name}:3: "
    for command in (("history",), ("rollback", "-y"), ("report",)):
        result = run_tune(*command, "--root", root)
        clear(result)
        assert result.code == ExitCode.JOURNAL, (command, result.err)
        assert where in result.err, (command, result.err)
