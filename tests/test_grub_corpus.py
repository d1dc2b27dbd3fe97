"""GRUB defaults, drop-ins and RHEL 8 boot entries that nobody here wrote (tests/corpus/grub,
SOURCE.md says where each comes from), read by tune and judged by /bin/sh sourcing them the way
grub-mkconfig does."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PROJECT, plan_json, profile, run_tune, write
from small_host import tree

from reconciler.core.errors import ExitCode
from reconciler.facts import cmdline as fmt
from reconciler.facts.shell_values import Unknown
from reconciler.hosts.directory import SnapshotHost

CORPUS = PROJECT / "tests/corpus/grub"
DEBIAN = CORPUS / "debian-grub2-common/default-grub"
CLOUDIMG = PROJECT / "tests/corpus/ubuntu-cloudimg/etc/default/grub.d/50-cloudimg-settings.cfg"
TUNED_PATCH = CORPUS / "tuned/default-grub-patch"
TUNED_BOOTCMDLINE = CORPUS / "tuned/bootcmdline"
RHEL8_ENTRY = CORPUS / "rhel8/loader-entry.conf"
RHEL8_GRUBENV = CORPUS / "rhel8/grubenv"
RUNNING = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro\n"


def sh(root: Path, script: str) -> str:
    done = subprocess.run(
        ["/bin/sh", "-c", script], cwd=root, capture_output=True, text=True, env={}, check=True
    )
    return done.stdout


def sh_line(root: Path) -> list[str]:
    """The words /bin/sh gives GRUB's `linux` line, as grub-mkconfig sources the files; then
    `$tuned_params` as tuned's 00_tuned sets it in grub.cfg (from /etc/tuned/bootcmdline)."""
    line = sh(
        root,
        "set -e; . ./etc/default/grub; for f in ./etc/default/grub.d/*.cfg; do "
        'if [ -e "$f" ]; then . "$f"; fi; done >/dev/null 2>&1; '
        'printf "%s %s" "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"',
    )
    if "$tuned_params" in line:
        tuned = sh(root, '. ./etc/tuned/bootcmdline; printf %s "$TUNED_BOOT_CMDLINE"')
        line = line.replace("$tuned_params", tuned)
    return line.split()


def boot(root: Path) -> fmt.BootConfig:
    found = fmt.boot_config(SnapshotHost(root).fetch(fmt.request()))
    assert found is not None
    return found


def grub_host(root: Path, *dropins: Path, patch: Path | None = None) -> Path:
    write(root, fmt.PROC_CMDLINE, RUNNING)
    text = DEBIAN.read_text() + (patch.read_text() if patch else "")
    write(root, fmt.GRUB_DEFAULT, text)
    for source in dropins:
        write(root, f"/etc/default/grub.d/{source.name}", source.read_bytes())
    return root


@pytest.mark.parametrize(
    ("dropins", "patch", "expected"),
    [
        ((), None, ["quiet"]),
        ((CLOUDIMG,), None, ["console=tty1", "console=ttyS0", "nvme_core.io_timeout=4294967295"]),
        ((), TUNED_PATCH, ["quiet"]),
        ((CLOUDIMG,), TUNED_PATCH, ["console=tty1", "console=ttyS0"]),
    ],
    ids=["debian", "debian+cloudimg", "debian+tuned", "debian+cloudimg+tuned"],
)
def test_grub_files_read_to_the_line_sh_gives(
    tmp_path: Path, dropins: tuple[Path, ...], patch: Path | None, expected: list[str]
) -> None:
    root = grub_host(tmp_path / "host", *dropins, patch=patch)
    if patch is not None:
        write(root, fmt.TUNED_BOOTCMDLINE, TUNED_BOOTCMDLINE.read_bytes())
    found = boot(root)
    assert found.unknown is None and found.cmdline is not None
    assert found.cmdline.split() == sh_line(root)
    assert sh_line(root)[: len(expected)] == expected


