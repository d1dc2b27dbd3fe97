"""The command line kernel-install gives a new entry, read as its own loader-entry plugin reads
it (tests/corpus/kernel-install, SOURCE.md says where from): /etc/kernel/cmdline, its lines
joined; without it /usr/lib/kernel/cmdline; without either, the running line less BOOT_IMAGE=
and initrd=. The plugin's own lines, run with /bin/sh, are the oracle; tune writes
/etc/kernel/cmdline starting from that line, so nothing the next entry would carry is lost."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import PROJECT, booted_by_systemd_boot, profile, run_tune, write
from small_host import whole_tree

from reconciler.core.errors import ExitCode
from reconciler.facts import cmdline as fmt
from reconciler.facts.kernel import OSRELEASE
from reconciler.hosts.directory import SnapshotHost

PLUGIN = PROJECT / "tests/corpus/kernel-install/90-loaderentry.install.in"
RELEASE = "6.12.8-200.fc41.x86_64"
RUNNING = (
    f"BOOT_IMAGE=/vmlinuz-{RELEASE} initrd=\\EFI\\fedora\\initrd root=UUID=6b3e6cbb ro "
    "rootflags=subvol=root rhgb quiet\n"
)
WANT_PSTATE = "name: t\ncmdline:\n  set: {amd_pstate: active}\n"


def kernel_install_words(root: Path) -> list[str]:
    """BOOT_OPTIONS as the plugin computes it, its paths moved under `root`."""
    text = PLUGIN.read_text()
    start = text.index('if [ -n "$KERNEL_INSTALL_CONF_ROOT" ]')
    end = text.index('BOOT_OPTIONS="${BOOT_OPTIONS% }"')
    part = text[start:end] + 'BOOT_OPTIONS="${BOOT_OPTIONS% }"\n'
    part = re.sub(
        r"(?<=[ <])(/etc/kernel/cmdline|/usr/lib/kernel/cmdline|/proc/cmdline)",
        lambda m: f"{root}{m.group(1)}",
        part,
    )
    done = subprocess.run(
        ["/bin/sh", "-c", part + 'printf %s "$BOOT_OPTIONS"'],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=True,
    )
    return done.stdout.split(" ")


def systemd_boot_host(root: Path, **files: str) -> Path:
    """A host without GRUB whose kernels kernel-install puts in systemd-boot's entries."""
    write(root, fmt.PROC_CMDLINE, RUNNING)
    write(root, OSRELEASE, RELEASE + "\n")
    write(
        root,
        f"/boot/efi/loader/entries/0123456789abcdef-{RELEASE}.conf",
        f"title Fedora\nversion {RELEASE}\nlinux /vmlinuz\noptions root=UUID=6b3e6cbb ro\n",
    )
    for path, text in files.items():
        write(root, path, text)
    return root


CASES = {
    "one-line": {"/etc/kernel/cmdline": "root=UUID=6b3e6cbb ro quiet\n"},
    "several-lines": {
        "/etc/kernel/cmdline": "root=UUID=6b3e6cbb ro\n\tquiet  splash\n\nnomodeset\n"
    },
    "usr-lib": {"/usr/lib/kernel/cmdline": "root=UUID=6b3e6cbb ro\nrhgb\n"},
    "running": {},
}


@pytest.mark.parametrize("files", CASES.values(), ids=CASES.keys())
def test_the_line_is_what_kernel_install_takes(tmp_path: Path, files: dict[str, str]) -> None:
    root = systemd_boot_host(tmp_path / "host", **files)
    boot = fmt.boot_config(SnapshotHost(root).fetch(fmt.request()))
    assert boot is not None and boot.unknown is None, boot
    assert boot.tool == "kernel-cmdline"
    assert fmt.split(boot.cmdline or "") == kernel_install_words(root)


@pytest.mark.parametrize("files", CASES.values(), ids=CASES.keys())
def test_apply_writes_etc_kernel_cmdline_from_that_line_and_rollback_restores(
    tmp_path: Path, files: dict[str, str]
) -> None:
    """Without /etc/kernel/cmdline the old reader found no boot configuration and apply
    refused; with several lines, one line is written with every word of them."""
    root = systemd_boot_host(tmp_path / "host", **files)
    before = whole_tree(root)
    was = kernel_install_words(root)
    result = run_tune(
        "apply", profile(tmp_path, WANT_PSTATE), "--reboot-phase", "--root", root, "-y"
    )
    assert result.code == 0, result.err
    assert kernel_install_words(root) == [*was, "amd_pstate=active"]
    assert (root / "etc/kernel/cmdline").read_text().count("\n") == 1
    assert run_tune("rollback", "--root", root, "-y").code == 0
    assert whole_tree(root) == before


