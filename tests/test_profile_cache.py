"""The profile cache: a second read of unchanged files skips YAML and pydantic; any change to
any file read (parents too), a damaged entry or a directory others can write is a miss."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT, UNTUNED, run_tune, write

from reconciler.profile import cache as profile_cache
from reconciler.profile import load as profile_mod
from reconciler.profile.load import load_profile, load_profile_text

PARENT = "sysctl:\n  vm.swappiness: 10\n"
CHILD = "name: child\nextends: parent.yaml\nsysctl:\n  kernel.numa_balancing: 0\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("TUNE_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every real validation (a cache miss) of the test, by file."""
    seen: list[str] = []
    real = profile_mod._validated

    def counting(tree: profile_mod.Tree, path: str) -> profile_mod.LoadedProfile:
        seen.append(path)
        return real(tree, path)

    monkeypatch.setattr(profile_mod, "_validated", counting)
    return seen


def profiles(tmp_path: Path, parent: str = PARENT) -> Path:
    write(tmp_path, "parent.yaml", parent)
    return write(tmp_path, "child.yaml", CHILD)


def test_second_read_is_a_hit_with_the_same_result(
    tmp_path: Path, cache: Path, validations: list[str]
) -> None:
    path = profiles(tmp_path)
    first = load_profile(path)
    second = load_profile(path)
    assert validations == [str(path)]
    assert second == first
    assert second.profile.sysctl["vm.swappiness"].value == "10"
    assert list((cache / "profiles").iterdir())


def test_an_edited_parent_is_read_again(
    tmp_path: Path, cache: Path, validations: list[str]
) -> None:
    path = profiles(tmp_path)
    load_profile(path)
    write(tmp_path, "parent.yaml", "sysctl:\n  vm.swappiness: 1\n")
    assert load_profile(path).profile.sysctl["vm.swappiness"].value == "1"
    assert len(validations) == 2


def test_a_parent_that_gave_nothing_is_still_watched(
    tmp_path: Path, cache: Path, validations: list[str]
) -> None:
    path = profiles(tmp_path, parent="{}\n")
    assert "vm.swappiness" not in load_profile(path).profile.sysctl
    write(tmp_path, "parent.yaml", PARENT)
    assert load_profile(path).profile.sysctl["vm.swappiness"].value == "10"
    assert len(validations) == 2


def test_a_cache_others_can_write_is_not_trusted(
    tmp_path: Path, cache: Path, validations: list[str]
) -> None:
    path = profiles(tmp_path)
    load_profile(path)
    (cache / "profiles").chmod(0o777)
    load_profile(path)
    assert len(validations) == 2


def test_a_damaged_entry_is_a_miss_and_is_replaced(
    tmp_path: Path, cache: Path, validations: list[str]
) -> None:
    path = profiles(tmp_path)
    load_profile(path)
    (entry,) = (cache / "profiles").iterdir()
    entry.write_bytes(b"not a pickle")
    load_profile(path)
    load_profile(path)
    assert len(validations) == 2


def test_an_empty_setting_turns_the_cache_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, validations: list[str]
) -> None:
    monkeypatch.setenv("TUNE_CACHE_DIR", "")
    path = profiles(tmp_path)
    load_profile(path)
    load_profile(path)
    assert len(validations) == 2
    assert profile_cache.directory() is None


def test_an_invalid_profile_is_never_kept(tmp_path: Path, cache: Path) -> None:
    path = write(tmp_path, "bad.yaml", "name: x\nsysctl:\n  vm.swappiness: [1]\n")
    for _ in range(2):
        result = run_tune("validate", path)
        assert result.code == 65
        assert "bad.yaml:3:" in result.err
    assert not (cache / "profiles").exists() or not list((cache / "profiles").iterdir())


IMPORTS_AFTER_MAIN = (
    "import sys\n"
    "from reconciler.cli.main import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit:\n"
    "    pass\n"
    "loaded = [m for m in ('pydantic', 'ruamel.yaml') if m in sys.modules]\n"
    "print('LOADED', loaded, file=sys.stderr)\n"
)


def test_a_second_audit_of_the_same_host_never_imports_pydantic(cache: Path) -> None:
    """The audit validates its fixes as profiles; the same findings reuse them."""
    argv = [sys.executable, "-c", IMPORTS_AFTER_MAIN, "audit", "--root", str(UNTUNED)]
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    runs = [subprocess.run(argv, env=env, capture_output=True, text=True) for _ in range(2)]
    first, second = (r.stderr.splitlines()[-1] for r in runs)
    assert first == "LOADED ['pydantic']"
    assert second == "LOADED []"
    assert runs[0].stdout == runs[1].stdout


def test_a_cached_plan_never_imports_yaml_or_pydantic(tmp_path: Path, cache: Path) -> None:
    """What the cache is for: the start-up cost of `tune plan` is mostly these imports."""
    argv = [
        sys.executable,
        "-c",
        IMPORTS_AFTER_MAIN,
        "plan",
        str(PROJECT / "profiles" / "blackwell-8x.yaml"),
        "--root",
        str(UNTUNED),
        "--save",
        str(tmp_path / "plan.json"),
    ]
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    runs = [subprocess.run(argv, env=env, capture_output=True, text=True) for _ in range(2)]
    first, second = (r.stderr.splitlines()[-1] for r in runs)
    assert first == "LOADED ['pydantic', 'ruamel.yaml']"
    assert second == "LOADED []"
    assert runs[0].stdout == runs[1].stdout


def test_a_stored_profile_text_is_kept_by_its_content(cache: Path, validations: list[str]) -> None:
    """`tune check` without a profile reads the one apply stored on the host, as text."""
    text = "name: stored\nsysctl:\n  vm.swappiness: 10\n"
    first = load_profile_text(text, "/var/lib/tune/profile.yaml")
    again = load_profile_text(text, "/var/lib/tune/profile.yaml")
    changed = load_profile_text(text.replace("10", "1"), "/var/lib/tune/profile.yaml")
    assert again == first
    assert changed.profile.sysctl["vm.swappiness"].value == "1"
    assert len(validations) == 2
