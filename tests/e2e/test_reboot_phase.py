"""What a reboot brings, through `tune -H tune-e2e` over SSH, the guest's real GRUB and a real
reboot (issue 9, points 2 and 4).

The guest boots with `GRUB_DEFAULT=saved` (baked into the image), so `tune apply --reboot-phase
--reboot` boots the new command line once through its `/etc/grub.d/42_tune_try` entry and
`grub-reboot`, waits for the new boot id over SSH, verifies `/proc/cmdline` and only then makes
the line the default (drop-in + update-grub). Two reboots in all. The first test's verified boot
is shared: the runtime values an earlier `--runtime-only` apply persisted must hold after it.
The second test's try-once boot lacks its parameter (the harness strips it) and is rolled back;
GRUB's own files then prove that the next boot would be the first test's default, without
booting it.

The tests run in this order: the second one starts from the default the first one left.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Result

from reconciler.kinds.pci import BY_NAME, SETPCI, masked_write
from reconciler.steps.persist import UDEV

from . import guest
from .over_ssh import STATE, apply, history, nvme_select, plan_json, tune, write_profile
from .vm import Vm

THP = "/sys/kernel/mm/transparent_hugepage/enabled"
# systemd-udevd 252 (Debian 12) reads only this file, not udev.conf.d/ (added in a later systemd).
UDEV_CONF = "/etc/udev/udev.conf"
GRUB_DROP_IN = "/etc/default/grub.d/90-tune.cfg"
# A boot entry grub-reboot left for the next boot (GRUB empties the variable when it boots it).
NEXT_ENTRY = re.compile(r"^next_entry=.", re.MULTILINE)
# update-grub itself, wrapped so that the boot menu it writes lacks one parameter: a boot
# loader that drops what tune configured.
STRIP = """\
#!/bin/sh
/usr/sbin/update-grub.real "$@" || exit
sed -i 's/ processor.max_cstate=2//' /boot/grub/grub.cfg
"""


# A host's own drop-in of the kind issue 17 saw lose parameters: continued over several lines,
# appending with ${VAR:+...}. tune must read it as /bin/sh does and keep every parameter.
CONTINUED_DROP_IN = "/etc/default/grub.d/50-e2e-continued.cfg"
CONTINUED = """\
GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT:+$GRUB_CMDLINE_LINUX_DEFAULT }\\
vsyscall=none \\
    systemd.show_status=auto"
"""


def reboot_apply(vm: Vm, profile: Path) -> Result:
    return tune(
        vm, "apply", profile, "--reboot-phase", "--reboot", "-y", "--command-timeout", "300"
    )


def boot_state(vm: Vm) -> str:
    """tune's leftovers of a try-once boot, its GRUB drop-in and GRUB's environment block."""
    return vm.sh(
        f"test -e {STATE}/pending.json && echo pending; "
        "test -e /etc/grub.d/42_tune_try && echo try; "
        f"cat {GRUB_DROP_IN}; grub-editenv list"
    ).stdout


def menu_has_try_entry(vm: Vm) -> bool:
    return "'tune-try'" in vm.sh("cat /boot/grub/grub.cfg").stdout


def default_entry(vm: Vm) -> str:
    """The first menuentry of /boot/grub/grub.cfg: what GRUB boots with `GRUB_DEFAULT=saved`
    and no saved or next entry."""
    menu = vm.sh("sed -n '/^menuentry /,/^}/p' /boot/grub/grub.cfg").stdout
    first, _, _ = menu.partition("\n}")
    # The try entry (/etc/grub.d/42_tune_try) comes after the distribution's, never first.
    assert "tune-try" not in first, menu
    return first


@pytest.fixture
def udev_debug_log(vm: Vm) -> Iterator[None]:
    """systemd-udevd logs each rule that matches and each program it runs, from the next boot
    on; the guest's udev.conf afterwards as before."""
    udev_conf = vm.run("cat", UDEV_CONF).stdout
    guest.write_file(vm, UDEV_CONF, udev_conf + "udev_log=debug\n")
    yield
    guest.write_file(vm, UDEV_CONF, udev_conf)
    vm.run("udevadm", "control", "--log-level=info")  # the running udevd, until the next boot


