"""`tune apply --reboot-phase --arm`: the next boot arranged as `--reboot` arranges it (the new
command line once, the old one the fallback) and recorded in pending.json, and no reboot; then
whoever rebooted the host runs `tune verify`, which promotes or rolls back. On the snapshot
layouts and the fake boot tools of the try-once tests (`test_reboot`, `test_reboot_systemd_boot`,
`test_reboot_phase`), the boot simulated as each boot loader picks its entry."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import test_reboot as grub_tests
import test_reboot_systemd_boot as sd_tests
from conftest import BLACKWELL, profile, run_tune, write
from small_host import tree
from test_reboot_phase import LAYOUTS, layout

from reconciler.apply.engines import PythonEngine
from reconciler.apply.pending import PENDING, read_pending
from reconciler.apply.tryonce import TRY_ENTRY
from reconciler.core.errors import ApplyFailed, ExitCode, NotRebooted, NoTryOnce
from reconciler.facts import cmdline as fmt
from reconciler.flow.orchestration import ApplyJob, Done, apply_one, verify_one
from reconciler.flow.status import read_status
from reconciler.hosts.base import Host
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import load_profile

NEW_GRUB_LINE = "root=/dev/sda1 ro quiet processor.max_cstate=1 amd_pstate=active"


def arm(host: Host, tmp_path: Path) -> Done:
    """What `tune apply PROFILE --reboot-phase --arm --yes` does on `host`."""
    loaded = load_profile(str(profile(tmp_path, grub_tests.PROFILE)))
    job = ApplyJob(loaded, reboot_phase=True, arm=True)
    return apply_one(PythonEngine(host), job, lambda *_: None)


def verify(host: Host) -> object:
    return verify_one(PythonEngine(host), keep_on_regression=False, restart_containers=False)


def test_grub_armed_boots_the_new_line_once_and_verify_makes_it_the_default(
    tmp_path: Path,
) -> None:
    host = grub_tests.grub_host(tmp_path)
    root = host.root
    done = arm(host, tmp_path)
    assert done.pending is not None and done.verdict is None
    # The try entry and next_entry, and nothing else: no reboot asked (`systemctl reboot`).
    assert host.calls == [("update-grub",), ("grub-reboot", TRY_ENTRY)]
    assert not (root / fmt.DROPIN.lstrip("/")).exists()
    recorded = read_pending(host)
    assert recorded is not None and recorded.armed and recorded.try_once == "grub-reboot"
    assert recorded.reboot_asked_in is None
    assert json.loads((root / PENDING.lstrip("/")).read_text())["armed"] is True
    status = read_status(host)
    assert (status.armed, status.reboot_pending) == (True, True)
    assert status.pending_run == recorded.run_id

    # Not rebooted yet: verify checks nothing, says so with its own error, keeps the record.
    with pytest.raises(NotRebooted) as caught:
        verify(host)
    assert caught.value.exit_code == ExitCode.NOT_REBOOTED == 10
    assert read_pending(host) == recorded

    # Someone else reboots (an engine, `reboot`): GRUB boots the try entry once.
    assert grub_tests.boot(root, 2) == NEW_GRUB_LINE
    host.calls.clear()
    assert verify(host) is not None
    assert host.calls == [("update-grub",)] * 4  # promoted: try entry out, the drop-in in
    assert read_pending(host) is None
    assert TRY_ENTRY not in (root / grub_tests.GRUB_CFG.lstrip("/")).read_text()
    assert grub_tests.boot(root, 3) == NEW_GRUB_LINE  # now the default
    verification = read_status(host).last_verification
    assert verification is not None and verification.verdict == "held"
    assert verification.boot_id == "00000000-0000-4000-8000-000000000002"
    assert read_status(host).armed is False


def test_grub_armed_boot_that_fails_verification_is_rolled_back_to_the_old_line(
    tmp_path: Path,
) -> None:
    host = grub_tests.grub_host(tmp_path)
    root = host.root
    before = tree(root / "etc") | tree(root / "boot")
    arm(host, tmp_path)
    cfg = root / grub_tests.GRUB_CFG.lstrip("/")
    cfg.write_text(cfg.read_text().replace(" amd_pstate=active }", " }"))  # the boot drops it
    grub_tests.boot(root, 2)
    with pytest.raises(ApplyFailed) as caught:
        verify(host)
    assert "/proc/cmdline has nothing, not amd_pstate=active" in str(caught.value)
    assert tree(root / "etc") | tree(root / "boot") == before
    assert read_pending(host) is None
    assert grub_tests.boot(root, 3) == grub_tests.OLD_LINE
    verification = read_status(host).last_verification
    assert verification is not None and verification.verdict == "failed"


def kernel_install_host(tmp_path: Path) -> sd_tests.BootTools:
    root = tmp_path / "host"
    esp = "/efi/loader"
    old, release = sd_tests.OLD_LINE, sd_tests.RELEASE
    write(root, fmt.KERNEL_CMDLINE, old + "\n")
    write(root, f"{esp}/entries/b-{release}.conf", sd_tests.entry("running", release, old))
    write(root, fmt.OSRELEASE, release + "\n")
    write(root, fmt.PROC_CMDLINE, old + "\n")
    write(root, grub_tests.BOOT_ID, grub_tests.BOOT_ID_BEFORE + "\n")
    return sd_tests.BootTools(root, esp)


SYSTEMD_BOOT: dict[str, Callable[[Path], sd_tests.BootTools]] = {
    "proxmox-boot-tool": sd_tests.proxmox_host,
    "kernel-install": kernel_install_host,
}


@pytest.mark.parametrize("name", SYSTEMD_BOOT)
def test_systemd_boot_armed_boots_the_copy_once_and_verify_promotes(
    tmp_path: Path, name: str
) -> None:
    host = SYSTEMD_BOOT[name](tmp_path)
    root = host.root
    arm(host, tmp_path)
    assert host.calls == [("bootctl", "set-oneshot", fmt.TRY_CONF)]  # and no reboot
    assert (root / sd_tests.ONESHOT.lstrip("/")).read_text() == fmt.TRY_CONF
    recorded = read_pending(host)
    assert recorded is not None and recorded.armed and recorded.try_once == "bootctl"
    with pytest.raises(NotRebooted):
        verify(host)

    assert sd_tests.boot(host, 2) == sd_tests.NEW_LINE
    host.calls.clear()
    verify(host)
    assert read_pending(host) is None
    assert (root / fmt.KERNEL_CMDLINE.lstrip("/")).read_text() == sd_tests.NEW_LINE + "\n"
    assert not list(root.glob(f"**/entries/{fmt.TRY_CONF}"))
    assert sd_tests.boot(host, 3) == sd_tests.NEW_LINE


@pytest.mark.parametrize("name", SYSTEMD_BOOT)
def test_systemd_boot_armed_boot_that_fails_is_rolled_back(tmp_path: Path, name: str) -> None:
    host = SYSTEMD_BOOT[name](tmp_path)
    root = host.root
    before = tree(root / "etc") | tree(root / "boot") | tree(root / "efi")
    arm(host, tmp_path)
    (try_conf,) = root.glob(f"**/entries/{fmt.TRY_CONF}")
    try_conf.write_text(try_conf.read_text().replace(" amd_pstate=active", ""))
    sd_tests.boot(host, 2)
    with pytest.raises(ApplyFailed):
        verify(host)
    assert tree(root / "etc") | tree(root / "boot") | tree(root / "efi") == before
    assert read_pending(host) is None
    assert sd_tests.boot(host, 3) == sd_tests.OLD_LINE


# Every layout of the reboot-phase tests that has no one-time boot for a command line.
NO_TRY_ONCE = [name for name in LAYOUTS if name != "grub, GRUB_DEFAULT=saved"]


@pytest.mark.parametrize("name", NO_TRY_ONCE)
def test_arm_without_a_one_time_boot_is_refused_and_writes_nothing(
    tmp_path: Path, name: str
) -> None:
    root, host = layout(tmp_path, name)
    before = tree(root)
    with pytest.raises(NoTryOnce) as caught:
        arm(host, tmp_path)
    assert caught.value.exit_code == ExitCode.NO_TRY_ONCE == 11
    assert "--arm needs a one-time boot" in str(caught.value)
    assert "nothing was written" in str(caught.value)
    assert host.calls == []
    assert tree(root) == before


def test_arm_on_a_snapshot_journals_the_one_time_boot_and_verify_exits_10_before_it(
    untuned: Path,
) -> None:
    grub = untuned / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0", "GRUB_DEFAULT=saved"))
    result = run_tune(
        "apply", BLACKWELL, "--reboot-phase", "--arm", "--root", untuned, "-y", "--format", "json"
    )
    assert result.code == 0, result.err
    assert "Armed snapshot" in result.err and "(grub-reboot)" in result.err
    assert "tune does not reboot it" in result.err
    document = json.loads(result.out)
    assert (document["boot_pending"], document["armed"]) == (True, True)
    pending = json.loads((untuned / PENDING.lstrip("/")).read_text())
    assert pending["armed"] is True and pending["try_once"] == "grub-reboot"
    assert (untuned / fmt.TRY_SCRIPT.lstrip("/")).exists()

    result = run_tune("verify", "--root", untuned)
    assert result.code == 10, result.err
    assert "has not rebooted since run" in result.err
    assert (untuned / PENDING.lstrip("/")).exists()


def test_arming_again_before_the_boot_changes_nothing_and_the_plan_says_pending(
    untuned: Path,
) -> None:
    """The armed try-once line is what the next boot passes: a second `--arm` (an engine's
    retry, a second playbook run) finds nothing to change, as a second apply must."""
    grub = untuned / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0", "GRUB_DEFAULT=saved"))
    argv = ("apply", BLACKWELL, "--reboot-phase", "--arm", "--root", untuned, "-y")
    assert run_tune(*argv).code == 0
    before = tree(untuned)
    again = run_tune(*argv, "--format", "json")
    assert again.code == 0, again.err
    assert json.loads(again.out)["run"] is None
    assert tree(untuned) == before
    plan = json.loads(run_tune("plan", BLACKWELL, "--root", untuned, "--format", "json").out)
    assert not [c for c in plan["changes"] if c["kind"] == "cmdline"]
    assert "cmdline:amd_pstate" in {p["id"] for p in plan["pending"]}

    # Booted the armed line, not yet verified: still nothing to arm, nothing pending.
    armed = fmt.armed_line(SnapshotHost(untuned).fetch(fmt.request()))
    assert armed is not None and "amd_pstate=active" in armed.split()
    (untuned / fmt.PROC_CMDLINE.lstrip("/")).write_text(f"BOOT_IMAGE=/vmlinuz {armed}\n")
    (untuned / "proc/sys/kernel/random/boot_id").write_text(
        "00000000-0000-4000-8000-000000000003\n"
    )
    before = tree(untuned)
    again = run_tune(*argv, "--format", "json")
    assert again.code == 0, again.err
    assert json.loads(again.out)["run"] is None
    assert tree(untuned) == before


def test_arm_where_grub_boots_entry_0_exits_11_and_writes_nothing(untuned: Path) -> None:
    before = tree(untuned)
    result = run_tune("apply", BLACKWELL, "--reboot-phase", "--arm", "--root", untuned, "-y")
    assert result.code == 11
    assert "GRUB_DEFAULT is '0', not 'saved'" in result.err
    assert tree(untuned) == before


@pytest.mark.parametrize(
    "flags",
    [
        ("--arm",),
        ("--arm", "--runtime-only"),
        ("--arm", "--reboot-phase", "--reboot"),
        ("--arm", "--reboot-phase", "--runtime-only"),
    ],
)
def test_arm_needs_the_reboot_phase_and_no_reboot(untuned: Path, flags: tuple[str, ...]) -> None:
    before = tree(untuned)
    result = run_tune("apply", BLACKWELL, *flags, "--root", untuned, "-y")
    assert result.code == 64
    assert tree(untuned) == before


def test_arm_over_several_hosts_is_refused() -> None:
    result = run_tune(
        "apply", BLACKWELL, "--reboot-phase", "--arm", "-H", "h1", "-H", "h2", "--no-probes"
    )
    assert result.code == 64
    assert "--arm arranges one host's next boot: name one host" in result.err
