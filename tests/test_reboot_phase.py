"""The reboot phase: the kernel command line through every supported boot-loader layout, with
the boot tools replaced by fakes that record their argv and regenerate the boot menu from the
snapshot's configuration as the real tools would; the journal and rollback of each."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import BLACKWELL, booted_by_systemd_boot, profile, run_tune, write
from shared_run import SharedRun
from small_host import tree

from reconciler.apply.journal import read_run, run_ids
from reconciler.apply.python_engine import execute, rollback
from reconciler.apply.work import prepare
from reconciler.core.errors import HostError
from reconciler.facts import cmdline as fmt
from reconciler.hosts.base import Completed
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile
from reconciler.steps.ops import Step

PROFILE = """\
name: boot
cmdline:
  set:
    amd_pstate: active
    processor.max_cstate: {value: 1, priority: P0, reason: C-states add wake-up latency}
  remove: [nomodeset]
"""
RUNNING = "BOOT_IMAGE=/vmlinuz-6.14.8-2-pve root=/dev/sda1 ro quiet nomodeset\n"
GRUB_CFG = "/boot/grub/grub.cfg"
ESP_ENTRY = "/boot/efi/loader/entries/linux.conf"


class BootTools(SnapshotHost):
    """update-grub, proxmox-boot-tool and kernel-install as small fakes: each records its argv
    and writes the boot menu from the snapshot's configured command line."""

    TOOLS = ("update-grub", "proxmox-boot-tool", "kernel-install")

    def __init__(self, root: Path) -> None:
        super().__init__(root, commands=("grubby", *self.TOOLS))
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str]) -> Completed:
        if argv[0] not in self.TOOLS:
            return super().run(argv)
        self.calls.append(tuple(argv))
        boot = fmt.boot_config(self.fetch(fmt.request()))
        assert boot is not None and boot.cmdline is not None
        if argv[0] == "update-grub":
            self.put_file(GRUB_CFG, f"linux /vmlinuz {boot.cmdline}\n".encode())
        else:
            self.put_file(ESP_ENTRY, f"options {boot.cmdline}\n".encode())
        return Completed(0)


def grub(root: Path, dropin_dir: bool, saved: bool) -> None:
    default = "GRUB_DEFAULT=saved\n" if saved else "GRUB_DEFAULT=0\n"
    write(
        root,
        fmt.GRUB_DEFAULT,
        f'# GRUB settings\n{default}GRUB_CMDLINE_LINUX_DEFAULT="quiet nomodeset"\n'
        'GRUB_CMDLINE_LINUX="root=/dev/sda1 ro"\n',
    )
    if dropin_dir:
        write(root, "/etc/default/grub.d/init-select.cfg", "GRUB_TIMEOUT=5\n")


def kernel_cmdline(root: Path, proxmox: bool) -> None:
    write(root, fmt.KERNEL_CMDLINE, "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet nomodeset\n")
    if proxmox:
        write(root, fmt.PROXMOX_BOOT_UUIDS, "# This file is managed by proxmox-boot-tool\nABCD\n")
        booted_by_systemd_boot(root)


def proxmox_grub(root: Path, uefi: bool) -> None:
    """proxmox-boot-tool keeping GRUB on its ESPs (legacy BIOS, or `init DEV grub` on UEFI):
    the boot uses /etc/default/grub, and /etc/kernel/cmdline, stale here, is not read."""
    grub(root, True, False)
    write(root, fmt.KERNEL_CMDLINE, "root=ZFS=rpool/ROOT/pve-1 boot=zfs\n")
    write(root, fmt.PROXMOX_BOOT_UUIDS, "# This file is managed by proxmox-boot-tool\nABCD\n")
    if uefi:  # GRUB started this boot: EFI variables, none of them systemd-boot's LoaderInfo
        write(
            root, "/sys/firmware/efi/efivars/BootCurrent-8be4df61-93ca-11d2-aa0d-00e098032b8c", b""
        )


