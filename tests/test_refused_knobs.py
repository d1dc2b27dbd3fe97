"""Knobs the kernel refuses (EINVAL, EOPNOTSUPP, ENOTSUPP on write) and `optional: true`.

A snapshot attribute refuses writes when `/.tune-emulate/refuses/<its path>` holds an errno, as
`kernel.nmi_watchdog` does with 524 on a kernel without perf counters. Every case runs locally
(`--root`) and, where sshd is available, over SSH against the same snapshot: the sh library
must tell a refused write from any other failure the same way the Python engine does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Result, run_tune, write
from small_host import SmallHost, build, write_profile
from ssh_fixture import StartLab, sshd_available

from reconciler.hosts.emulate import REFUSES

NMI = "/proc/sys/kernel/nmi_watchdog"
SKIPPED = "sysctl:kernel.nmi_watchdog is not supported on this host, skipped (optional): "
REFUSAL_524 = f"{NMI}: the kernel refused '1' (Unknown error 524)."

Tune = Callable[..., Result]


def host(tmp_path: Path, errno: int | None = 524) -> Path:
    root = build(
        tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60", "kernel.nmi_watchdog": "0"})
    )
    if errno is not None:
        write(root, REFUSES + NMI, f"{errno}\n")
    return root


def profile(tmp_path: Path, optional: bool | None) -> Path:
    nmi: dict[str, Any] = {"value": 1}
    if optional is not None:
        nmi["optional"] = optional
    return write_profile(
        tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10, "kernel.nmi_watchdog": nmi}}
    )


@pytest.fixture(params=["local", "ssh"])
def on(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Path], Tune]:
    """`on(root)` is `tune ARGS` against that snapshot: `--root`, or `-H h1` through sshd."""

    def local(root: Path) -> Tune:
        return lambda *args: run_tune(*args, "--root", root)

    def ssh(root: Path) -> Tune:
        if not sshd_available():
            pytest.skip("needs root and openssh-server (.ci/run installs it)")
        start_lab: StartLab = request.getfixturevalue("start_lab")
        lab = start_lab({"h1": root})
        return lambda *args: run_tune(*args, "-H", "h1", "--ssh-config", lab.config)

    return local if request.param == "local" else ssh


def journal(root: Path) -> list[dict[str, Any]]:
    (path,) = (root / "var/lib/tune/runs").glob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def sysctl(root: Path, name: str) -> str:
    return (root / "proc/sys" / name.replace(".", "/")).read_text().strip()


def test_optional_knob_the_kernel_refuses_is_skipped_and_the_rest_applies(
    tmp_path: Path, on: Callable[[Path], Tune]
) -> None:
    root = host(tmp_path)
    tune = on(root)

    result = tune("apply", "--runtime-only", "-y", profile(tmp_path, optional=True))

    assert result.code == 0, result.err
    assert SKIPPED + REFUSAL_524 in result.out.splitlines()
    assert "Applied 2 changes" in result.out  # swappiness and sysctl.d; not the refused knob
    assert sysctl(root, "vm.swappiness") == "10"
    assert sysctl(root, "kernel.nmi_watchdog") == "0"
    records = journal(root)
    steps = {r["seq"]: r for r in records if r["type"] == "step"}
    (skipped,) = [r for r in records if r["type"] == "unsupported"]
    assert steps[skipped["seq"]]["id"] == "sysctl:kernel.nmi_watchdog"
    assert steps[skipped["seq"]]["optional"] is True
    assert skipped["error"] == REFUSAL_524
    assert records[-1]["outcome"] == "applied"

    check = tune("check", profile(tmp_path, optional=True))
    assert check.code == 0, check.out + check.err
    assert "not supported on this host" in check.out
    plan = json.loads(tune("plan", profile(tmp_path, optional=True), "--format", "json").out)
    (note,) = [n for n in plan["notes"] if n["about"] == "sysctl:kernel.nmi_watchdog"]
    assert SKIPPED + REFUSAL_524 in note["message"]


@pytest.mark.parametrize("optional", [None, False])
def test_required_knob_the_kernel_refuses_rolls_the_run_back(
    tmp_path: Path, on: Callable[[Path], Tune], optional: bool | None
) -> None:
    root = host(tmp_path)

    result = on(root)("apply", "--runtime-only", "-y", profile(tmp_path, optional))

    assert result.code == 3, result.out
    assert (
        "sysctl:kernel.nmi_watchdog is not supported on this host: "
        f"{REFUSAL_524.rstrip('.')}; mark the entry `optional: true`"
    ) in result.err
    assert "rolled back 2 writes" in result.err
    assert sysctl(root, "vm.swappiness") == "60"
    assert journal(root)[-1]["outcome"] == "rolled-back"


@pytest.mark.parametrize(
    ("errno", "said"), [(95, "Operation not supported"), (22, "Invalid argument")]
)
def test_eopnotsupp_and_einval_are_refusals_too(
    tmp_path: Path, on: Callable[[Path], Tune], errno: int, said: str
) -> None:
    root = host(tmp_path, errno)

    result = on(root)("apply", "--runtime-only", "-y", profile(tmp_path, optional=True))

    assert result.code == 0, result.err
    assert SKIPPED + f"{NMI}: the kernel refused '1' ({said})." in result.out


def test_a_write_that_fails_otherwise_fails_the_run_even_when_optional(
    tmp_path: Path, on: Callable[[Path], Tune]
) -> None:
    """EIO is a broken device or driver, not a knob this kernel lacks: never skipped."""
    root = host(tmp_path, errno=5)

    result = on(root)("apply", "--runtime-only", "-y", profile(tmp_path, optional=True))

    assert result.code == 3, result.out
    assert "Input/output error" in result.err or "refused" in result.err
    assert "not supported" not in result.err
    assert sysctl(root, "vm.swappiness") == "60"


def test_optional_is_a_long_form_field_of_every_entry_in_the_schema() -> None:
    defs = json.loads(run_tune("schema").out)["$defs"]
    entries = [name for name, d in defs.items() if "priority" in d.get("properties", {})]
    assert entries
    for name in entries:
        assert defs[name]["properties"]["optional"]["type"] == "boolean", name
