"""Issue #35, item 2: man pages that install. tune(1) and a page a command, written from the
commands' help (`tune man --directory man/man1`), shipped in the wheel's share/man/man1 and
rendered by groff and man without a warning."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PROJECT, run_tune

from reconciler.cli.main import cli
from reconciler.cli.manpage import commands, pages, root_context

CHECKED_IN = PROJECT / "man" / "man1"
SECTIONS = (
    "NAME",
    "SYNOPSIS",
    "DESCRIPTION",
    "OPTIONS",
    "EXIT STATUS",
    "ENVIRONMENT",
    "FILES",
    "EXAMPLES",
    "SEE ALSO",
)
REGENERATE = "regenerate them: `tune man --directory man/man1`, and commit them"


def written() -> dict[str, str]:
    return pages(cli)


def test_the_checked_in_pages_are_what_the_commands_help_says_now() -> None:
    now = written()
    there = {path.name: path.read_text(encoding="utf-8") for path in CHECKED_IN.glob("*.1")}
    assert sorted(there) == sorted(now), REGENERATE
    for name, text in now.items():
        assert there[name] == text, f"man/man1/{name} is stale: {REGENERATE}"


def test_a_page_a_command_and_a_group_each_with_every_section() -> None:
    now = written()
    context = root_context(cli)
    names = {"tune-" + "-".join(path) + ".1" for path, _, _ in commands(cli, context)}
    assert {"tune-apply.1", "tune-rollout.1", "tune-rollout-resume.1"} <= names
    assert set(now) == names | {"tune.1"}
    for name, text in now.items():
        found = re.findall(r"^\.SH (.+)$", text, re.M)
        expected = list(SECTIONS)
        if name in ("tune.1", "tune-kube.1", "tune-rollout.1", "tune-export.1", "tune-slurm.1"):
            expected.insert(4, "COMMANDS")
        assert found == expected, name
        title = name.removesuffix(".1")
        assert text.startswith(f'.TH {title.upper()} 1 ""'), name
        assert f"\n{title} \\- " in text or name == "tune.1", name


def test_a_page_says_what_the_command_s_help_says() -> None:
    page = run_tune("man", "rollout", "resume")
    assert page.code == 0
    assert page.out == written()["tune-rollout-resume.1"]
    assert ".B tune rollout resume\n[OPTIONS] [ID]" in page.out
    assert "\\fB\\-y, \\-\\-yes\\fR" in page.out
    # Its exit codes, each with what it means, from the one table.
    status = page.out.split(".SH EXIT STATUS")[1].split(".SH")[0]
    helped = " ".join(run_tune("rollout", "resume", "--help").out.split())
    listed = re.search(r"Exit codes: ([\d, ]+)", helped)
    assert listed is not None
    codes = sorted(int(code) for code in listed.group(1).replace(",", " ").split())
    assert [int(code) for code in re.findall(r"\\fB(\d+)\\fR", status)] == codes
    assert "\n.TP\n\\fB7\\fR\nnot confirmed: the answer was no" in status
    examples = page.out.split(".SH EXAMPLES")[1]
    assert "\\fBtune rollout resume\\fR" in examples
    missing = run_tune("man", "nosuch")
    assert missing.code == 64 and "no command `tune nosuch`" in missing.err


@pytest.mark.skipif(shutil.which("groff") is None, reason="needs groff (groff-base)")
def test_every_page_renders_without_a_warning(tmp_path: Path) -> None:
    for name, text in written().items():
        checked = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (checked.returncode, checked.stderr) == (0, ""), name


@pytest.mark.skipif(shutil.which("man") is None, reason="needs man (man-db)")
def test_man_finds_the_pages_by_name_where_the_wheel_puts_them(tmp_path: Path) -> None:
    """`<prefix>/share/man/man1`, as pip and pipx lay out a wheel's data files: `man -M` reads
    that tree as MANPATH does."""
    done = run_tune("man", "--directory", tmp_path / "share/man/man1")
    assert done.code == 0, done.err
    shown = subprocess.run(
        ["man", "-M", str(tmp_path / "share/man"), "tune-apply"],
        capture_output=True,
        text=True,
        env={"MANWIDTH": "100", "MANPAGER": "cat", "PAGER": "cat", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "tune-apply - Make the host match a profile" in shown.stdout
    for section in SECTIONS:
        assert f"\n{section}\n" in shown.stdout, section
