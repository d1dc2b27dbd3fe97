"""cmdline: what the next boot passes (the boot tool's configuration) against the running
kernel's command line.

Cases of a host's files in and a plan out are data, in tests/kinds/cmdline/ (`test_kinds_data`);
what stays here are tables of values, the example hosts and behaviour.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import (
    TUNED,
    UNTUNED,
    booted_by_systemd_boot,
    by_id,
    notes,
    plan_json,
    profile,
    run_tune,
    write,
)
from small_host import tree

from reconciler.errors import ExitCode
from reconciler.facts import cmdline as fmt
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import load_profile

GRUB = """\
GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX=""
#GRUB_CMDLINE_LINUX="amd_pstate=disable"
"""
RUNNING = "BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=/dev/mapper/pve-root ro quiet\n"
APPEND = 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT {}"\n'
WANT_PSTATE = "name: t\ncmdline:\n  set: {amd_pstate: active}\n"


def grub_host(root: Path, running: str = RUNNING, **dropins: str) -> Path:
    write(root, "/proc/cmdline", running)
    write(root, "/etc/default/grub", GRUB)
    for name, text in dropins.items():
        write(root, f"/etc/default/grub.d/{name}", text)
    return root


def configured(root: Path) -> str | None:
    boot = fmt.boot_config(SnapshotHost(root).fetch(fmt.request()))
    if boot is None:
        return None
    return f"{boot.tool}: {boot.cmdline if boot.unknown is None else boot.unknown}"


def test_grub_dropins_in_order_expanding_the_default(tmp_path: Path) -> None:
    root = grub_host(
        tmp_path / "host",
        **{
            "10-first.cfg": 'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} iommu=pt"\n',
            "90-last.cfg": "export " + APPEND.format("'a=b c'"),
            "50-middle.cfg": "if true; then\n  GRUB_CMDLINE_LINUX=amd_pstate=active # why\nfi\n",
            "99-ignored.cfg.dpkg-old": 'GRUB_CMDLINE_LINUX_DEFAULT="broken"\n',
        },
    )
    assert configured(root) == "grub: amd_pstate=active quiet iommu=pt 'a=b c'"


def test_grub_command_substitution_makes_the_line_unknown_and_apply_refuses(
    tmp_path: Path,
) -> None:
    """The old reader skipped such a line and compared with `quiet` alone; the next boot's
    line is not known, so plan says where and why, and apply writes nothing (exit 8)."""
    root = grub_host(
        tmp_path / "host",
        **{"50-x.cfg": 'GRUB_CMDLINE_LINUX_DEFAULT="$(cat /etc/extra) quiet"\n'},
    )
    where = "/etc/default/grub.d/50-x.cfg:1: a command substitution $(...) is not evaluated"
    assert configured(root) == f"grub: {where}"
    plan = plan_json(tmp_path, root, WANT_PSTATE)
    (note,) = [n for n in notes(plan) if "cannot be known" in n]
    assert f"({where})" in note and "GRUB_CMDLINE_LINUX_DEFAULT" in note
    before = tree(root)
    result = run_tune(
        "apply", profile(tmp_path, WANT_PSTATE), "--reboot-phase", "--root", root, "-y"
    )
    assert result.code == ExitCode.BOOT_CONFIG_UNKNOWN, result.err
    assert where in result.err and "writes no boot configuration from a guess" in result.err
    assert tree(root) == before


def test_proxmox_boot_tool_reads_etc_kernel_cmdline(tmp_path: Path) -> None:
    root = grub_host(tmp_path / "host")
    write(root, "/etc/kernel/proxmox-boot-uuids", "1234-ABCD\n")
    booted_by_systemd_boot(root)
    write(root, "/etc/kernel/cmdline", "root=ZFS=rpool/ROOT/pve-1 boot=zfs amd_pstate=active\n")
    assert (
        configured(root)
        == "proxmox-boot-tool: root=ZFS=rpool/ROOT/pve-1 boot=zfs amd_pstate=active"
    )
    plan = plan_json(tmp_path, root, WANT_PSTATE)
    assert plan["code"] == 0
    assert [p["id"] for p in plan["pending"]] == ["cmdline:amd_pstate"]


def test_plain_etc_kernel_cmdline_without_grub(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/proc/cmdline", RUNNING)
    write(root, "/etc/kernel/cmdline", "root=/dev/sda1 amd_pstate=passive\n")
    assert configured(root) == "kernel-cmdline: root=/dev/sda1 amd_pstate=passive"


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ("amd_pstate=passive amd_pstate=active", "active"),  # the last one wins
        ("amd_pstate=active amd_pstate=passive", "passive"),
        ('"amd_pstate=active"', "active"),
        ('amd_pstate="active"', "active"),
        ("amd-pstate=active", "active"),  # - and _ are one in parameter names
        ("quiet -- amd_pstate=active", None),  # after -- it is init's
        ("amd_pstate", ""),  # a bare flag is present, with an empty value
        ("amd_pstate=", ""),
        ("", None),
    ],
)
def test_running_cmdline_parsing(tmp_path: Path, line: str, value: str | None) -> None:
    assert (fmt.parameters(line) or {}).get("amd_pstate") == value


def test_quoted_value_with_spaces() -> None:
    assert fmt.parameters('dyndbg="file foo.c +p" quiet') == {
        "dyndbg": "file foo.c +p",
        "quiet": "",
    }


def test_example_hosts(tmp_path: Path) -> None:
    text = "name: t\ncmdline:\n  set: {amd_pstate: active, processor.max_cstate: 1}\n"
    assert sorted(by_id(plan_json(tmp_path, UNTUNED, text))) == [
        "cmdline:amd_pstate",
        "cmdline:processor.max_cstate",
    ]
    assert plan_json(tmp_path, TUNED, text)["code"] == 0


# The drop-in of issue 17's incident: continued over several lines, appending with ${VAR:+...}.
CONTINUED = """\
GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT:+$GRUB_CMDLINE_LINUX_DEFAULT }\\
scsi_mod.use_blk_mq=Y vsyscall=none \\
    systemd.unified_cgroup_hierarchy=1 systemd.show_status=auto nomodeset"