# --- proxmox-boot-tool (its systemd-boot mode) -------------------------------------------------

PVE = PROJECT / "tests/corpus/proxmox-boot"
PVE_RUNNING = (
    "initrd=\\EFI\\proxmox\\6.8.12-4-pve\\initrd.img-6.8.12-4-pve root=ZFS=rpool/ROOT/pve-1 "
    "boot=zfs quiet\n"
)


def proxmox_hook_line(root: Path) -> str | None:
    """CMDLINE as zz-proxmox-boot computes it (None where the hook stops), its paths moved
    under `root`."""
    head = (PVE / "zz-proxmox-boot.head").read_text()
    start = head.index("\tif [ -f /etc/kernel/cmdline ]; then")
    end = head.index("\n\tfi\n", start) + len("\n\tfi\n")
    part = re.sub(
        r"(?<=[ <])(/etc/kernel/cmdline|/proc/cmdline)",
        lambda m: f"{root}{m.group(1)}",
        head[start:end],
    )
    script = (PVE / "functions.excerpt").read_text() + part + 'printf %s "$CMDLINE"\n'
    done = subprocess.run(
        ["/bin/sh", "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    return done.stdout if done.returncode == 0 else None


def proxmox_host(root: Path, cmdline: str | None) -> Path:
    write(root, fmt.PROC_CMDLINE, PVE_RUNNING)
    write(root, OSRELEASE, "6.8.12-4-pve\n")
    write(root, fmt.PROXMOX_BOOT_UUIDS, "1234-ABCD\n")
    booted_by_systemd_boot(root)
    if cmdline is not None:
        write(root, fmt.KERNEL_CMDLINE, cmdline)
    return root


PVE_CASES = {
    "one-line": "root=ZFS=rpool/ROOT/pve-1 boot=zfs\n",
    "no-newline": "root=ZFS=rpool/ROOT/pve-1 boot=zfs",
    "several-lines": "root=ZFS=rpool/ROOT/pve-1 boot=zfs\nquiet nomodeset\n",
    "missing": None,
}


@pytest.mark.parametrize("cmdline", PVE_CASES.values(), ids=PVE_CASES.keys())
def test_proxmox_boot_tool_line_is_what_its_hook_takes_and_apply_starts_from_it(
    tmp_path: Path, cmdline: str | None
) -> None:
    """Without /etc/kernel/cmdline the old reader took the line as empty, and apply wrote a
    file of tune's parameters alone: no root=, an unbootable entry. The hook reads the first
    line only, so the others stay as they were."""
    root = proxmox_host(tmp_path / "host", cmdline)
    hook = proxmox_hook_line(root)
    assert hook is not None
    boot = fmt.boot_config(SnapshotHost(root).fetch(fmt.request()))
    assert boot is not None and (boot.tool, boot.cmdline) == ("proxmox-boot-tool", hook)
    before = whole_tree(root)
    result = run_tune(
        "apply", profile(tmp_path, WANT_PSTATE), "--reboot-phase", "--root", root, "-y"
    )
    assert result.code == 0, result.err
    assert proxmox_hook_line(root) == f"{hook} amd_pstate=active"
    rest = (cmdline or "").partition("\n")[2]
    assert (root / "etc/kernel/cmdline").read_text().partition("\n")[2] == rest
    assert run_tune("rollback", "--root", root, "-y").code == 0
    assert whole_tree(root) == before


def test_proxmox_boot_tool_refuses_at_plan_where_its_hook_stops(tmp_path: Path) -> None:
    """A first line without root=: `proxmox-boot-tool refresh` stops and writes no entry, so
    what the next boot passes is not decided; plan says so with the file and the line."""
    root = proxmox_host(tmp_path / "host", "quiet\nroot=ZFS=rpool/ROOT/pve-1 boot=zfs\n")
    assert proxmox_hook_line(root) is None
    planned = run_tune("plan", profile(tmp_path, WANT_PSTATE), "--root", root, "--no-persist")
    assert planned.code == ExitCode.BOOT_CONFIG_UNKNOWN, planned.err
    assert "/etc/kernel/cmdline:1: the first line has no root=" in planned.err
