"""The generated methods of tune's dataclasses, compiled once and kept (`core.generated`): a
second process reads them instead of compiling; its classes are the same; a cache that is
missing, damaged, off or writable by others is compiled anew and never an error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import PROJECT

# What a fresh process made of its classes, and how: JSON on stdout.
PROBE = """
import dataclasses, json
import reconciler.cli.main
from reconciler.core import generated
from reconciler.core.changes import Change, Phase, Priority

@dataclasses.dataclass(frozen=True)
class Local:
    a: int
    b: str = "x"

change = Change(kind="sysctl", target="vm.swappiness", current="60", desired="10",
                phase=Phase.RUNTIME, priority=Priority.P1, reason="why")
same = dataclasses.replace(change)
try:
    Local(1).a = 2
    frozen = False
except dataclasses.FrozenInstanceError:
    frozen = True
print(json.dumps({
    "read": generated.KEPT.read,
    "compiled": generated.KEPT.compiled,
    "equal": same == change and hash(same) == hash(change),
    "repr": repr(Local(1)),
    "frozen": frozen,
}))
"""


def made(cache: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "TUNE_CACHE_DIR": cache}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert done.stderr == ""
    found = json.loads(done.stdout)
    assert found["equal"] and found["frozen"] and found["repr"] == "Local(a=1, b='x')"
    return found


def kept_files(cache: Path) -> list[Path]:
    return sorted((cache / "code").glob("*.bin")) if (cache / "code").exists() else []


def test_a_second_process_reads_what_the_first_compiled(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    first = made(str(cache))
    assert first["read"] == 0 and first["compiled"]
    (kept,) = kept_files(cache)
    assert kept.stat().st_mode & 0o777 == 0o600
    second = made(str(cache))
    assert second["read"] == first["compiled"] and second["compiled"] == 0


def test_the_cache_directory_is_never_made_for_it(tmp_path: Path) -> None:
    cache = tmp_path / "none-yet"
    assert made(str(cache))["compiled"]
    assert not cache.exists()


def test_a_cache_turned_off_compiles_every_time(tmp_path: Path) -> None:
    assert made("")["compiled"] and made("")["read"] == 0


def test_a_damaged_file_is_compiled_anew(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    made(str(cache))
    (kept,) = kept_files(cache)
    kept.write_bytes(kept.read_bytes()[:1000])
    again = made(str(cache))
    assert again["read"] == 0 and again["compiled"]
    assert made(str(cache))["compiled"] == 0  # and kept again


def test_code_others_can_write_is_never_read(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    made(str(cache))
    (kept,) = kept_files(cache)
    kept.chmod(0o666)
    assert made(str(cache))["read"] == 0
    kept.chmod(0o600)
    (cache / "code").chmod(0o777)
    assert made(str(cache))["read"] == 0
