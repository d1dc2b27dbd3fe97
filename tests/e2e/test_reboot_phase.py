"""`tune apply --reboot-phase --reboot -H` against the guest's real GRUB and a real reboot.

The guest is switched to `GRUB_DEFAULT=saved` here, so tune boots the new command line once
through its `/etc/grub.d/42_tune_try` entry and `grub-reboot`, waits for the new boot id over
SSH, verifies `/proc/cmdline` and only then makes the line the default (drop-in + update-grub).
Three reboots in all: one verified boot, one try-once boot whose parameter the harness strips
(rolled back, exit 3), and one plain boot that must come up with the old line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Result, run_tune

from .vm import HOST_NAME, Vm

PROFILE = "name: e2e-boot\ncmdline:\n  set:\n    processor.max_cstate: {value}\n"
# update-grub itself, wrapped so that the boot menu it writes lacks one parameter: a boot
# loader that drops what tune configured.
STRIP = """\
#!/bin/sh
/usr/sbin/update-grub.real "$@" || exit
sed -i 's/ processor.max_cstate=2//' /boot/grub/grub.cfg
"""


def tune(vm: Vm, tmp_path: Path, value: int, *args: str) -> Result:
    profile = tmp_path / f"boot-{value}.yaml"
    profile.write_text(PROFILE.format(value=value))
    return run_tune(
        "apply", profile, *args, "-H", HOST_NAME, "--ssh-config", vm.ssh_config,
        "--command-timeout", "300",
    )  # fmt: skip


def cmdline(vm: Vm) -> list[str]:
    return vm.sh("cat /proc/cmdline").stdout.split()


@pytest.fixture(scope="module")
def saved(vm: Vm) -> Vm:
    vm.sh("sed -i 's/^GRUB_DEFAULT=.*/GRUB_DEFAULT=saved/' /etc/default/grub && update-grub")
    return vm


def test_cmdline_through_grub_try_once_boot_is_verified_then_made_default(
    saved: Vm, tmp_path: Path
) -> None:
    vm = saved
    before = vm.boot_id()
    done = tune(vm, tmp_path, 1, "--reboot-phase", "--reboot", "-y")
    assert done.code == 0, done.out + done.err
    assert "Reboot: try-once: grub-reboot" in done.out
    assert "ok  /proc/cmdline has processor.max_cstate=1" in done.out
    assert "The new boot configuration is now the default." in done.out
    vm.drop_connection()
    assert vm.boot_id() != before
    assert "processor.max_cstate=1" in cmdline(vm)
    state = vm.sh(
        "test -e /var/lib/tune/pending.json && echo pending; "
        "test -e /etc/grub.d/42_tune_try && echo try; "
        "cat /etc/default/grub.d/90-tune.cfg; grub-editenv list"
    ).stdout
    assert "pending" not in state and "try\n" not in state
    assert "processor.max_cstate=1" in state and "next_entry=tune-try" not in state
    # The default entry (the first one) now carries the parameter.
    menu = vm.sh("sed -n '/^menuentry /,/^}/p' /boot/grub/grub.cfg").stdout
    assert "tune-try" not in menu
    assert "processor.max_cstate=1" in menu


def test_a_try_once_boot_without_the_parameter_is_rolled_back(saved: Vm, tmp_path: Path) -> None:
    vm = saved
    vm.sh(
        "mv /usr/sbin/update-grub /usr/sbin/update-grub.real && "
        "cat >/usr/sbin/update-grub && chmod 755 /usr/sbin/update-grub",
        stdin=STRIP,
    )
    try:
        done = tune(vm, tmp_path, 2, "--reboot-phase", "--reboot", "-y")
    finally:
        vm.drop_connection()
        vm.sh("mv -f /usr/sbin/update-grub.real /usr/sbin/update-grub")
    assert done.code == 3, done.out + done.err
    assert "/proc/cmdline has nothing, not processor.max_cstate=2" in done.err
    assert "boot-configuration changes are rolled back" in done.err
    state = vm.sh(
        "test -e /var/lib/tune/pending.json && echo pending; "
        "test -e /etc/grub.d/42_tune_try && echo try; cat /etc/default/grub.d/90-tune.cfg"
    ).stdout
    assert "pending" not in state and "try\n" not in state
    assert "processor.max_cstate=1" in state  # the default from the first test, untouched
    vm.reboot()
    assert "processor.max_cstate=1" in cmdline(vm)
