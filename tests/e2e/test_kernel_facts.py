"""What the real kernel, QEMU and GRUB do, measured in the guest with their own tools.

The apply and reboot-phase e2e tests rely on each of these; if one stops holding (a QEMU that
lets the guest change MaxReadReq, a KVM guest with perf counters), the test that relies on it
would prove something else, so it is checked here first. Each test puts back what it changed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import guest
from .vm import Vm

MRRS_4096 = "5000:7000"  # Device Control bits 14:12 = 5 (4096 bytes), the others untouched
TRIAL_ENTRY = "/etc/grub.d/42_tune_e2e_trial"
CMDLINE_DROP_IN = "/etc/default/grub.d/90-tune-e2e.cfg"
SAVED_DROP_IN = "/etc/default/grub.d/91-tune-e2e-saved.cfg"
GRUB_CFG = "/boot/grub/grub.cfg"


@pytest.fixture
def grub_config(vm: Vm) -> Iterator[None]:
    """Puts the boot configuration back as it was: grub.cfg byte for byte (cheaper than
    another update-grub under TCG), grubenv without the test's entries."""
    vm.run("cp", "-p", GRUB_CFG, GRUB_CFG + ".e2e")
    yield
    vm.run("rm", "-f", CMDLINE_DROP_IN, SAVED_DROP_IN, TRIAL_ENTRY)
    vm.run("mv", GRUB_CFG + ".e2e", GRUB_CFG)
    vm.run("grub-editenv", "/boot/grub/grubenv", "unset", "saved_entry", "next_entry")


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


@pytest.mark.usefixtures("grub_config")
def test_update_grub_and_reboot_boot_the_new_default_parameters(vm: Vm) -> None:
    """A grub.d drop-in that appends to GRUB_CMDLINE_LINUX_DEFAULT, update-grub, reboot."""
    before = vm.boot_id()
    guest.write_file(
        vm,
        CMDLINE_DROP_IN,
        'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT processor.max_cstate=1"\n',
    )
    vm.run("update-grub")
    assert "processor.max_cstate=1" in vm.run("cat", GRUB_CFG).stdout

    vm.reboot()

    assert vm.boot_id() != before
    assert guest.running_cmdline(vm).get("processor.max_cstate") == "1"


@pytest.mark.usefixtures("grub_config")
def test_grub_reboot_boots_an_entry_once_with_grub_default_saved(vm: Vm) -> None:
    """Try-once boot: `grub-reboot ENTRY` boots ENTRY at the next boot only, and GRUB itself
    clears the request while booting it, so the boot after goes back to the saved default.
    What a safe reboot phase relies on."""
    release = vm.run("uname", "-r").stdout.strip()
    # One menu entry with an extra parameter, the way /etc/grub.d/40_custom adds entries.
    entry = (
        "#!/bin/sh\ncat <<'EOF'\n"
        "menuentry 'tune-e2e-trial' --id tune-e2e-trial {\n"
        "\tinsmod part_msdos\n\tinsmod ext2\n\tset root='hd0,msdos1'\n"
        f"\tlinux /boot/vmlinuz-{release} root=LABEL=rootfs ro console=ttyS0 tune_e2e.trial=1\n"
        f"\tinitrd /boot/initrd.img-{release}\n"
        "}\nEOF\n"
    )
    guest.write_file(vm, TRIAL_ENTRY, entry, mode="755")
    guest.write_file(vm, SAVED_DROP_IN, "GRUB_DEFAULT=saved\n")
    vm.run("update-grub")
    vm.run("grub-set-default", "0")
    vm.run("grub-reboot", "tune-e2e-trial")
    assert grubenv(vm) == {"saved_entry": "0", "next_entry": "tune-e2e-trial"}

    vm.reboot()

    assert guest.running_cmdline(vm).get("tune_e2e.trial") == "1"
    # GRUB cleared next_entry while booting it: the next boot is the saved default again.
    assert grubenv(vm).get("next_entry", "") == ""
    assert grubenv(vm)["saved_entry"] == "0"


def grubenv(vm: Vm) -> dict[str, str]:
    lines = vm.run("grub-editenv", "list").stdout.splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)