def grubby(root: Path) -> None:
    write(root, fmt.REDHAT_RELEASE, "Rocky Linux release 9.4 (Blue Onyx)\n")
    for name in ("a", "b"):
        write(
            root,
            f"/boot/loader/entries/{name}.conf",
            f"title Rocky {name}\nversion 5.14\nlinux /vmlinuz\n"
            "options root=/dev/sda1 ro quiet nomodeset\ngrub_users $grub_users\n",
        )


def grubby_kernelopts(root: Path) -> None:
    """RHEL 8: the entries say `options $kernelopts $tuned_params`, and grubby edits kernelopts
    in the GRUB environment block."""
    write(root, fmt.REDHAT_RELEASE, "AlmaLinux release 8.10 (Cerulean Leopard)\n")
    for name in ("a", "b"):
        write(
            root,
            f"/boot/loader/entries/{name}.conf",
            f"title Alma {name}\nversion 4.18\nlinux /vmlinuz\n"
            "initrd /initramfs $tuned_initrd\noptions $kernelopts $tuned_params\n",
        )
    block = (
        "# GRUB Environment Block\nsaved_entry=a\nkernelopts=root=/dev/sda1 ro quiet nomodeset\n"
    )
    write(root, fmt.GRUBENV, block + "#" * (1024 - len(block)))


def grubby_etc(root: Path) -> None:
    """RHEL 9 as installed: grubby also rewrites GRUB_CMDLINE_LINUX in /etc/default/grub and
    writes /etc/kernel/cmdline, which it creates (grubby 8.40-64 on): rolling back puts the one
    back and deletes the other."""
    grubby(root)
    write(root, "/etc/default/grub", 'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="rhgb quiet"\n')
    (root / "etc/kernel").mkdir(parents=True, exist_ok=True)


LAYOUTS = {
    "grub, drop-in dir": (lambda r: grub(r, True, False), ("update-grub",)),
    "grub, no drop-in dir": (lambda r: grub(r, False, False), ("update-grub",)),
    "grub, GRUB_DEFAULT=saved": (lambda r: grub(r, True, True), ("update-grub",)),
    "proxmox-boot-tool": (lambda r: kernel_cmdline(r, True), ("proxmox-boot-tool", "refresh")),
    "proxmox-boot-tool, GRUB, legacy BIOS": (
        lambda r: proxmox_grub(r, False),
        ("proxmox-boot-tool", "refresh"),
    ),
    "proxmox-boot-tool, GRUB, UEFI": (
        lambda r: proxmox_grub(r, True),
        ("proxmox-boot-tool", "refresh"),
    ),
    "kernel-install": (
        lambda r: kernel_cmdline(r, False),
        ("kernel-install", "add", "6.14.8-2-pve", "/boot/vmlinuz-6.14.8-2-pve"),
    ),
    "grubby": (grubby, None),
    "grubby, RHEL 8 kernelopts": (grubby_kernelopts, None),
    "grubby, /etc/default/grub and /etc/kernel": (grubby_etc, None),
}


def layout(tmp_path: Path, name: str) -> tuple[Path, BootTools]:
    root = tmp_path / "host"
    write(root, fmt.PROC_CMDLINE, RUNNING)
    write(root, fmt.OSRELEASE, "6.14.8-2-pve\n")
    LAYOUTS[name][0](root)
    host = BootTools(root)
    if LAYOUTS[name][1] is not None:
        host.run(LAYOUTS[name][1])  # the boot menu as the host had it before tune
        host.calls.clear()
    return root, host


def configured(host: BootTools) -> dict[str, str]:
    boot = fmt.boot_config(host.fetch(fmt.request()))
    assert boot is not None
    return fmt.parameters(boot.cmdline) or {}


