"""Shared fixtures: example hosts as writable snapshot copies, and `tune` run in-process."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from reconciler.cli import main

# CI runs on 2 shared cores: judge properties by their examples, never by wall-clock deadlines.
settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("ci")

PROJECT = Path(__file__).resolve().parent.parent
PROFILES = PROJECT / "profiles"
HOSTS = PROJECT / "examples" / "hosts"
BLACKWELL = PROFILES / "blackwell-8x.yaml"
UNTUNED = HOSTS / "rtx6000bw-untuned"
TUNED = HOSTS / "rtx6000bw-tuned"


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_tune(*args: str | Path) -> Result:
    """Run the real CLI entry point (exit-code mapping included) and capture its output."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return Result(code, out.getvalue(), err.getvalue())


def copy_host(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


@pytest.fixture
def untuned(tmp_path: Path) -> Path:
    """A writable copy of the untuned example host."""
    return copy_host(UNTUNED, tmp_path / "untuned")


@pytest.fixture
def tuned(tmp_path: Path) -> Path:
    """A writable copy of the tuned example host."""
    return copy_host(TUNED, tmp_path / "tuned")


def write(root: Path, path: str, content: str | bytes) -> Path:
    """Write a file inside a snapshot root (`path` is absolute on the host)."""
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)
    return target


def profile(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    target = tmp_path / name
    target.write_text(text)
    return target


def plan_json(tmp_path: Path, root: Path, text: str) -> dict[str, Any]:
    """`tune plan --format json` of the profile `text` against the snapshot `root`, with its exit
    code under "code"; a plan never writes to stderr."""
    result = run_tune("plan", profile(tmp_path, text), "--root", root, "--format", "json")
    assert result.err == "", result.err
    return {"code": result.code, **json.loads(result.out)}


def by_id(plan: dict[str, Any], section: str = "changes") -> dict[str, dict[str, Any]]:
    return {item["id"]: item for item in plan[section]}


def notes(plan: dict[str, Any]) -> list[str]:
    return [note["message"] for note in plan["notes"]]
