"""ACS redirect bits as a kernel boot argument (`acs: ... persist: cmdline`): the `pci=` option
the kernel reads (drivers/pci/pci.c pci_setup), how tune joins it to a `pci=` word already
configured, what /bin/sh makes of the GRUB drop-in, and `tune verify` after the boot."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import PROJECT, profile, run_tune, write
from test_kind_cmdline import sh_cmdline

from reconciler.facts import cmdline as fmt
from reconciler.facts.kernel import BOOT_ID

CASES = PROJECT / "tests/kinds/acs"
GRUB_6_10 = CASES / "cmdline-disable-acs-redir-before-6.11-joins-pci-on-grub"
CMDLINE_6_11 = CASES / "cmdline-config-acs-from-6.11-on-kernel-cmdline"
REDIR = "disable_acs_redir=0000:00:03.0;0000:00:07.0"
CONFIG = "config_acs=0x00xx@0000:00:03.0;0x00xx@0000:00:07.0"
PENDING = "var/lib/tune/pending.json"


def host(case: Path, tmp_path: Path) -> Path:
    root = shutil.copytree(case / "host", tmp_path / "host", symlinks=True)
    write(root, BOOT_ID, "00000000-0000-4000-8000-000000000001\n")
    return root


@pytest.mark.parametrize(
    ("line", "kept", "edited"),
    [
        # pci_setup runs once per pci= word and points disable_acs_redir_param at each
        # occurrence's value in turn: the last one is what the kernel uses.
        ("pci=disable_acs_redir=A pci=noaer", "disable_acs_redir=A", f'pci="{REDIR}" pci=noaer'),
        (
            "pci=disable_acs_redir=A pci=noaer,disable_acs_redir=B",
            "disable_acs_redir=B",
            f'pci=disable_acs_redir=A pci="noaer,{REDIR}"',
        ),
        ("quiet pci=realloc", None, f'quiet pci="realloc,{REDIR}"'),
        ("quiet", None, f'quiet pci="{REDIR}"'),
        ("quiet -- pci=x", None, f'quiet pci="{REDIR}" -- pci=x'),
    ],
)
def test_the_option_joins_the_pci_word_the_kernel_takes_it_from(
    line: str, kept: str | None, edited: str
) -> None:
    params = fmt.parameters(line) or fmt.NONE
    assert fmt.option(params.every("pci"), "disable_acs_redir") == kept
    edit = fmt.Edit("pci", fmt.Mode.OPTION, (REDIR,))
    words = fmt.edit(fmt.split(line), [edit])
    assert " ".join(words) == edited
    assert edit.satisfied(fmt.parameters(" ".join(words)) or fmt.NONE)
    # Never a second pci= word where one is there already.
    after = (fmt.parameters(" ".join(words)) or fmt.NONE).every("pci")
    assert len(after) == max(1, len(params.every("pci")))


def test_grub_gets_one_pci_word_that_sh_keeps_whole(tmp_path: Path) -> None:
    """grub-mkconfig sources the drop-in and copies the words into grub.cfg's `linux` line,
    whose lexer would end the command at a bare `;`: the word must reach it in quotes."""
    root = host(GRUB_6_10, tmp_path)
    assert "pci=realloc" in sh_cmdline(root)
    done = run_tune("apply", GRUB_6_10 / "profile.yaml", "--reboot-phase", "--root", root, "-y")
    assert done.code == 0, done.err
    words = sh_cmdline(root)
    assert [w for w in words if w.startswith("pci")] == [f'pci="realloc,{REDIR}"']
    assert [w for w in words if not w.startswith("pci")] == ["quiet"]


def test_a_profile_that_sets_pci_itself_keeps_its_own_and_says_why(tmp_path: Path) -> None:
    text = (GRUB_6_10 / "profile.yaml").read_text() + "cmdline:\n  set: {pci: noaer}\n"
    done = run_tune("plan", profile(tmp_path, text), "--root", GRUB_6_10 / "host")
    assert done.code == 2, done.err
    assert "~ cmdline pci: [realloc] -> [realloc, noaer]" in done.out
    assert f'pci="{REDIR}" is left out: cmdline.pci sets that parameter too' in done.out


@pytest.mark.parametrize("booted", [True, False], ids=["booted-with-it", "booted-without"])
def test_verify_reads_the_option_in_proc_cmdline_after_the_boot(
    tmp_path: Path, booted: bool
) -> None:
    root = host(CMDLINE_6_11, tmp_path)
    done = run_tune("apply", CMDLINE_6_11 / "profile.yaml", "--root", root, "-y")
    assert done.code == 0, done.err
    configured = (root / "etc/kernel/cmdline").read_text()
    assert configured == f'root=/dev/sda1 quiet pci="{CONFIG}"\n'
    write(root, BOOT_ID, "00000000-0000-4000-8000-000000000002\n")
    if booted:  # systemd-boot passes /etc/kernel/cmdline as it is
        write(root, fmt.PROC_CMDLINE, f"BOOT_IMAGE=/boot/vmlinuz-6.11.0-9-generic {configured}")
    result = run_tune("verify", "--root", root)
    if booted:
        assert result.code == 0, result.err
        assert f'ok  /proc/cmdline has pci="{CONFIG}"' in result.out
        assert not (root / PENDING).exists()
    else:
        assert result.code == 3
        assert f'/proc/cmdline has nothing, not pci="{CONFIG}"' in result.err
        assert (root / "etc/kernel/cmdline").read_text() == "root=/dev/sda1 quiet\n"
