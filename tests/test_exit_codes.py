"""Every exit code tune can return is documented where an operator looks: `tune --help` and
the README's exit-code paragraph."""

from __future__ import annotations

import re

from conftest import PROJECT, run_tune

from reconciler.errors import ExitCode

CODES = sorted(v for k, v in vars(ExitCode).items() if k.isupper() and isinstance(v, int))


def test_every_exit_code_is_in_the_help_and_the_readme() -> None:
    shown = run_tune("--help")
    assert shown.code == 0
    helped = " ".join(shown.out.split())
    readme = " ".join((PROJECT / "README.md").read_text().split())
    paragraph = readme[readme.index("Exit codes: `0` in sync") :][:1200]
    for code in CODES:
        assert re.search(rf"(?<![0-9]){code} [a-z]", helped), f"{code} missing from tune --help"
        assert f"`{code}`" in paragraph, f"{code} missing from the README's exit codes"