def menu(root: Path) -> str:
    """What the boot loader will actually read next boot."""
    for path in (GRUB_CFG, ESP_ENTRY, fmt.GRUBENV, "/boot/loader/entries/a.conf"):
        if (root / path.lstrip("/")).exists():
            return (root / path.lstrip("/")).read_text()
    raise AssertionError("no boot menu")


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_boot_layout_applies_verifies_and_rolls_back(tmp_path: Path, name: str) -> None:
    root, host = layout(tmp_path, name)
    before = tree(root)
    loaded = load_profile(str(profile(tmp_path, PROFILE)))
    work = prepare(host, loaded, runtime_only=False, reboot_phase=True)
    # P0 first, as the plan orders them.
    assert [s.id for s in work.steps] == [
        "cmdline:processor.max_cstate",
        "cmdline:amd_pstate",
        "cmdline:nomodeset",
    ]
    execute(host, work, loaded, phase="reboot", sync=False)

    params = configured(host)
    assert params["amd_pstate"] == "active" and params["processor.max_cstate"] == "1"
    assert "nomodeset" not in params and "quiet" in params
    assert "amd_pstate=active" in menu(root) and "nomodeset" not in menu(root)
    tool = LAYOUTS[name][1]
    if tool is None:
        # grubby edits every entry, or on RHEL 8 the kernelopts they all use.
        edited = "boot/grub2/grubenv" if "kernelopts" in name else "boot/loader/entries/b.conf"
        assert "processor.max_cstate=1" in (root / edited).read_text()
        if "/etc/kernel" in name:
            for path in ("etc/default/grub", "etc/kernel/cmdline"):
                assert "processor.max_cstate=1" in (root / path).read_text(), path
    else:
        assert host.calls == [tool] * 3

    plan = make_plan(loaded, observe(host, loaded.profile, True), True)
    assert [c.id for c in plan.changes if c.kind == "cmdline"] == []
    assert {p.target for p in plan.pending} == {
        "amd_pstate",
        "processor.max_cstate",
        "nomodeset",
    }

    host.calls.clear()
    rollback(host)
    after = tree(root)
    assert after == before
    if tool is not None:
        assert host.calls == [tool] * 3


def test_grub_dropin_appends_unless_a_removed_parameter_is_in_the_base(tmp_path: Path) -> None:
    root, host = layout(tmp_path, "grub, drop-in dir")
    text = PROFILE.replace("  remove: [nomodeset]\n", "")
    loaded = load_profile(str(profile(tmp_path, text)))
    execute(host, prepare(host, loaded, runtime_only=False, reboot_phase=True), loaded, sync=False)
    dropin = (root / fmt.DROPIN.lstrip("/")).read_text()
    assert dropin.splitlines()[-1] == (
        'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT processor.max_cstate=1 '
        'amd_pstate=active"'
    )
    assert menu(root) == (
        "linux /vmlinuz root=/dev/sda1 ro quiet nomodeset "
        "processor.max_cstate=1 amd_pstate=active\n"
    )


def test_no_supported_boot_loader_names_the_files_looked_for(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, fmt.PROC_CMDLINE, RUNNING)
    before = tree(root)
    loaded = load_profile(str(profile(tmp_path, PROFILE)))
    with pytest.raises(HostError) as caught:
        prepare(SnapshotHost(root), loaded, runtime_only=False, reboot_phase=True)
    message = str(caught.value)
    for path in fmt.LOOKED_FOR:
        assert path in message
    assert "no supported boot loader configuration found" in message
    assert tree(root) == before


