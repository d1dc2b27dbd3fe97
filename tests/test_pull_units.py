"""The pull-mode systemd units: valid units (systemd-analyze verify is the oracle), timers that
spread a fleet, and Exec lines that are tune commands this tune runs, with the options they
name, once the environment file's values are in place."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PROJECT, run_tune, write
from small_host import SmallHost, build

from reconciler.cli.installed import tune_command
from reconciler.core.errors import ExitCode

UNITS = PROJECT / "reconciler/examples/systemd"
SERVICES = ("tune-pull.service", "tune-pull-apply.service")
TIMERS = {
    "tune-pull.timer": "tune-pull.service",
    "tune-pull-apply.timer": "tune-pull-apply.service",
}
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter/"
EXEC = re.compile(r"^(ExecStart|ExecStopPost)=-?(.*)$", re.MULTILINE)


def environment() -> dict[str, str]:
    """tune-pull.env as systemd reads it: KEY=VALUE lines, comments and blank lines skipped."""
    lines = (UNITS / "tune-pull.env").read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if line.strip() and not line.startswith("#")]
    return {key: value for key, value in pairs}


def commands(service: str, env: dict[str, str]) -> list[list[str]]:
    """Each Exec line's argv, `${KEY}` replaced as systemd replaces it: by one word."""
    found = []
    for _, line in EXEC.findall((UNITS / service).read_text()):
        words = shlex.split(line)
        found.append([re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], w) for w in words])
    return found


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_analyze_verifies_every_unit(tmp_path: Path) -> None:
    # The units as `tune examples systemd` prints them, beside the environment file they name.
    env_file = write(tmp_path, "/pull.env", (UNITS / "tune-pull.env").read_text())
    names = [*SERVICES, *TIMERS]
    for name in names:
        text = run_tune("examples", "systemd", name).out
        (tmp_path / name).write_text(text.replace("/etc/tune/pull.env", str(env_file)))
    done = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / n) for n in names)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_the_timers_spread_a_fleet_and_catch_up_after_a_boot() -> None:
    for timer, service in TIMERS.items():
        lines = (UNITS / timer).read_text().splitlines()
        assert "Persistent=true" in lines
        assert any(line.startswith("OnCalendar=") for line in lines)
        assert any(line.startswith("RandomizedDelaySec=") for line in lines)
        assert f"Unit={service}" in lines and (UNITS / service).is_file()


def test_examples_prints_the_pull_units_with_this_tune() -> None:
    listed = run_tune("examples").out
    assert all(name in listed for name in (*SERVICES, *TIMERS, "tune-pull.env"))
    for service in SERVICES:
        printed = run_tune("examples", "systemd", service).out
        execs = EXEC.findall(printed)
        assert execs and all(line.startswith(f"{tune_command()} ") for _, line in execs)


@pytest.fixture
def released(tmp_path: Path) -> dict[str, str]:
    """tune-pull.env's values for a profile released at a file:// URL."""
    parent = write(tmp_path, "/srv/tune/base.yaml", "name: base\nsysctl:\n  vm.swappiness: 10\n")
    profile = write(tmp_path, "/srv/tune/gpu.yaml", "name: gpu\nextends: base.yaml\n")
    digest = run_tune("validate", profile).out.rsplit("; ", 1)[1].strip()
    assert parent.is_file() and digest.startswith("sha256:")
    env = environment()
    assert set(env) == {"PROFILE_URL", "PROFILE_DIGEST"}
    return {"PROFILE_URL": profile.as_uri(), "PROFILE_DIGEST": digest}


def run_unit_command(argv: list[str], root: Path, metrics: Path) -> int:
    assert Path(argv[0]).name == "tune"
    args = [a.replace(TEXTFILE_DIR, f"{metrics}/") for a in argv[1:]]
    return run_tune(*args, "--root", root).code


def test_the_apply_unit_applies_then_its_check_finds_the_host_in_sync(
    tmp_path: Path, released: dict[str, str]
) -> None:
    root = build(tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60"}))
    (check,) = commands("tune-pull.service", released)
    apply, after = commands("tune-pull-apply.service", released)
    assert after == check  # the apply unit reports as the check unit does
    assert run_unit_command(check, root, tmp_path) == ExitCode.CHANGES  # not applied yet
    assert run_unit_command(apply, root, tmp_path) == ExitCode.IN_SYNC
    assert (root / "proc/sys/vm/swappiness").read_text() == "10\n"
    assert run_unit_command(after, root, tmp_path) == ExitCode.IN_SYNC
    metrics = (tmp_path / "tune.prom").read_text()
    assert re.search(r"^tune_check_success(\{[^}]*\})? 1$", metrics, re.MULTILINE), metrics


def test_the_units_refuse_a_profile_that_is_not_the_one_released(
    tmp_path: Path, released: dict[str, str]
) -> None:
    root = build(tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60"}))
    shipped = {**released, "PROFILE_DIGEST": environment()["PROFILE_DIGEST"]}
    for service in SERVICES:
        for argv in commands(service, shipped):
            assert run_unit_command(argv, root, tmp_path) == ExitCode.INVALID_PROFILE
    assert (root / "proc/sys/vm/swappiness").read_text() == "60\n"