def test_debians_distributor_backquotes_leave_the_command_line_known(tmp_path: Path) -> None:
    """GRUB_DISTRIBUTOR=`lsb_release ...` is a command substitution: that variable alone is
    unknown."""
    env = fmt.grub_env(SnapshotHost(grub_host(tmp_path / "host")).fetch(fmt.request()))
    distributor = env.get("GRUB_DISTRIBUTOR")
    assert isinstance(distributor, Unknown)
    assert str(distributor) == (
        "/etc/default/grub:8: a command substitution (`...`) is not evaluated"
    )
    assert env.get("GRUB_CMDLINE_LINUX_DEFAULT") == "quiet"


def rhel8_host(root: Path, grubenv: bool = True, tuned: bool = False) -> Path:
    write(root, fmt.REDHAT_RELEASE, "Red Hat Enterprise Linux release 8.4 (Ootpa)\n")
    write(root, "/boot/loader/entries/rhel-4.18.0-305.el8.x86_64.conf", RHEL8_ENTRY.read_bytes())
    if grubenv:
        write(root, fmt.GRUBENV, RHEL8_GRUBENV.read_bytes())
    if tuned:
        write(root, fmt.TUNED_BOOTCMDLINE, TUNED_BOOTCMDLINE.read_bytes())
    return root


KERNELOPTS = (
    "root=/dev/mapper/root_vg-lv_root ro crashkernel=auto resume=/dev/mapper/root_vg-lv_swap "
    "rd.lvm.lv=root_vg/lv_root rd.lvm.lv=root_vg/lv_swap console=tty0 console=ttyS0,115200 noapic"
)


@pytest.mark.parametrize(
    ("tuned", "line"),
    [(False, KERNELOPTS + " transparent_hugepages=never"), (True, KERNELOPTS)],
    ids=["tuned_params from grubenv", "tuned_params from /etc/tuned/bootcmdline"],
)
def test_rhel8_entries_expand_kernelopts_and_tuned_params(
    tmp_path: Path, tuned: bool, line: str
) -> None:
    root = rhel8_host(tmp_path / "host", tuned=tuned)
    found = boot(root)
    assert (found.tool, found.cmdline) == ("grubby", line)


def test_rhel8_a_parameter_in_kernelopts_is_configured_not_a_change(tmp_path: Path) -> None:
    """The old reader took `$kernelopts $tuned_params` as the command line: noapic, which the
    host boots with, was a change to make."""
    root = rhel8_host(tmp_path / "host")
    write(root, fmt.PROC_CMDLINE, f"BOOT_IMAGE=(hd0,msdos1)/vmlinuz {KERNELOPTS}\n")
    plan = plan_json(tmp_path, root, "name: t\ncmdline:\n  set: {noapic: }\n")
    assert plan["code"] == 0, plan["changes"]


def test_rhel8_without_kernelopts_in_grubenv_is_unknown_and_apply_refuses(tmp_path: Path) -> None:
    root = rhel8_host(tmp_path / "host", grubenv=False)
    write(root, fmt.PROC_CMDLINE, RUNNING)
    found = boot(root)
    assert found.cmdline is None and found.unknown is not None
    assert "$kernelopts is not in the GRUB environment block" in str(found.unknown)
    before = tree(root)
    text = "name: t\ncmdline:\n  set: {amd_pstate: active}\n"
    result = run_tune("apply", profile(tmp_path, text), "--reboot-phase", "--root", root, "-y")
    assert result.code == ExitCode.BOOT_CONFIG_UNKNOWN, result.err
    assert tree(root) == before


PADDED = KERNELOPTS.replace("console=tty0 console=ttyS0,115200 noapic", "noapic")


