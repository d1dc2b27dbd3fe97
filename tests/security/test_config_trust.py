"""tune's config file as another user's hand (issue #30, item 2): root reads
`~/.config/tune/config.toml` through HOME or XDG_CONFIG_HOME, which `sudo -E` keeps, and its
`ssh_config` names the file whose ProxyCommand and `Match exec` ssh runs as root. A config file
is read only when root or the caller wrote it and nobody else can change it or swap it (its
directory, and the directories above that), as tune's journals and saved plans are."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import BLACKWELL, run_tune

from reconciler.cli import config

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act for another user")

PLANTED: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "file owned by another user": (
        lambda home, file: os.chown(file, NOBODY, NOBODY),
        "it is owned by uid 65534, not by root or by you (uid 0)",
    ),
    "file others can write": (
        lambda home, file: file.chmod(0o666),
        "other users can write to it (mode 0666)",
    ),
    "its directory others can write, sticky": (
        lambda home, file: file.parent.chmod(0o1777),
        "{file.parent}: other users can write to it (mode 1777)",
    ),
    "a home owned by another user": (
        lambda home, file: os.chown(home, NOBODY, NOBODY),
        "{home}: it is owned by uid 65534, not by root or by you (uid 0)",
    ),
}


@as_root
@pytest.mark.parametrize("via", ["HOME", "XDG_CONFIG_HOME"])
@pytest.mark.parametrize("planted", PLANTED.values(), ids=PLANTED.keys())
def test_a_config_file_another_user_could_have_written_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    planted: tuple[Callable[[Path, Path], None], str],
    via: str,
) -> None:
    home = tmp_path / "home/alice"
    file = home / ".config/tune/config.toml"
    file.parent.mkdir(parents=True)
    evil = home / "ssh_config"
    evil.write_text(f'Match exec "touch {tmp_path / "ran-as-root"}"\n')
    file.write_text(f'ssh_config = "{evil}"\nsudo = true\n')
    monkeypatch.setattr(config, "SYSTEM", tmp_path / "etc/tune/config.toml")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    for key in config.KEYS:
        monkeypatch.delenv(config.ENV_PREFIX + key.upper(), raising=False)
    monkeypatch.setenv(via, str(home if via == "HOME" else home / ".config"))
    assert run_tune("config").out.split("\n")[2].split()[1:] == [str(evil), str(file)]
    plant, why = planted
    plant(home, file)
    result = run_tune("config")
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"refusing to read the config file {file}: {why.format(home=home, file=file)}; tune "
        "reads only a config file that root or you wrote, in directories nobody else can "
        "change.\n"
    )
    # A command that takes none of its settings never reads it.
    assert run_tune("validate", BLACKWELL).code == 0
    assert not (tmp_path / "ran-as-root").exists()
