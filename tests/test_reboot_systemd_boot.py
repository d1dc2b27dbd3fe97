"""`tune apply --reboot` on systemd-boot snapshot hosts (Proxmox's proxmox-boot-tool, and
kernel-install): fakes of bootctl and the refresh tools that record their argv and edit the
snapshot as the real tools would (the LoaderEntryOneShot EFI variable is a file of the
snapshot; a refresh rewrites the entries' `options` from /etc/kernel/cmdline), a boot simulated
the way systemd-boot picks its entry, then verification with promotion or rollback."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import booted_by_systemd_boot, write
from small_host import tree
from test_reboot import BOOT_ID_BEFORE, apply_with_reboot

from reconciler.apply.engines import PythonEngine
from reconciler.apply.pending import read_pending
from reconciler.boot.reboot import conclude
from reconciler.core.errors import ApplyFailed
from reconciler.facts import cmdline as fmt
from reconciler.hosts.base import Completed
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.observe import BOOT_ID

ONESHOT = "/sys/firmware/efi/efivars/LoaderEntryOneShot-4a67b082-0a4c-41cf-b6c7-440b298c4f8f"
RELEASE = "6.8.12-4-pve"
OLD_LINE = "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet nomodeset"
NEW_LINE = "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet processor.max_cstate=1 amd_pstate=active"


def entry(title: str, release: str, line: str) -> str:
    return (
        f"title    {title}\nversion  {release}\n"
        f"linux    /EFI/proxmox/{release}/vmlinuz-{release}\n"
        f"initrd   /EFI/proxmox/{release}/initrd.img-{release}\noptions  {line}\n"
    )


class BootTools(SnapshotHost):
    """bootctl set-oneshot writes (or, for "", removes) the EFI variable; proxmox-boot-tool
    refresh and kernel-install rewrite every entry's options from /etc/kernel/cmdline, as
    both do for the entries they own (tune's try entry is not theirs)."""

    TOOLS = ("bootctl", "proxmox-boot-tool", "kernel-install")

    def __init__(self, root: Path, esp: str, fail: str | None = None) -> None:
        super().__init__(root, commands=self.TOOLS)
        self.esp = esp
        self.calls: list[tuple[str, ...]] = []
        self.fail = fail

    def run(self, argv: Sequence[str]) -> Completed:
        self.calls.append(tuple(argv))
        if argv[0] == self.fail:
            return Completed(1, "", f"{argv[0]}: Failed to write EFI variable")
        if argv[0] == "bootctl":
            assert argv[1] == "set-oneshot"
            if argv[2]:
                assert (self.root / self.esp.lstrip("/") / "entries" / argv[2]).exists()
                self.put_file(ONESHOT, argv[2].encode())
            else:
                self.delete_file(ONESHOT)
            return Completed(0)
        line = (self.read_file(fmt.KERNEL_CMDLINE) or b"").decode().strip()
        for path in (self.root / self.esp.lstrip("/") / "entries").glob("*.conf"):
            if path.name != fmt.TRY_CONF:
                text = fmt.edit_entry(path.read_text(), {}, set())
                lines = [s for s in text.splitlines() if not s.startswith("options")]
                path.write_text("\n".join(lines) + f"\noptions  {line}\n")
        return Completed(0)


def boot(host: BootTools, n: int) -> str:
    """systemd-boot boots the one-shot entry once (the variable is spent), else the entry
    loader.conf's default matches, else the first; returns the line it passed."""
    loader = host.root / host.esp.lstrip("/")
    entries = sorted((loader / "entries").glob("*.conf"))
    oneshot = host.root / ONESHOT.lstrip("/")
    chosen = oneshot.read_text() if oneshot.exists() else ""
    oneshot.unlink(missing_ok=True)
    conf = loader / "loader.conf"
    default = conf.read_text().split()[1] if conf.exists() else "*"
    picked = [p for p in entries if p.name == chosen] or [
        p for p in entries if fnmatch.fnmatchcase(p.name, default) and p.name != fmt.TRY_CONF
    ]
    line = fmt.entry_options(picked[0].read_text())
    write(host.root, fmt.PROC_CMDLINE, f"initrd=\\EFI\\proxmox\\initrd {line}\n")
    write(host.root, BOOT_ID, f"00000000-0000-4000-8000-00000000000{n}\n")
    return line


def proxmox_host(tmp_path: Path, fail: str | None = None) -> BootTools:
    """Proxmox on ZFS: proxmox-boot-tool, its entries on the ESP at /boot/efi, and loader.conf
    naming the default by a glob, an older kernel's entry sorting first."""
    root = tmp_path / "host"
    esp = "/boot/efi/loader"
    write(root, fmt.KERNEL_CMDLINE, OLD_LINE + "\n")
    write(root, fmt.PROXMOX_BOOT_UUIDS, "ABCD-1234\n")
    booted_by_systemd_boot(root)
    write(root, f"{esp}/loader.conf", "default proxmox-6.8.12-4*\ntimeout 3\n")
    write(root, f"{esp}/entries/proxmox-6.5.13-1-pve.conf", entry("old", "6.5.13-1-pve", OLD_LINE))
    write(root, f"{esp}/entries/proxmox-{RELEASE}.conf", entry("Proxmox VE", RELEASE, OLD_LINE))
    write(root, fmt.OSRELEASE, RELEASE + "\n")
    write(root, fmt.PROC_CMDLINE, f"initrd=\\EFI\\proxmox\\initrd {OLD_LINE}\n")
    write(root, BOOT_ID, BOOT_ID_BEFORE + "\n")
    return BootTools(root, esp, fail)


def test_proxmox_boots_the_copy_once_then_promotes_through_proxmox_boot_tool(
    tmp_path: Path,
) -> None:
    host = proxmox_host(tmp_path)
    root = host.root
    before = tree(root / "etc") | tree(root / "boot")
    _, arranged, pending = apply_with_reboot(host, tmp_path)  # type: ignore[arg-type]
    assert arranged.try_once == "bootctl"
    assert "proxmox-6.8.12-4-pve.conf" in arranged.why
    # Only the try entry and the one-shot variable: /etc/kernel/cmdline and the default wait.
    assert host.calls == [("bootctl", "set-oneshot", "tune-try.conf")]
    copy = entry("Proxmox VE", RELEASE, NEW_LINE).replace(
        "title    Proxmox VE", "title tune: try once"
    )
    copy = copy.replace("options  ", "options ")
    assert tree(root / "etc") | tree(root / "boot") == before | {
        "efi/loader/entries/tune-try.conf": copy.encode()
    }
    assert (root / ONESHOT.lstrip("/")).read_text() == "tune-try.conf"

    assert boot(host, 2) == NEW_LINE
    host.calls.clear()
    verdict = conclude(PythonEngine(host), pending)
    assert verdict.failed == []
    assert "/proc/cmdline has amd_pstate=active" in verdict.held
    assert host.calls == [("proxmox-boot-tool", "refresh")] * 3
    assert not (root / "boot/efi/loader/entries/tune-try.conf").exists()
    assert (root / fmt.KERNEL_CMDLINE.lstrip("/")).read_text() == NEW_LINE + "\n"
    assert read_pending(host) is None
    assert boot(host, 3) == NEW_LINE  # the default entry, refreshed

    # One rollback of the run undoes the promotion and the try entry, byte for byte.
    from reconciler.apply.python_engine import rollback

    rollback(host)
    host.run(["proxmox-boot-tool", "refresh"])  # entries as the restored cmdline makes them
    assert tree(root / "etc") | tree(root / "boot") == before


def test_a_failed_verification_removes_the_try_entry_and_changes_nothing_else(
    tmp_path: Path,
) -> None:
    host = proxmox_host(tmp_path)
    root = host.root
    before = tree(root / "etc") | tree(root / "boot")
    _, _, pending = apply_with_reboot(host, tmp_path)  # type: ignore[arg-type]
    try_conf = root / "boot/efi/loader/entries/tune-try.conf"
    try_conf.write_text(try_conf.read_text().replace(" amd_pstate=active", ""))
    boot(host, 2)
    host.calls.clear()
    with pytest.raises(ApplyFailed) as caught:
        conclude(PythonEngine(host), pending)
    assert "/proc/cmdline has nothing, not amd_pstate=active" in str(caught.value)
    assert host.calls == [("bootctl", "set-oneshot", "")]
    assert tree(root / "etc") | tree(root / "boot") == before
    assert read_pending(host) is None
    assert boot(host, 3) == OLD_LINE


def test_a_failed_set_oneshot_rolls_the_try_entry_back_before_any_reboot(tmp_path: Path) -> None:
    host = proxmox_host(tmp_path, fail="bootctl")
    before = tree(host.root)
    with pytest.raises(ApplyFailed):
        apply_with_reboot(host, tmp_path)  # type: ignore[arg-type]
    after = tree(host.root)
    assert {p: d for p, d in after.items() if not p.startswith("var/lib/tune")} == before


def test_kernel_install_host_copies_the_running_kernels_entry(tmp_path: Path) -> None:
    """No loader.conf default: the entry whose kernel is running is the one copied."""
    root = tmp_path / "host"
    esp = "/efi/loader"
    write(root, fmt.KERNEL_CMDLINE, OLD_LINE + "\n")
    write(root, f"{esp}/entries/a-6.9.0-1-amd64.conf", entry("newer", "6.9.0-1-amd64", OLD_LINE))
    write(root, f"{esp}/entries/b-{RELEASE}.conf", entry("running", RELEASE, OLD_LINE))
    write(root, fmt.OSRELEASE, RELEASE + "\n")
    write(root, fmt.PROC_CMDLINE, OLD_LINE + "\n")
    write(root, BOOT_ID, BOOT_ID_BEFORE + "\n")
    host = BootTools(root, esp)
    _, arranged, pending = apply_with_reboot(host, tmp_path)  # type: ignore[arg-type]
    assert arranged.try_once == "bootctl"
    text = (root / "efi/loader/entries/tune-try.conf").read_text()
    assert f"linux    /EFI/proxmox/{RELEASE}/vmlinuz-{RELEASE}\n" in text
    assert text.endswith(f"options {NEW_LINE}\n")
    assert boot(host, 2) == NEW_LINE
    host.calls.clear()
    conclude(PythonEngine(host), pending)
    assert [c[0] for c in host.calls] == ["kernel-install"] * 3


def test_without_a_loader_entry_the_reboot_is_not_try_once(tmp_path: Path) -> None:
    host = proxmox_host(tmp_path)
    for path in (host.root / "boot/efi/loader/entries").glob("*.conf"):
        path.unlink()
    from conftest import profile
    from test_reboot import PROFILE

    from reconciler.apply.tryonce import arrange
    from reconciler.apply.work import prepare
    from reconciler.profile.load import load_profile

    loaded = load_profile(str(profile(tmp_path, PROFILE)))
    work = prepare(host, loaded, runtime_only=False, reboot_phase=True)
    arranged = arrange(work.steps, work.observation.files)
    assert arranged.try_once is None
    assert arranged.why.startswith("not try-once: proxmox-boot-tool regenerates every boot entry")
    assert "/boot/efi/loader/entries" in arranged.why
