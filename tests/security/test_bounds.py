"""Input that would never end or never fit: a YAML alias bomb, a FIFO where a profile should be, a
profile of 200,000 keys, a snapshot archive that unpacks to hundreds of megabytes, a sparse
journal of 20 GiB; and a disk that fills up under an apply. Each is refused with one sentence
(or, for a full disk, stops before the write it could not journal), never a hang, never exit 70.

A hang must fail the test, not block the suite: such runs go to a child process with a timeout
and a memory limit."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import UNTUNED, Result

from reconciler import profile as profile_mod
from reconciler.profile import load_profile

# Generous for a machine of two busy cores: the unbounded cases take minutes or forever.
CHILD_SECONDS = 20
CHILD_MEMORY = 2 << 30
# Reports the child's peak memory on stderr, whatever way it ends.
CHILD = (
    "import atexit, resource, sys\n"
    "atexit.register(lambda: print('peak-kb', resource.getrusage(resource.RUSAGE_SELF)"
    ".ru_maxrss, file=sys.stderr))\n"
    "from reconciler.cli import main\n"
    "main(sys.argv[1:])\n"
)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))


def tune_in_child(*args: str | Path) -> tuple[Result, int]:
    """`tune ARGS` in a child process: its result and its peak memory in KiB. A run past
    CHILD_SECONDS fails the test."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=CHILD_SECONDS,
            preexec_fn=_limit_memory,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"tune {' '.join(map(str, args))} was still running after {CHILD_SECONDS} s")
    lines = done.stderr.splitlines()
    peak = [int(line.split()[1]) for line in lines if line.startswith("peak-kb ")]
    err = "\n".join(line for line in lines if not line.startswith("peak-kb "))
    return Result(done.returncode, done.stdout, err), peak[0] if peak else 0


def alias_bomb(levels: int = 9) -> str:
    """Each anchor repeats the one before nine times: 9**9 strings from a few hundred bytes."""
    lines = ["name: bomb", 'l0: &l0 ["x","x","x","x","x","x","x","x","x"]']
    for n in range(1, levels):
        lines.append(f"l{n}: &l{n} [{','.join([f'*l{n - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    assert bomb.stat().st_size < 500
    result, _peak = tune_in_child("validate", bomb)
    assert result.code == 65, result.err
    assert "more than 20,000 keys, values and list items" in result.err
    assert result.err.startswith(f"{bomb}:")


def test_aliases_that_repeat_a_little_are_still_a_profile(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: shared\nsysctl:\n  vm.swappiness: &low 10\n  vm.dirty_ratio: *low\n")
    assert load_profile(path).data["sysctl"] == {"vm.swappiness": 10, "vm.dirty_ratio": 10}


@pytest.mark.parametrize("command", ["validate", "plan", "check"])
def test_a_fifo_as_the_profile_is_refused_not_waited_on(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "profile.yaml"
    os.mkfifo(fifo)
    args = [command, fifo] if command == "validate" else [command, fifo, "--root", UNTUNED]
    result, _peak = tune_in_child(*args)
    assert result.code == 65, result.err
    assert result.err.strip() == f"{fifo}:1:1: cannot read profile: a FIFO is not a regular file"


def test_a_profile_of_200000_keys_is_refused_quickly(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: huge\nsysctl:\n" + "".join(f"  k{n}: 1\n" for n in range(200_000)))
    result, _peak = tune_in_child("validate", huge)
    assert result.code == 65, result.err
    assert "larger than 256 KiB, the most tune reads for a profile" in result.err


def test_a_profile_just_under_the_size_limit_with_too_many_keys_is_refused_by_count(
    tmp_path: Path,
) -> None:
    many = tmp_path / "many.yaml"
    many.write_text("name: many\nsysctl:\n" + "".join(f"  k{n}: 1\n" for n in range(12_000)))
    assert many.stat().st_size < 256 << 10
    result, _peak = tune_in_child("validate", many)
    assert result.code == 65, result.err
    assert "more than 20,000 keys" in result.err


def test_the_cached_profile_is_the_one_parsed_even_if_the_file_changes_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit between the parse and the cache's store: the entry must describe the bytes
    parsed, so the next run sees the edit (before: the old profile under the new hash)."""
    monkeypatch.setenv("TUNE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nsysctl:\n  vm.swappiness: 10\n")
    real = profile_mod._validated

    def edited_meanwhile(tree: profile_mod.Tree, name: str) -> profile_mod.LoadedProfile:
        loaded = real(tree, name)
        path.write_text("name: p\nsysctl:\n  vm.swappiness: 99\n")
        return loaded

    monkeypatch.setattr(profile_mod, "_validated", edited_meanwhile)
    assert load_profile(path).data["sysctl"] == {"vm.swappiness": 10}
    monkeypatch.setattr(profile_mod, "_validated", real)
    assert load_profile(path).data["sysctl"] == {"vm.swappiness": 99}


def test_an_edited_parent_is_not_served_from_the_cache_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNE_CACHE_DIR", str(tmp_path / "cache"))
    parent = tmp_path / "parent.yaml"
    parent.write_text("sysctl:\n  vm.swappiness: 10\n")
    child = tmp_path / "child.yaml"
    child.write_text("name: child\nextends: parent.yaml\n")
    real = profile_mod._validated

    def edited_meanwhile(tree: profile_mod.Tree, name: str) -> profile_mod.LoadedProfile:
        loaded = real(tree, name)
        parent.write_text("sysctl:\n  vm.swappiness: 99\n")
        return loaded

    monkeypatch.setattr(profile_mod, "_validated", edited_meanwhile)
    assert load_profile(child).data["sysctl"] == {"vm.swappiness": 10}
    monkeypatch.setattr(profile_mod, "_validated", real)
    assert load_profile(child).data["sysctl"] == {"vm.swappiness": 99}
