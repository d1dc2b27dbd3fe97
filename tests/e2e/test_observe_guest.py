"""`tune plan` of the guest's real files agrees with what the guest's own tools say.

tune's SSH host is not there yet, so the guest's files are copied into a snapshot directory
(what `tune snapshot` would capture) and planned with `--root`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tune

from reconciler.plan.observe import request
from reconciler.profile.load import load_profile

from . import guest
from .vm import Vm

# Desired values differ from Debian's defaults, so that most entries show up as changes; the
# assertions below hold either way.
PROFILE = f"""\
name: e2e-observe
sysctl:
  kernel.numa_balancing: 0
  vm.swappiness: 10
  vm.max_map_count: 1048576
  net.ipv4.tcp_rmem: "4096 87380 268435456"
modules:
  dummy: loaded
  e1000e: absent
pci:
  - select: {{vendor: 0x{guest.QEMU_NVME[:4]}, device: 0x{guest.QEMU_NVME[5:]}}}
    max_read_request: 4096
  - select: {{vendor: 0x{guest.E1000E[:4]}, device: 0x{guest.E1000E[5:]}}}
    max_read_request: 4096
cmdline:
  set: {{console: ttyS1, processor.max_cstate: 1, tune_e2e.pending: 1}}
"""
DROP_IN = "/etc/default/grub.d/90-tune-e2e-observe.cfg"


def plan_of(vm: Vm, tmp_path: Path) -> dict[str, Any]:
    profile = tmp_path / "observe.yaml"
    profile.write_text(PROFILE)
    snapshot = guest.copy_files(vm, request(load_profile(profile).profile), tmp_path / "guest")
    result = run_tune("plan", profile, "--root", snapshot, "--format", "json")
    assert result.code in (0, 2), result.err
    plan: dict[str, Any] = json.loads(result.out)
    return plan


def assert_observed(plan: dict[str, Any], change_id: str, truth: Any, desired: Any) -> None:
    """The plan's `current` is the guest's truth: a change when that differs from `desired`,
    no change when it does not."""
    changes = {c["id"]: c for c in plan["changes"]}
    if truth == desired:
        assert change_id not in changes, changes[change_id]
    else:
        assert change_id in changes, f"{change_id} missing; guest says {truth!r}"
        assert (changes[change_id]["current"], changes[change_id]["desired"]) == (truth, desired)


def test_plan_of_guest_files_matches_the_guests_own_tools(vm: Vm, tmp_path: Path) -> None:
    plan = plan_of(vm, tmp_path)

    assert plan["host"]["name"] == "tune-e2e"
    assert plan["host"]["kernel"] == vm.run("uname", "-r").stdout.strip()
    assert plan["host"]["boot_id"] == vm.boot_id()

    for key, desired in [
        ("kernel.numa_balancing", "0"),
        ("vm.swappiness", "10"),
        ("vm.max_map_count", "1048576"),
        ("net.ipv4.tcp_rmem", "4096 87380 268435456"),
    ]:
        assert_observed(plan, f"sysctl:{key}", guest.sysctl(vm, key), desired)

    loaded = guest.loaded_modules(vm)
    assert "e1000e" in loaded  # udev loaded the emulated NIC's driver
    for module, desired in [("dummy", "loaded"), ("e1000e", "absent")]:
        truth = "loaded" if module in loaded else "absent"
        assert_observed(plan, f"module:{module}", truth, desired)

    addresses = guest.pci_functions(vm, guest.QEMU_NVME) + guest.pci_functions(vm, guest.E1000E)
    assert len(addresses) == 2
    for address in addresses:
        truth = str(guest.max_read_request(vm, address))
        assert_observed(plan, f"pci:{address}:max_read_request", truth, "4096")

    running, configured = guest.running_cmdline(vm), guest.configured_cmdline(vm)
    assert running.get("console") == configured.get("console") == "ttyS0"
    # The kernel keeps every console= (the last is /dev/console): `console: ttyS1` means "among
    # them", so the plan adds one occurrence to the guest's and keeps it.
    assert_observed(plan, "cmdline:console", ["ttyS0"], ["ttyS0", "ttyS1"])
    for name, desired in [
        ("processor.max_cstate", "1"),
        ("tune_e2e.pending", "1"),
    ]:
        assert_cmdline(plan, name, desired, running.get(name), configured.get(name))


def assert_cmdline(
    plan: dict[str, Any], name: str, desired: str, running: str | None, configured: str | None
) -> None:
    """A parameter compares by what the next boot passes (the guest's GRUB configuration); one
    configured as desired but not in /proc/cmdline yet is pending a reboot."""
    pending = {p["id"]: p for p in plan["pending"]}
    if configured == desired and running != desired:
        assert pending[f"cmdline:{name}"]["running"] == running
        assert f"cmdline:{name}" not in {c["id"] for c in plan["changes"]}
    else:
        assert f"cmdline:{name}" not in pending
        assert_observed(plan, f"cmdline:{name}", configured, desired)


def test_parameter_configured_but_not_booted_is_pending(vm: Vm, tmp_path: Path) -> None:
    """A GRUB drop-in the running kernel has not booted with: /proc/cmdline still lacks it."""
    guest.write_file(
        vm,
        DROP_IN,
        'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT tune_e2e.pending=1"\n',
    )
    try:
        assert guest.configured_cmdline(vm).get("tune_e2e.pending") == "1"
        assert "tune_e2e.pending" not in guest.running_cmdline(vm)
        plan = plan_of(vm, tmp_path)
    finally:
        vm.run("rm", "-f", DROP_IN)
    pending = {p["id"]: p for p in plan["pending"]}
    found = pending["cmdline:tune_e2e.pending"]
    assert {k: found[k] for k in ("id", "running", "configured", "action", "until")} == {
        "id": "cmdline:tune_e2e.pending",
        "running": None,
        "configured": "1",
        "action": "reboot to apply",
        "until": "next boot",
    }
    assert "cmdline:tune_e2e.pending" not in {c["id"] for c in plan["changes"]}


@pytest.mark.parametrize(
    "path", ["/proc/sys/vm/swappiness", "/sys/kernel/mm/transparent_hugepage/enabled"]
)
def test_tar_of_proc_and_sys_gets_sizes_wrong_so_files_are_copied_with_cat(
    vm: Vm, path: str
) -> None:
    """procfs files report size 0 (tar stores them empty), sysfs attributes 4096 (tar pads them
    with zeros): a remote observation cannot tar /proc or /sys directly. This documents why
    `guest.copy_files` copies with `cat` first."""
    content = vm.run("cat", path).stdout
    listing = vm.sh(f"tar -C / -cf - {path.lstrip('/')} 2>/dev/null | tar -tvf -").stdout
    stored = int(listing.split()[2])
    assert content != ""
    assert stored != len(content.encode())
    assert stored in (0, 4096)