def test_snapshot_journals_boot_tools_and_never_writes_runtime(
    reboot_phase_applied: SharedRun, scratch: Path
) -> None:
    before = reboot_phase_applied.before
    result = reboot_phase_applied.result
    assert result.code == 0, result.err
    (run_id,) = run_ids(SnapshotHost(reboot_phase_applied.root))
    run = read_run(SnapshotHost(reboot_phase_applied.root), run_id)
    assert run is not None and run.header is not None and run.header.phase == "reboot"
    assert {step.kind for _, step in run.steps} == {"cmdline", "lxc"}
    deferred = [r["argv"] for r in (r.to_json() for r in run.records) if r["type"] == "deferred"]
    assert deferred and all(argv == ["update-grub"] for argv in deferred)
    changed = {p for p, data in tree(reboot_phase_applied.root).items() if before.get(p) != data}
    assert not any(p.startswith(("proc/", "sys/")) for p in changed)
    assert "etc/default/grub.d/90-tune.cfg" in changed

    untuned = reboot_phase_applied.copy(scratch / "untuned")
    assert run_tune("rollback", "--yes", "--root", untuned).code == 0
    assert tree(untuned) == before


def test_apply_without_phase_flag_writes_runtime_then_reboot(
    both_phases_applied: SharedRun,
) -> None:
    result = both_phases_applied.result
    assert result.code == 0, result.err
    host = SnapshotHost(both_phases_applied.root)
    run = read_run(host, run_ids(host)[0])
    assert run is not None
    kinds = [step.kind for _, step in run.steps]
    first_reboot = min(i for i, k in enumerate(kinds) if k in {"cmdline", "lxc"})
    assert all(k in {"cmdline", "lxc"} for k in kinds[first_reboot:])
    assert "sysctl" in kinds[:first_reboot]


def test_reboot_is_refused_on_a_snapshot(tmp_path: Path) -> None:
    untuned, _ = layout(tmp_path, "grub, drop-in dir")
    boot = profile(tmp_path, PROFILE)
    before = tree(untuned)
    result = run_tune("apply", "--yes", boot, "--reboot-phase", "--reboot", "--root", untuned)
    assert result.code == 64
    assert "--reboot is refused on a snapshot" in result.err
    assert tree(untuned) == before


def test_boot_tool_steps_survive_the_journal(tmp_path: Path) -> None:
    _, host = layout(tmp_path, "proxmox-boot-tool")
    loaded = load_profile(str(profile(tmp_path, PROFILE)))
    work = prepare(host, loaded, runtime_only=False, reboot_phase=True)
    for step in work.steps:
        data = json.loads(json.dumps(step.to_json()))
        assert data["do"][-1] == {"op": "boot", "argv": ["proxmox-boot-tool", "refresh"]}
        assert Step.from_json(data) == replace(step, requires=())


def reboot(root: Path, move: tuple[str, str] | None = None) -> None:
    """The snapshot "reboots": a new boot id, /proc/cmdline from the configured command line,
    and optionally a device major moved (what a kernel or driver upgrade does)."""
    host = SnapshotHost(root)
    boot = fmt.boot_config(host.fetch(fmt.request()))
    assert boot is not None and boot.cmdline is not None
    write(root, fmt.PROC_CMDLINE, f"BOOT_IMAGE=/vmlinuz {boot.cmdline}\n")
    write(root, "/proc/sys/kernel/random/boot_id", "00000000-0000-4000-8000-000000000002\n")
    if move is not None:
        devices = root / "proc/devices"
        devices.write_text(devices.read_text().replace(*move))


def pending(root: Path) -> dict[str, object]:
    data = json.loads((root / "var/lib/tune/pending.json").read_text())
    assert isinstance(data, dict)
    return data


def test_reboot_then_verify_passes_and_clears_pending(
    both_phases_applied: SharedRun, scratch: Path
) -> None:
    assert both_phases_applied.result.code == 0
    untuned = both_phases_applied.copy(scratch / "untuned")
    recorded = pending(untuned)
    assert recorded["expected"] == {
        "cmdline": {"processor.max_cstate": "1", "amd_pstate": "active"},
        "lxc": {"/etc/pve/lxc/101.conf": [195, 509, 510]},
    }
    reboot(untuned)
    result = run_tune("verify", "--root", untuned)
    assert result.code == 0, result.err
    assert "ok  /proc/cmdline has amd_pstate=active" in result.out
    assert not (untuned / "var/lib/tune/pending.json").exists()