@pytest.fixture
def continued_drop_in(vm: Vm) -> Iterator[None]:
    """The guest's grub.d holds a continued drop-in with ${VAR:+...} (issue 17, item 2), in the
    boot menu before tune changes anything; removed, and the menu made again, afterwards."""
    guest.write_file(vm, CONTINUED_DROP_IN, CONTINUED)
    vm.run("update-grub")
    yield
    vm.run("rm", "-f", CONTINUED_DROP_IN)
    vm.run("update-grub")


@pytest.mark.usefixtures("clean_state", "udev_debug_log", "continued_drop_in")
def test_runtime_values_hold_across_the_verified_try_once_boot_that_becomes_the_default(
    vm: Vm, tmp_path: Path
) -> None:
    """Point 2: `apply --runtime-only` makes real sysctl writes, `modprobe dummy` and a sysfs
    write; a second apply changes nothing; the boot-time files exist. Point 4: the same profile
    plus `processor.max_cstate: 1` applied with `--reboot-phase --reboot` goes through the real
    update-grub and grub-reboot, a detached reboot, the new boot id, /proc/cmdline verified, the
    line made the default, nothing pending. After that one boot systemd-sysctl,
    systemd-modules-load, systemd-tmpfiles and the udev rule have put the runtime values back."""
    (nvme,) = guest.pci_functions(vm, guest.QEMU_NVME)
    mrrs = guest.max_read_request(vm, nvme)
    thp_before = vm.run("cat", THP).stdout
    assert "[madvise]" not in thp_before, "already madvise: the write would prove nothing"
    assert guest.sysctl(vm, "vm.swappiness") != "10"
    assert "dummy" not in guest.loaded_modules(vm)
    assert "processor.max_cstate" not in guest.running_cmdline(vm)
    runtime = f"""\
name: e2e-reboot
sysctl:
  vm.swappiness: 10
  vm.max_map_count: 1048576
  net.ipv4.tcp_rmem: "4096 87380 16777216"
sysfs:
  {THP}: madvise
modules:
  dummy: loaded
pci:
  # QEMU keeps MaxReadReq as it is, so only the value it has can be applied: this entry is
  # here for the udev rule, which must run at boot.
  - select: {nvme_select()}
    max_read_request: {mrrs}
"""
    runtime_only = write_profile(tmp_path, runtime, "runtime.yaml")
    with_cmdline = write_profile(
        tmp_path, runtime + "cmdline:\n  set:\n    processor.max_cstate: 1\n", "reboot.yaml"
    )

    applied_at_runtime(vm, runtime_only, nvme, mrrs)
    configured = guest.configured_cmdline(vm)
    assert {"vsyscall", "systemd.show_status"} <= set(configured), configured
    running_before = guest.running_cmdline(vm)
    before = vm.boot_id()
    done = reboot_apply(vm, with_cmdline)

    assert done.code == 0, done.out + done.err
    assert "Reboot: try-once: grub-reboot" in done.out
    assert "ok  /proc/cmdline has processor.max_cstate=1" in done.out
    assert "The new boot configuration is now the default." in done.out
    vm.drop_connection()
    assert vm.boot_id() != before
    booted = guest.running_cmdline(vm)
    assert booted.get("processor.max_cstate") == "1"
    # Every parameter the kernel ran with before, and every one the drop-in configures.
    for name, value in {**running_before, **configured}.items():
        if name != "BOOT_IMAGE":
            assert booted.get(name, "absent") == value, (name, booted)
    state = boot_state(vm)
    assert "pending" not in state and "try\n" not in state
    assert "processor.max_cstate=1" in state and not NEXT_ENTRY.search(state)
    assert "processor.max_cstate=1" in default_entry(vm).split()

    assert guest.sysctl(vm, "vm.swappiness") == "10"  # systemd-sysctl
    assert guest.sysctl(vm, "net.ipv4.tcp_rmem") == "4096 87380 16777216"
    assert "dummy" in guest.loaded_modules(vm)  # systemd-modules-load
    assert "[madvise]" in vm.run("cat", THP).stdout  # systemd-tmpfiles
    assert_udev_ran_setpci_at_boot(vm, nvme, mrrs)
    after = plan_json(vm, with_cmdline)
    assert (after["changes"], after["pending"]) == ([], [])

    # The runtime run rolled back by its id; the boot default stays for the next test.
    (runtime_run,) = [run["run_id"] for run in history(vm) if run["phase"] == "runtime"]
    back = tune(vm, "rollback", "--yes", runtime_run)
    assert back.code == 0, back.err
    assert guest.sysctl(vm, "vm.swappiness") != "10"
    assert "dummy" not in guest.loaded_modules(vm)
    assert vm.run("cat", THP).stdout == thp_before
    assert vm.run("test", "-e", "/etc/sysctl.d/90-tune.conf", check=False).returncode == 1


