"""cmdline: what the next boot passes (the boot tool's configuration) against the running
kernel's command line.

Cases of a host's files in and a plan out are data, in tests/kinds/cmdline/ (`test_kinds_data`);
what stays here are tables of values, the example hosts and behaviour.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TUNED, UNTUNED, by_id, plan_json, write

from reconciler.facts import cmdline as fmt
from reconciler.hosts.files import Files

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
    files = Files(
        {"/" + str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    )
    boot = fmt.boot_config(files)
    return None if boot is None else f"{boot.tool}: {boot.cmdline}"


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


def test_grub_assignment_with_command_substitution_is_not_applied(tmp_path: Path) -> None:
    root = grub_host(
        tmp_path / "host",
        **{"50-x.cfg": 'GRUB_CMDLINE_LINUX_DEFAULT="$(cat /etc/extra) quiet"\n'},
    )
    assert configured(root) == "grub: quiet"


def test_proxmox_boot_tool_reads_etc_kernel_cmdline(tmp_path: Path) -> None:
    root = grub_host(tmp_path / "host")
    write(root, "/etc/kernel/proxmox-boot-uuids", "1234-ABCD\n")
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
    assert fmt.parameters('dyndbg="file foo.c +p" quiet') == fmt.Parameters(
        {"dyndbg": ("file foo.c +p",), "quiet": ("",)}
    )


def test_example_hosts(tmp_path: Path) -> None:
    text = "name: t\ncmdline:\n  set: {amd_pstate: active, processor.max_cstate: 1}\n"
    assert sorted(by_id(plan_json(tmp_path, UNTUNED, text))) == [
        "cmdline:amd_pstate",
        "cmdline:processor.max_cstate",
    ]
    assert plan_json(tmp_path, TUNED, text)["code"] == 0