def test_verify_fails_on_a_moved_major_and_rolls_the_boot_configuration_back(
    both_phases_applied: SharedRun, scratch: Path
) -> None:
    before = both_phases_applied.before
    assert both_phases_applied.result.code == 0
    untuned = both_phases_applied.copy(scratch / "untuned")
    reboot(untuned, move=("509 nvidia-uvm", "508 nvidia-uvm"))
    configured = tree(untuned)
    result = run_tune("verify", "--root", untuned)
    assert result.code == 3
    assert (
        "/etc/pve/lxc/101.conf allows majors [195, 509, 510] but /proc/devices now says "
        "nvidia-frontend is 195, nvidia-uvm is 508, nvidia-caps is 510"
    ) in result.err
    after = tree(untuned)
    boot_files = ("etc/default/grub.d/90-tune.cfg", "etc/pve/lxc/101.conf")
    for path in boot_files:
        assert after.get(path) == before.get(path)
    # The runtime part stays applied: only the boot configuration is rolled back.
    assert after["etc/sysctl.d/90-tune.conf"] == configured["etc/sysctl.d/90-tune.conf"]
    assert not (untuned / "var/lib/tune/pending.json").exists()


def test_verify_reports_a_parameter_the_boot_did_not_bring(
    reboot_phase_applied: SharedRun, scratch: Path
) -> None:
    assert reboot_phase_applied.result.code == 0
    untuned = reboot_phase_applied.copy(scratch / "untuned")
    reboot(untuned)
    cmdline = untuned / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().replace(" amd_pstate=active", ""))
    result = run_tune("verify", "--root", untuned)
    assert result.code == 3
    assert "/proc/cmdline has nothing, not amd_pstate=active" in result.err
    # --reboot-phase never wrote the runtime part, and verify says so too: not as the failure.
    assert "Not applied: 19 entries (358 knobs) of the runtime phase" in result.out
    assert "NOT APPLIED sysctl kernel.numa_balancing: 1 (want 0)" in result.out
    assert "numa_balancing" not in result.err


def test_verify_before_the_reboot_is_refused(
    reboot_phase_applied: SharedRun, scratch: Path
) -> None:
    assert reboot_phase_applied.result.code == 0
    untuned = reboot_phase_applied.copy(scratch / "untuned")  # verify takes the lock
    result = run_tune("verify", "--root", untuned)
    assert result.code == 10  # not rebooted yet: not 1, which is a host tune cannot read
    assert "has not rebooted since run" in result.err
    assert (untuned / "var/lib/tune/pending.json").exists()


def test_dry_run_shows_the_drop_in_and_the_boot_tool(untuned: Path) -> None:
    before = tree(untuned)
    result = run_tune("apply", BLACKWELL, "--reboot-phase", "--root", untuned, "--dry-run")
    assert result.code == 0, result.err
    assert "write file /etc/default/grub.d/90-tune.cfg" in result.out
    assert "run update-grub (boot tool; journaled, not run, on a snapshot)" in result.out
    assert "write /proc/sys" not in result.out
    assert tree(untuned) == before


def block_pending(root: Path) -> None:
    """pending.json cannot be written: a directory holds its name, and inside it another holds
    the name of its temporary file (`mv` would otherwise move the file into the first)."""
    (root / "var/lib/tune/pending.json/.pending.json.tune-new/x").mkdir(parents=True)


def test_a_pending_record_that_cannot_be_written_rolls_the_run_back(untuned: Path) -> None:
    """pending.json is written inside the run, before its end: a boot configuration that
    `tune verify` would never check is not left behind (as over SSH, exit 3)."""
    block_pending(untuned)
    before = tree(untuned)
    result = run_tune("apply", BLACKWELL, "--reboot-phase", "--root", untuned, "-y")
    assert result.code == 3, result.out + result.err
    assert "apply failed (/var/lib/tune/pending.json: cannot write" in result.err
    assert "rolled back" in result.err
    assert tree(untuned) == before
    assert not (untuned / "var/lib/tune/profile.yaml").exists()
    host = SnapshotHost(untuned)
    run = read_run(host, run_ids(host)[0])
    assert run is not None and run.outcome == "rolled-back"