@pytest.mark.parametrize(
    ("entry", "kernelopts"),
    [
        ("console: hvc0", PADDED + " console=tty0 console=ttyS0,115200 console=hvc0"),
        ('console: ["ttyS0,115200"]', PADDED + " console=ttyS0,115200"),
        ('console: "ttyS0,115200"', KERNELOPTS),  # one of the two: in sync, nothing to do
    ],
)
def test_rhel8_grubby_writes_the_exact_console_list_in_kernelopts(
    tmp_path: Path, entry: str, kernelopts: str
) -> None:
    """The entries say `options $kernelopts $tuned_params`; grubby edits kernelopts in
    grubenv, where console=tty0 console=ttyS0,115200 are. `--args` with every occurrence
    wanted drops the old ones and appends those (tests/test_grubby_oracle.py shows the real
    script doing so), so the list comes out exact, last. The block here is padded with `#` to
    its end, as a host's is."""
    root = rhel8_host(tmp_path / "host")
    block = RHEL8_GRUBENV.read_text().rstrip("#\n") + "\n"
    write(root, fmt.GRUBENV, block + "#" * (1024 - len(block)))
    write(root, fmt.PROC_CMDLINE, f"BOOT_IMAGE=(hd0,msdos1)/vmlinuz {KERNELOPTS}\n")
    text = f"name: t\ncmdline:\n  set: {{{entry}}}\n"
    result = run_tune("apply", profile(tmp_path, text), "--reboot-phase", "--root", root, "-y")
    assert result.code == 0, result.err
    env = fmt.grubenv((root / fmt.GRUBENV.lstrip("/")).read_text())
    assert env["kernelopts"] == kernelopts


def test_rhel8_grubby_is_refused_where_the_block_has_no_room(tmp_path: Path) -> None:
    """The block as captured ends in a line break after its padding: grub2-editenv finds no
    free space there and fails ("environment block too small"), and grubby goes on as if it
    had not. tune foresees it and writes nothing, saying where to edit."""
    root = rhel8_host(tmp_path / "host")
    write(root, fmt.PROC_CMDLINE, f"BOOT_IMAGE=(hd0,msdos1)/vmlinuz {KERNELOPTS}\n")
    before = tree(root)
    text = "name: t\ncmdline:\n  set: {console: hvc0}\n"
    result = run_tune("apply", profile(tmp_path, text), "--reboot-phase", "--root", root, "-y")
    assert result.code == ExitCode.HOST_ERROR, result.err
    assert f"it would turn kernelopts in {fmt.GRUBENV} (grub2-editenv) from " in result.err
    assert "Edit that line by hand" in result.err
    assert tree(root) == before


def test_the_corpus_files_are_the_ones_source_md_names() -> None:
    listed = (CORPUS / "SOURCE.md").read_text()
    for path in CORPUS.rglob("*"):
        if path.is_file() and path.name != "SOURCE.md":
            assert f"`{path.relative_to(CORPUS)}`" in listed, path
    assert shutil.which("sh") is not None


def test_rhel8_a_parameter_tuned_sets_after_kernelopts_is_refused(tmp_path: Path) -> None:
    """The entry says `$kernelopts $tuned_params`, and the block's tuned_params holds
    transparent_hugepages=never: grubby edits kernelopts only, so the later word would still
    win. tune says so and writes nothing."""
    root = rhel8_host(tmp_path / "host")
    block = RHEL8_GRUBENV.read_text().rstrip("#\n") + "\n"
    write(root, fmt.GRUBENV, block + "#" * (1024 - len(block)))
    write(root, fmt.PROC_CMDLINE, f"BOOT_IMAGE=(hd0,msdos1)/vmlinuz {KERNELOPTS}\n")
    before = tree(root)
    text = "name: t\ncmdline:\n  set: {transparent_hugepages: always}\n"
    result = run_tune("apply", profile(tmp_path, text), "--reboot-phase", "--root", root, "-y")
    assert result.code == ExitCode.HOST_ERROR, result.err
    assert "the default entry would still boot " in result.err
    assert "transparent_hugepages=never" in result.err
    assert tree(root) == before
