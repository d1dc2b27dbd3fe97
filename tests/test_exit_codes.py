"""Every exit code tune can return is documented where an operator looks, from one table
(`reconciler.core.errors.EXIT_CODES`): `tune --help` prints it, and the documentation's table
(docs/reference/exit-codes.md) is it."""

from __future__ import annotations

import re

from conftest import PROJECT, run_tune

from reconciler.core.errors import EXIT_CODES, ExitCode

CODES = {v for k, v in vars(ExitCode).items() if k.isupper() and isinstance(v, int)}


def readme_exit_codes() -> dict[int, str]:
    """The rows of the documentation's table of exit codes, the page Conventions links to."""
    section = (PROJECT / "docs/reference/exit-codes.md").read_text()
    return {
        int(code): meaning
        for code, meaning in re.findall(r"^ *\| `(\d+)` \| (.+) \|$", section, re.MULTILINE)
    }


def test_the_table_names_every_exit_code_and_nothing_else() -> None:
    assert set(EXIT_CODES) == CODES


def test_the_documented_table_is_the_code_table_word_for_word() -> None:
    assert readme_exit_codes() == EXIT_CODES


def test_tune_help_lists_every_exit_code_with_its_meaning() -> None:
    shown = run_tune("--help")
    assert shown.code == 0
    helped = " ".join(shown.out.split())
    for code, meaning in EXIT_CODES.items():
        said = " ".join(meaning.replace("`", "").split())
        assert f" {code} {said}" in helped, f"{code} missing from tune --help"