def test_verify_after_a_reboot_phase_alone_keeps_a_boot_that_came_up_as_asked(
    reboot_phase_applied: SharedRun, scratch: Path
) -> None:
    """The documented flow on a host never runtime-tuned: `apply --reboot-phase`, reboot,
    `verify`. The boot brought what the run configured; the runtime knobs no run applied are
    reported as not applied, with the command that applies them, and roll nothing back."""
    assert reboot_phase_applied.result.code == 0
    untuned = reboot_phase_applied.copy(scratch / "untuned")
    reboot(untuned)
    result = run_tune("verify", "--root", untuned)
    assert result.code == 0, result.err
    assert "ok  /proc/cmdline has amd_pstate=active" in result.out
    assert "Not applied: 19 entries (358 knobs) of the runtime phase" in result.out
    assert f"`tune apply PROFILE --runtime-only --root {untuned}` applies them" in result.out
    assert all(len(line) <= 300 for line in (result.out + result.err).splitlines())
    assert "  ... and 17 more (`tune check` lists them" in result.out
    assert not (untuned / "var/lib/tune/pending.json").exists()
    # Kept: the new boot configuration, and the runtime part still not written.
    assert "amd_pstate=active" in (untuned / "etc/default/grub.d/90-tune.cfg").read_text()
    data = json.loads(run_tune("verify", "--root", untuned, "--format", "json").out)
    assert data["status"] == "nothing-pending"
    # tune check says the same of them: not applied, not drift (no alarm, exit 0).
    checked = run_tune("check", "--root", untuned, "--format", "json")
    report = json.loads(checked.out)
    assert (checked.code, report["drift"], len(report["not_applied"])) == (0, [], 363)


def test_a_rollback_of_a_booted_configuration_says_the_kernel_keeps_it_until_a_reboot(
    reboot_phase_applied: SharedRun, scratch: Path
) -> None:
    """After the boot took the run's parameters up, `tune rollback` restores the boot
    configuration; the running kernel keeps them until the next boot: said, and `tune check`
    shows them pending a reboot, not absent."""
    untuned = reboot_phase_applied.copy(scratch / "untuned")
    before_boot = run_tune("rollback", "--yes", "--root", reboot_phase_applied.copy(scratch / "b"))
    assert before_boot.code == 0, before_boot.err
    assert "running kernel" not in before_boot.out  # never booted with them: nothing to say
    reboot(untuned)
    assert run_tune("verify", "--root", untuned).code == 0
    rolled = run_tune("rollback", "--yes", "--root", untuned)
    assert rolled.code == 0, rolled.err
    assert (
        "The running kernel still has the 2 rolled-back boot settings (cmdline:amd_pstate; "
        "cmdline:processor.max_cstate) until the next boot: reboot to take the prior "
        "configuration up; `tune check` shows them pending a reboot."
    ) in rolled.out
    checked = run_tune("check", BLACKWELL, "--root", untuned)
    assert "PENDING cmdline amd_pstate: running active, next boot (absent)" in checked.out
    assert "NOT APPLIED cmdline amd_pstate" not in checked.out
    report = json.loads(run_tune("check", BLACKWELL, "--root", untuned, "--format", "json").out)
    assert "cmdline:amd_pstate" in {p["id"] for p in report["pending"]}
    assert "cmdline:amd_pstate" not in {c["id"] for c in report["not_applied"]}
    # Once rebooted, the prior configuration runs: nothing pending, the parameter not applied.
    reboot(untuned)
    again = run_tune("check", BLACKWELL, "--root", untuned)
    assert "NOT APPLIED cmdline amd_pstate: (absent) (want active" in again.out
    assert "PENDING cmdline amd_pstate" not in again.out