def applied_at_runtime(vm: Vm, profile: Path, nvme: str, mrrs: int) -> None:
    """`apply --runtime-only` writes the live values and the boot-time files; a second one
    changes nothing."""
    first = apply(vm, profile)

    assert first.code == 0, first.out + first.err
    assert guest.sysctl(vm, "vm.swappiness") == "10"
    assert guest.sysctl(vm, "vm.max_map_count") == "1048576"
    assert guest.sysctl(vm, "net.ipv4.tcp_rmem") == "4096 87380 16777216"
    assert "[madvise]" in vm.run("cat", THP).stdout
    assert "dummy" in guest.loaded_modules(vm)
    persisted = {
        "/etc/sysctl.d/90-tune.conf": "vm.swappiness = 10",
        "/etc/modules-load.d/tune.conf": "dummy",
        "/etc/tmpfiles.d/tune.conf": f"w {THP} - - - - madvise",
        UDEV: f"{SETPCI} -s $kernel {mrrs_write(mrrs)}",
    }
    for path, line in persisted.items():
        assert line in vm.run("cat", path).stdout, path

    second = apply(vm, profile)

    assert second.code == 0, second.err
    assert second.out.startswith("In sync: nothing to change"), second.out
    assert [run["outcome"] for run in history(vm)] == ["applied"]


def mrrs_write(mrrs: int) -> str:
    """The masked setpci write tune's udev rule makes for a MaxReadReq-only entry."""
    return masked_write([(BY_NAME["max_read_request"], str(mrrs))])


def assert_udev_ran_setpci_at_boot(vm: Vm, nvme: str, mrrs: int) -> None:
    """This boot's systemd-udevd debug log shows tune's rule matching the NVMe, and only it,
    and setpci run with the masked write for that address and exiting 0. (QEMU keeps the
    MaxReadReq it has, so the value itself cannot show that the rule ran.)"""
    log = vm.sh("journalctl -b -u systemd-udevd --no-pager -o cat").stdout.splitlines()
    processed = f"{nvme}: Processing device "
    assert any(line.startswith(processed) for line in log), (
        f"systemd-udevd logged no debug lines this boot: udev_log=debug in {UDEV_CONF} not read"
    )
    rule = f"{SETPCI} -s $kernel {mrrs_write(mrrs)}"
    matched = {
        line.split(": ", 1)[0]
        for line in log
        if re.fullmatch(rf"\S+: {re.escape(UDEV)}:\d+ RUN '{re.escape(rule)}'", line)
    }
    assert matched == {nvme}, matched
    ran = f"{nvme}: Process '{SETPCI} -s {nvme} {mrrs_write(mrrs)}' succeeded."
    assert ran in log, "the udev rule did not run setpci for the NVMe at boot"


