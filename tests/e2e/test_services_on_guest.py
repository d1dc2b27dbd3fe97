"""The services kind on a real systemd: a drop-in for systemd-journald (a real unit of the
guest, one process, safe to restart) applied over SSH, what `systemctl show` then says, the
restart `--restart-services` makes (the new main process's /proc/PID/limits), and the rollback.

The test leaves the guest as it found it but for journald's new process: the rollback removes
the drop-in and reloads, and restarts journald once more so it runs with its own limits again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .over_ssh import plan_json, tune, write_profile
from .vm import Vm

UNIT = "systemd-journald.service"
DROP_IN = f"/etc/systemd/system/{UNIT}.d/90-tune.conf"
MEMLOCK = "Max locked memory"


def shown(vm: Vm, prop: str) -> str:
    return vm.run("systemctl", "show", UNIT, "-p", prop, "--value").stdout.strip()


def main_limit(vm: Vm) -> list[str]:
    """Soft and hard locked-memory limits of the unit's main process, as the kernel says."""
    pid = shown(vm, "MainPID")
    text = vm.run("cat", f"/proc/{pid}/limits").stdout
    (row,) = [line for line in text.splitlines() if line.startswith(MEMLOCK)]
    return row[len(MEMLOCK) :].split()[:2]


@pytest.mark.usefixtures("clean_state")
def test_drop_in_restart_and_rollback_on_a_real_systemd(vm: Vm, tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path,
        f"name: e2e-services\nservices:\n  {UNIT}:\n    limits: {{LimitMEMLOCK: 128M}}\n",
    )
    before_pid, before_limit = shown(vm, "MainPID"), main_limit(vm)
    before_show = shown(vm, "LimitMEMLOCK")
    assert before_show != "134217728"
    planned = plan_json(vm, profile)
    assert [c["id"] for c in planned["changes"]] == [f"service:{UNIT}:LimitMEMLOCK"]
    try:
        applied = tune(vm, "apply", profile, "--runtime-only", "--yes", "--no-persist")
        assert applied.code == 0, applied.out + applied.err
        # systemd took the drop-in (daemon-reload), the running journald did not.
        assert shown(vm, "LimitMEMLOCK") == "134217728"
        assert shown(vm, "MainPID") == before_pid
        after = plan_json(vm, profile)
        assert after["changes"] == []
        assert [p["id"] for p in after["pending"]] == [f"service:{UNIT}:LimitMEMLOCK"]
        assert tune(vm, "check", profile).code == 0

        restarted = tune(
            vm, "apply", profile, "--runtime-only", "--yes", "--no-persist", "--restart-services"
        )
        assert restarted.code == 0, restarted.out + restarted.err
        assert f"ok  {UNIT} restarted with its configured limits" in restarted.out
        assert shown(vm, "MainPID") != before_pid
        assert main_limit(vm) == ["134217728", "134217728"]
        assert plan_json(vm, profile)["pending"] == []
    finally:
        rolled = tune(vm, "rollback", "--yes")
        assert rolled.code == 0, rolled.out + rolled.err
        vm.run("systemctl", "restart", UNIT)
    assert vm.run("test", "-e", DROP_IN, check=False).returncode == 1
    assert shown(vm, "LimitMEMLOCK") == before_show
    assert main_limit(vm) == before_limit
