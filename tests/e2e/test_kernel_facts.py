"""What the real kernel, QEMU and GRUB do, measured in the guest with their own tools.

The apply e2e tests rely on each of these; if one stops holding (a QEMU that lets the guest
change MaxReadReq, a KVM guest with perf counters), the test that relies on it would prove
something else, so it is checked here first. Each test puts back what it changed. What GRUB
does (update-grub, a grub-reboot boot once, the saved default after it) is proven through tune
itself in test_reboot_phase.py, whose reboots are the slowest part of the suite.
"""

from __future__ import annotations

import pytest

from . import guest
from .vm import Vm

MRRS_4096 = "5000:7000"  # Device Control bits 14:12 = 5 (4096 bytes), the others untouched


def test_stock_qemu_keeps_max_read_request_whatever_the_guest_writes(vm: Vm) -> None:
    """The read-back mismatch case: setpci succeeds, the register does not change."""
    for vendor_device in (guest.QEMU_NVME, guest.E1000E):
        (address,) = guest.pci_functions(vm, vendor_device)
        before = guest.device_control(vm, address)
        assert (before >> 12) & 0x7 != 5, "already 4096: the write would prove nothing"
        mrrs_before = guest.max_read_request(vm, address)

        written = vm.run("setpci", "-s", address, f"CAP_EXP+8.w={MRRS_4096}", check=False)

        assert written.returncode == 0, written.stderr
        assert guest.device_control(vm, address) == before
        assert guest.max_read_request(vm, address) == mrrs_before


def test_nmi_watchdog_rejects_writes_with_errno_524_under_tcg(vm: Vm) -> None:
    """No perf counters under TCG: the kernel answers every write with ENOTSUPP (524)."""
    if vm.accel.name != "tcg":
        pytest.skip(f"errno 524 is what TCG gives; this VM runs under {vm.accel.name}")
    before = guest.sysctl(vm, "kernel.nmi_watchdog")
    for value in ("0", "1"):
        by_sysctl = vm.run("sysctl", "-w", f"kernel.nmi_watchdog={value}", check=False)
        assert by_sysctl.returncode != 0
        assert "Unknown error 524" in by_sysctl.stderr, by_sysctl.stderr
        # tee reports the errno as the kernel gave it (dash's `echo >` says only "I/O error").
        by_write = vm.sh(f"echo {value} | tee /proc/sys/kernel/nmi_watchdog", check=False)
        assert by_write.returncode != 0
        assert "Unknown error 524" in by_write.stderr, by_write.stderr
    assert guest.sysctl(vm, "kernel.nmi_watchdog") == before


def test_modprobe_loads_a_module_of_the_guest_kernel(vm: Vm) -> None:
    assert "dummy" not in guest.loaded_modules(vm)
    vm.run("modprobe", "dummy")
    try:
        assert "dummy" in guest.loaded_modules(vm)
        assert "dummy" in vm.run("cat", "/proc/modules").stdout.split()
        assert vm.run("test", "-d", "/sys/module/dummy", check=False).returncode == 0
    finally:
        vm.run("modprobe", "-r", "dummy")
    assert "dummy" not in guest.loaded_modules(vm)
