"""tune's cmdline steps on grubby hosts against the real grubby (tests/grubby_oracle.py): the
calls a plan makes, run by the real script on a copy of the host, leave the same files as
tune's apply (the emulation) leaves, and each step's read-back is what the script wrote."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import profile, run_tune, write
from grubby_oracle import MISSING, grubby, tree
from small_host import tree as small_tree

from reconciler.apply.work import prepare
from reconciler.core.errors import ExitCode
from reconciler.facts import cmdline as fmt
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import load_profile
from reconciler.steps.ops import Command

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

MACHINE = "0123456789abcdef0123456789abcdef"
NEW, OLD = "5.14.0-503.11.1.el9_5.x86_64", "5.14.0-427.13.1.el9_4.x86_64"
ROOTFS = "root=/dev/mapper/rhel-root ro rd.lvm.lv=rhel/root"


def entry_path(version: str) -> str:
    return f"/boot/loader/entries/{MACHINE}-{version}.conf"


def rhel9(root: Path, new: str, old: str | None = None, saved: str | None = None) -> Path:
    """Two kernels' entries (the newest first in grubby's order), /etc/default/grub, and
    /etc/kernel without a cmdline yet."""
    write(root, fmt.REDHAT_RELEASE, "Red Hat Enterprise Linux release 9.5 (Plow)\n")
    write(root, "/etc/machine-id", MACHINE + "\n")
    write(root, "/etc/default/grub", f'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="{new}"\n')
    (root / "etc/kernel").mkdir(parents=True, exist_ok=True)
    for version, options in ((NEW, new), (OLD, old or new)):
        write(
            root,
            entry_path(version),
            f"title Red Hat Enterprise Linux ({version}) 9.5 (Plow)\nversion {version}\n"
            f"linux /vmlinuz-{version}\ninitrd /initramfs-{version}.img\noptions {options}\n"
            "grub_users $grub_users\ngrub_arg --unrestricted\ngrub_class rhel\n",
        )
    block = "# GRUB Environment Block\n" + (f"saved_entry={saved}\n" if saved else "")
    write(root, fmt.GRUBENV, block + "#" * (1024 - len(block)))
    default = old if saved and old else new
    write(root, fmt.PROC_CMDLINE, f"BOOT_IMAGE=(hd0,gpt2)/vmlinuz {default}\n")
    return root


def calls(root: Path, text: str) -> list[tuple[str, ...]]:
    """The grubby calls of the plan's steps, in order; and the step's read-back checked
    against the real script as it goes, on a copy."""
    loaded = load_profile(str(profile(root.parent, text)))
    work = prepare(SnapshotHost(root), loaded, runtime_only=False, reboot_phase=True)
    copy = root.parent / "real"
    shutil.copytree(root, copy, symlinks=True)
    found = []
    for step in work.steps:
        (command,) = [op for op in step.do if isinstance(op, Command)]
        assert command.argv[0] == "grubby"
        done = grubby(copy, *command.argv[1:])
        assert done.returncode == 0, done.stderr
        read = copy / step.probe.path.lstrip("/")
        assert read.read_text() == step.expect, step.id
        found.append(command.argv)
    return found


def boot_files(root: Path) -> dict[str, bytes]:
    """What grubby reads and writes: /boot and /etc (tune's journal and lock lie elsewhere)."""
    return {p: t for p, t in tree(root).items() if p.startswith(("/boot/", "/etc/"))}


CASES = {
    "a parameter set twice, the last counts": (
        f"{ROOTFS} processor.max_cstate=5 quiet processor.max_cstate=9",
        "processor.max_cstate: 1",
        [("grubby", "--update-kernel=ALL", "--args=processor.max_cstate=1")],
        f"{ROOTFS} quiet processor.max_cstate=1",
    ),
    "iommu=pt beside amd_iommu=on": (
        f"{ROOTFS} amd_iommu=on iommu=soft quiet",
        "iommu: [pt]",
        [("grubby", "--update-kernel=ALL", "--args=iommu=pt")],
        f"{ROOTFS} amd_iommu=on quiet iommu=pt",
    ),
    "two bare quiet side by side": (
        f"{ROOTFS} quiet quiet rhgb",
        "{}",
        [("grubby", "--update-kernel=ALL", "--remove-args=quiet quiet")],
        f"{ROOTFS} rhgb",
    ),
    "one more console": (
        f"{ROOTFS} console=tty0 console=ttyS0,115200n8 quiet",
        "console: hvc0",
        [
            (
                "grubby",
                "--update-kernel=ALL",
                "--args=console=tty0 console=ttyS0,115200n8 console=hvc0",
            )
        ],
        f"{ROOTFS} quiet console=tty0 console=ttyS0,115200n8 console=hvc0",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_apply_leaves_what_the_real_grubby_leaves_and_rollback_undoes_it(
    tmp_path: Path, case: str
) -> None:
    options, wanted, argv, after = CASES[case]
    text = "name: t\ncmdline:\n  " + (
        "remove: [quiet]\n" if wanted == "{}" else f"set: {{{wanted}}}\n"
    )
    root = rhel9(tmp_path / "host", options)
    before = small_tree(root)
    assert calls(root, text) == argv
    result = run_tune("apply", profile(tmp_path, text), "--reboot-phase", "--root", root, "-y")
    assert result.code == 0, result.err
    mine, real = boot_files(root), boot_files(tmp_path / "real")
    assert mine == real
    for path in (entry_path(NEW), entry_path(OLD)):
        assert fmt.entry_options(mine[path].decode()) == after
    assert mine["/etc/kernel/cmdline"].decode() == after + "\n"
    result = run_tune("rollback", "--root", root, "-y")
    assert result.code == 0, result.err
    assert small_tree(root) == before


def test_the_default_entry_is_the_one_saved_entry_names(tmp_path: Path) -> None:
    """grubby's (and GRUB's) default is the older kernel here: its line lacks nosmt, so the
    change is planned although the newest entry has it; and grubby then edits both."""
    root = rhel9(tmp_path / "host", f"{ROOTFS} nosmt", f"{ROOTFS}", saved=f"{MACHINE}-{OLD}")
    text = "name: t\ncmdline:\n  set: {nosmt: }\n"
    assert calls(root, text) == [("grubby", "--update-kernel=ALL", "--args=nosmt")]
    root2 = rhel9(tmp_path / "host2", f"{ROOTFS}", f"{ROOTFS} nosmt", saved=f"{MACHINE}-{OLD}")
    loaded = load_profile(str(profile(tmp_path, text)))
    work = prepare(SnapshotHost(root2), loaded, runtime_only=False, reboot_phase=True)
    assert not work.steps


def test_a_word_grubby_would_expand_as_a_pattern_is_refused(tmp_path: Path) -> None:
    """dracut's `ip=` takes an IPv6 address in brackets; grubby's unquoted `echo $args` makes
    that word a pathname pattern, matched against the directory grubby runs in. tune cannot
    know that directory: it names the file and the word, and writes nothing."""
    ip = "ip=[2001:db8::2]::[2001:db8::1]:64:node1:eth0:none"
    root = rhel9(tmp_path / "host", f"{ROOTFS} {ip} quiet")
    before = small_tree(root)
    text = "name: t\ncmdline:\n  set: {nosmt: }\n"
    result = run_tune("apply", profile(tmp_path, text), "--reboot-phase", "--root", root, "-y")
    assert result.code == ExitCode.HOST_ERROR, result.err
    assert "cmdline:nosmt cannot be made with grubby" in result.err
    assert f"/etc/default/grub: {ip!r} holds a pathname pattern character" in result.err
    assert small_tree(root) == before


def test_an_empty_grub_cmdline_linux_is_left_alone(tmp_path: Path) -> None:
    """grubby rewrites GRUB_CMDLINE_LINUX only where it holds something: an empty one stays
    empty, and the call is still the one that makes the entries right."""
    root = rhel9(tmp_path / "host", f"{ROOTFS} quiet")
    write(root, "/etc/default/grub", 'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX=""\n')
    text = "name: t\ncmdline:\n  set: {nosmt: }\n"
    assert calls(root, text) == [("grubby", "--update-kernel=ALL", "--args=nosmt")]
    result = run_tune("apply", profile(tmp_path, text), "--reboot-phase", "--root", root, "-y")
    assert result.code == 0, result.err
    assert boot_files(root) == boot_files(tmp_path / "real")
    assert (root / "etc/default/grub").read_text() == 'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX=""\n'
