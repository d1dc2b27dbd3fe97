"""Only apply and rollback write: a `ReadableHost` has no write method, and mypy says so."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mypy import api

REPO = Path(__file__).resolve().parent.parent

# Line 7 writes through a ReadableHost; line 11, the same write through a Host, is the control
# that shows the error is the type's, not a snippet mypy cannot read.
SNIPPET = textwrap.dedent(
    """\
    from reconciler.hosts.base import Host, ReadableHost


    def plan(host: ReadableHost) -> None:
        host.fetch
        host.read_file("/var/lib/tune/profile.yaml")
        host.set_attr("/proc/sys/vm/swappiness", "10")


    def apply(host: Host) -> None:
        host.set_attr("/proc/sys/vm/swappiness", "10")
    """
)


def test_mypy_rejects_a_write_through_a_readable_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The package is checked from this checkout (an installed copy has no py.typed marker).
    monkeypatch.setenv("MYPYPATH", str(REPO))
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    out, err, _status = api.run(
        [
            "--strict",
            "--follow-imports=silent",
            "--no-error-summary",
            "--cache-dir",
            str(tmp_path / "mypy_cache"),
            str(snippet),
        ]
    )
    errors = [line.split(str(tmp_path) + "/", 1)[-1] for line in out.splitlines()]
    assert errors == [
        'snippet.py:7: error: "ReadableHost" has no attribute "set_attr"  [attr-defined]'
    ], err
