"""`tune ... -H tune-e2e` against the guest, and what tune itself says back (history, plan)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import Result, run_tune

from . import guest
from .vm import HOST_NAME, Vm

STATE = "/var/lib/tune"


def tune(vm: Vm, *args: str | Path) -> Result:
    """`tune ARGS -H tune-e2e` with the VM's ssh config (host-key checking on)."""
    return run_tune(*args, "-H", HOST_NAME, "--ssh-config", vm.ssh_config)


def apply(vm: Vm, profile: Path) -> Result:
    return tune(vm, "apply", profile, "--runtime-only", "--yes")


def plan_json(vm: Vm, profile: Path) -> dict[str, Any]:
    result = tune(vm, "plan", profile, "--format", "json")
    assert result.code in (0, 2), result.err
    plan: dict[str, Any] = json.loads(result.out)
    return plan


def history(vm: Vm) -> list[dict[str, Any]]:
    result = tune(vm, "history", "--format", "json")
    assert result.code == 0, result.err
    rows: list[dict[str, Any]] = json.loads(result.out)["runs"]
    return rows


def write_profile(tmp_path: Path, text: str, name: str = "e2e.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def nvme_select() -> str:
    return f"{{vendor: 0x{guest.QEMU_NVME[:4]}, device: 0x{guest.QEMU_NVME[5:]}}}"