@pytest.mark.usefixtures("clean_state")
def test_a_try_once_boot_without_the_parameter_is_rolled_back(vm: Vm, tmp_path: Path) -> None:
    """The try-once boot comes up without processor.max_cstate=2: exit 3, the boot configuration
    rolled back. GRUB's files say the next boot is the old default (processor.max_cstate=1, the
    first test's): its drop-in, the first menuentry of grub.cfg, no tune-try entry or script, no
    next_entry for grub-reboot, nothing pending."""
    profile = write_profile(
        tmp_path, "name: e2e-boot\ncmdline:\n  set:\n    processor.max_cstate: 2\n"
    )
    old_default = default_entry(vm)
    assert "processor.max_cstate=1" in old_default.split(), "the first test left no default"
    vm.sh(
        "mv /usr/sbin/update-grub /usr/sbin/update-grub.real && "
        "cat >/usr/sbin/update-grub && chmod 755 /usr/sbin/update-grub",
        stdin=STRIP,
    )
    try:
        done = reboot_apply(vm, profile)
    finally:
        vm.drop_connection()
        vm.sh("mv -f /usr/sbin/update-grub.real /usr/sbin/update-grub")

    assert done.code == 3, done.out + done.err
    assert "/proc/cmdline has nothing, not processor.max_cstate=2" in done.err
    assert "its 1 write to the boot configuration is rolled back" in done.err
    state = boot_state(vm)
    assert "pending" not in state and "try\n" not in state
    assert "processor.max_cstate=1" in state and "processor.max_cstate=2" not in state
    assert not NEXT_ENTRY.search(state) and "tune-try" not in state
    assert guest.configured_cmdline(vm).get("processor.max_cstate") == "1"
    assert default_entry(vm) == old_default
    assert not menu_has_try_entry(vm)


@pytest.mark.usefixtures("clean_state")
def test_an_armed_boot_after_a_plain_reboot_is_verified_and_made_the_default(
    vm: Vm, tmp_path: Path
) -> None:
    """`tune apply --reboot-phase --arm` (issue 32) arranges the try-once boot through the real
    update-grub and grub-reboot and returns without rebooting; `tune verify` exits 10 until
    someone else reboots (a plain `systemctl reboot`, as an engine does); the real GRUB boots
    the try entry once, and verify makes it the default. The run is rolled back at the end, so
    the default is again the first test's."""
    profile = write_profile(
        tmp_path, "name: e2e-arm\ncmdline:\n  set:\n    processor.max_cstate: 3\n", "arm.yaml"
    )
    old_default = default_entry(vm)
    boot_id = vm.boot_id()
    # Arming, verifying (which makes the entry the default) and rolling back each run the real
    # update-grub, which takes a while under TCG on a loaded machine.
    slow = ("--command-timeout", "300")
    done = tune(vm, "apply", profile, "--reboot-phase", "--arm", "-y", *slow)
    assert done.code == 0, done.out + done.err
    assert "Armed " in done.out and "(grub-reboot)" in done.out
    assert vm.boot_id() == boot_id  # tune did not reboot it
    state = boot_state(vm)
    assert "pending" in state and "try\n" in state and NEXT_ENTRY.search(state)
    assert default_entry(vm) == old_default
    assert menu_has_try_entry(vm)  # booted once, by grub-reboot
    assert tune(vm, "verify").code == 10

    vm.reboot()
    assert "processor.max_cstate=3" in vm.sh("cat /proc/cmdline").stdout.split()
    done = tune(vm, "verify", *slow)
    assert done.code == 0, done.out + done.err
    assert "The new boot configuration is now the default." in done.out
    assert guest.configured_cmdline(vm).get("processor.max_cstate") == "3"
    assert "pending" not in boot_state(vm)
    status = tune(vm, "status", "--format", "json")
    assert status.code == 0, status.err
    assert '"verdict": "held"' in status.out

    assert tune(vm, "rollback", "-y", *slow).code == 0
    assert default_entry(vm) == old_default
    assert not menu_has_try_entry(vm)
