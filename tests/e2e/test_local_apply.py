"""One executor for every live kernel: `tune apply` run on the guest itself (this machine, for
it) and `tune apply -H` pushed from the controller run the same sh scripts, so on the same
kernel they journal the same records, but for what names the run (its id, times, the script's
pid, the host's name).

With `TUNE_E2E_BASE=COMMIT` the test also installs that commit's tune in the guest and times
its local apply against this checkout's, on the guest's real kernel (under TCG: the ratio is
what tells, not the seconds); the times are printed (`pytest -s`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from . import guest, guest_tune
from .over_ssh import STATE, apply, tune, write_profile
from .vm import HOST_NAME, Vm

RUNS = f"{STATE}/runs"
PROFILE = "/tmp/tune-e2e-local.yaml"
SYSCTLS = {"vm.swappiness": "10", "vm.dirty_background_ratio": "7", "vm.vfs_cache_pressure": "77"}
TEXT = "name: local-e2e\nsysctl:\n" + "".join(f"  {k}: {v}\n" for k, v in SYSCTLS.items())
BASE_VENV = "/opt/tune-base"
# What names a run rather than what it did: its id and times, and the host as each side names
# it (the guest's own name locally, the -H name pushed).
NAMING = frozenset({"run_id", "started", "finished", "time", "pid"})
REPEAT = 3


def journals(vm: Vm) -> set[str]:
    done = vm.sh(f"ls {RUNS}/*.jsonl 2>/dev/null || :")
    return set(done.stdout.split())


def new_journal(vm: Vm, before: set[str]) -> list[dict[str, Any]]:
    (path,) = journals(vm) - before
    return [json.loads(line) for line in vm.run("cat", path).stdout.splitlines()]


def local_apply(vm: Vm, tune_path: str) -> float:
    """`tune apply` run in the guest, as its operator runs it; seconds it took there."""
    command = shlex.join([tune_path, "apply", PROFILE, "--runtime-only", "--yes"])
    done = vm.sh(
        f's=$(date +%s.%N); {command} >&2 || exit; e=$(date +%s.%N); echo "$s $e"', timeout=600
    )
    start, end = map(float, done.stdout.split())
    return end - start


def local_rollback(vm: Vm, tune_path: str) -> None:
    vm.run(tune_path, "rollback", "--yes", timeout=600)


def values(vm: Vm) -> dict[str, str]:
    return {k: vm.run("sysctl", "-n", k).stdout.strip() for k in SYSCTLS}


def comparable(records: list[dict[str, Any]], names: tuple[str, ...]) -> list[Any]:
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in NAMING}
        if isinstance(value, list):
            return [strip(v) for v in value]
        if isinstance(value, str):
            for name in names:
                value = re.sub(rf"\b{re.escape(name)}\b", "HOST", value)
        return value

    return [strip(r) for r in records]


@pytest.mark.usefixtures("clean_state")
def test_a_local_and_a_pushed_apply_journal_the_same_records(
    vm: Vm, guest_tune_path: str, tmp_path: Path
) -> None:
    guest.write_file(vm, PROFILE, TEXT)
    profile = write_profile(tmp_path, TEXT)
    before = values(vm)
    assert before != SYSCTLS, "the guest's defaults are not the profile's"
    guest_name = vm.run("uname", "-n").stdout.strip()

    seen = journals(vm)
    seconds = local_apply(vm, guest_tune_path)
    local = new_journal(vm, seen)
    assert values(vm) == SYSCTLS
    local_rollback(vm, guest_tune_path)
    assert values(vm) == before

    seen = journals(vm)
    result = apply(vm, profile)
    assert result.code == 0, result.err
    pushed = new_journal(vm, seen)
    assert values(vm) == SYSCTLS
    assert tune(vm, "rollback", "--yes").code == 0
    assert values(vm) == before

    names = (guest_name, HOST_NAME)
    assert [r["type"] for r in local] == [r["type"] for r in pushed]
    assert comparable(local, names) == comparable(pushed, names)
    assert sum(r["type"] == "verified" for r in local) >= len(SYSCTLS)
    base = os.environ.get("TUNE_E2E_BASE")
    if base:
        # Timings only against a base, where their ratio means something: under TCG, in a
        # loaded suite, the seconds alone say nothing and cost two applies and rollbacks.
        times = [seconds] + [timed(vm, guest_tune_path) for _ in range(REPEAT - 1)]
        print(f"\nlocal apply, this checkout: {', '.join(f'{t:.2f}' for t in times)} s")
        base_times = timed_base(vm, base, tmp_path)
        print(f"local apply, {base}: {', '.join(f'{t:.2f}' for t in base_times)} s")
        print(f"ratio (this checkout / base, medians): {median(times) / median(base_times):.2f}")


def timed(vm: Vm, tune_path: str) -> float:
    seconds = local_apply(vm, tune_path)
    local_rollback(vm, tune_path)
    return seconds


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def timed_base(vm: Vm, commit: str, tmp_path: Path) -> list[float]:
    """The local apply of tune at `commit`, installed beside this checkout's."""
    tree = tmp_path / "base"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(guest_tune.PROJECT), "archive", commit],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    path = guest_tune.install(vm, tmp_path / "base-install", tree, BASE_VENV)
    try:
        return [timed(vm, path) for _ in range(REPEAT)]
    finally:
        guest_tune.uninstall(vm, BASE_VENV)
