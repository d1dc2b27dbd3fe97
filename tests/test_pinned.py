"""The pin an engine's programs read: /etc/tune/pull.env's PROFILE_URL and PROFILE_DIGEST."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reconciler.cli.pinned import Pinned, pinned
from reconciler.core.errors import UsageError
from reconciler.hosts.trust import UntrustedState

EXAMPLE = Path(__file__).resolve().parent.parent / "reconciler/examples/systemd/tune-pull.env"


def test_the_shipped_pull_env_is_a_pin() -> None:
    assert pinned(EXAMPLE) == Pinned("file:///srv/tune/gpu.yaml", "sha256:" + "0" * 64)


def test_quotes_and_comments_are_read_as_systemd_reads_them(tmp_path: Path) -> None:
    env = tmp_path / "pull.env"
    env.write_text('# PROFILE_URL=no\nPROFILE_URL="/srv/a b.yaml"\nPROFILE_DIGEST=sha256:ab\n')
    assert pinned(env) == Pinned("/srv/a b.yaml", "sha256:ab")


def test_no_pin_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        pinned(tmp_path / "pull.env")
    env = tmp_path / "pull.env"
    env.write_text("PROFILE_URL=/srv/a.yaml\n")
    with pytest.raises(UsageError, match="no PROFILE_DIGEST"):
        pinned(env)


def test_a_pin_another_user_can_write_is_refused(tmp_path: Path) -> None:
    env = tmp_path / "pull.env"
    env.write_text("PROFILE_URL=/srv/a.yaml\nPROFILE_DIGEST=sha256:ab\n")
    os.chmod(env, 0o666)
    with pytest.raises(UntrustedState):
        pinned(env)