"""


def sh_cmdline(root: Path) -> list[str]:
    """The line /bin/sh computes from the snapshot's GRUB files, sourced as grub-mkconfig does."""
    script = (
        "set -e; . ./etc/default/grub; for f in ./etc/default/grub.d/*.cfg; do "
        'if [ -e "$f" ]; then . "$f"; fi; done >/dev/null 2>&1; '
        'printf "%s %s" "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"'
    )
    done = subprocess.run(
        ["/bin/sh", "-c", script], cwd=root, capture_output=True, text=True, env={}, check=True
    )
    return done.stdout.split()


@pytest.mark.parametrize(
    "profile_text",
    [
        "name: t\ncmdline:\n  remove: [nomodeset]\n",
        "name: t\ncmdline:\n  remove: [quiet]\n",
        "name: t\ncmdline:\n  set: {vsyscall: emulate}\n  remove: [nomodeset]\n",
        "name: t\ncmdline:\n  set: {amd_pstate: active}\n",
    ],
)
def test_a_continued_drop_in_keeps_every_parameter_not_asked_to_change(
    tmp_path: Path, profile_text: str
) -> None:
    """Issue 17, item 2: the old reader dropped the continued assignment, and a remove wrote
    GRUB_CMDLINE_LINUX_DEFAULT whole from `quiet` alone, so the next boot lost
    scsi_mod.use_blk_mq=Y, vsyscall=none and the systemd.* options. /bin/sh is the judge."""
    root = grub_host(tmp_path / "host", **{"50-host.cfg": CONTINUED})
    before = sh_cmdline(root)
    assert "vsyscall=none" in before and "nomodeset" in before
    result = run_tune(
        "apply", profile(tmp_path, profile_text), "--reboot-phase", "--root", root, "-y"
    )
    assert result.code == 0, result.err
    after = sh_cmdline(root)
    loaded = load_profile(str(profile(tmp_path, profile_text))).profile.cmdline
    assert loaded is not None
    removed = {item.value for item in loaded.remove}
    changed = {fmt.canonical(n) for n in loaded.set}
    kept = [w for w in before if w not in removed and fmt.canonical(w.split("=")[0]) not in changed]
    assert [w for w in after if w in kept] == kept  # every one, in its order
    assert not removed & set(after)
    for name, item in loaded.set.items():
        assert fmt.word(name, str(item.value)) in after
    assert plan_json(tmp_path, root, profile_text)["changes"] == []


def test_a_drop_in_after_tunes_that_sets_the_line_whole_refuses_the_apply(tmp_path: Path) -> None:
    """99-override.cfg sorts after 90-tune.cfg and sets the variable whole: tune's drop-in
    would change nothing at boot, so apply says which line GRUB would pass and writes nothing."""
    root = grub_host(
        tmp_path / "host", **{"99-override.cfg": 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'}
    )
    before = tree(root)
    result = run_tune(
        "apply", profile(tmp_path, WANT_PSTATE), "--reboot-phase", "--root", root, "-y"
    )
    assert result.code == ExitCode.BOOT_CONFIG_UNKNOWN, result.err
    assert "GRUB would pass 'quiet' rather than 'quiet amd_pstate=active'" in result.err
    assert tree(root) == before


@pytest.mark.parametrize(
    ("efi", "tool", "line"),
    [
        (None, "proxmox-boot-tool-grub", "grub: quiet"),  # legacy BIOS: GRUB
        ("BootCurrent-8be4df61-93ca-11d2-aa0d-00e098032b8c", "proxmox-boot-tool-grub", "quiet"),
        ("LoaderInfo-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f", "proxmox-boot-tool", "boot=zfs"),
    ],
)
def test_proxmox_boot_tool_mode_as_its_hook_decides(
    tmp_path: Path, efi: str | None, tool: str, line: str
) -> None:
    """zz-proxmox-boot runs update-grub on the ESPs after a legacy-BIOS boot or where they hold
    GRUB; only systemd-boot ESPs take /etc/kernel/cmdline."""
    root = grub_host(tmp_path / "host")
    write(root, "/etc/kernel/proxmox-boot-uuids", "1234-ABCD\n")
    write(root, "/etc/kernel/cmdline", "root=ZFS=rpool/ROOT/pve-1 boot=zfs\n")
    if efi is not None:
        write(root, f"/sys/firmware/efi/efivars/{efi}", b"\x06\x00\x00\x00")
    found = configured(root)
    assert found is not None and found.startswith(f"{tool}: ")
    assert found.endswith(line.split(": ")[-1])


def test_proxmox_on_uefi_without_efi_variables_is_unknown(tmp_path: Path) -> None:
    root = grub_host(tmp_path / "host")
    write(root, "/etc/kernel/proxmox-boot-uuids", "1234-ABCD\n")
    (root / "sys/firmware/efi/efivars").mkdir(parents=True)
    found = configured(root)
    assert found is not None and "lists no variable" in found
    result = run_tune(
        "apply", profile(tmp_path, WANT_PSTATE), "--reboot-phase", "--root", root, "-y"
    )
    assert result.code == ExitCode.BOOT_CONFIG_UNKNOWN, result.err
