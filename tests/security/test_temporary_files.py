"""A file tune replaces in a directory another user can write: an LXC config in that user's
own directory is a valid target, so every name in it is theirs to fill with links, and to
swap while tune writes. The victim is a file elsewhere (here outside the snapshot, as
/etc/shadow would be on a host): its bytes and its mode must stay as they were, in both
executors (the Python one, and lib.sh's put_file as a pushed apply runs it)."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from engines.test_primitives import EXECUTORS, Said
from lab import lab_env

from reconciler.apply.sh_script import LIBRARY, op_call
from reconciler.steps.ops import PutFile

CONFIG = "/var/lib/lxc/c1/config"
NEW = b"lxc.cgroup2.devices.allow = c 195:* rwm\n"
SECRET = b"root:$y$j9T$SeCrEtHaSh:19000:0:99999:7:::\n"
USER = 1000


def users_directory(tmp_path: Path) -> tuple[Path, Path]:
    """The snapshot, with the container's directory owned and writable by USER, and the victim
    (mode 0640) outside it."""
    root = tmp_path / "host"
    config = root / CONFIG.lstrip("/")
    config.parent.mkdir(parents=True)
    config.write_bytes(b"lxc.arch = amd64\n")
    os.chown(config.parent, USER, USER)
    os.chown(config, USER, USER)
    victim = tmp_path / "shadow"
    victim.write_bytes(SECRET)
    victim.chmod(0o640)
    return root, victim


def untouched(victim: Path) -> None:
    assert victim.read_bytes() == SECRET
    assert stat.S_IMODE(victim.stat().st_mode) == 0o640


@pytest.mark.parametrize("executor", sorted(EXECUTORS))
@pytest.mark.parametrize("name", [".config.tune-new", ".config.tune-new.XXXXXXXXXX"])
def test_a_link_planted_at_a_temporary_name_is_refused(
    tmp_path: Path, executor: str, name: str
) -> None:
    """lib.sh wrote `.NAME.tune-new` with `>` and chmodded it by name: a link planted there
    by the directory's owner had root write the new config into the file it named, and give
    that file the config's mode. A link at the name mktemp's template would make is no
    better a trap."""
    root, victim = users_directory(tmp_path)
    (root / CONFIG.lstrip("/")).parent.joinpath(name).symlink_to(victim)
    said = EXECUTORS[executor](root, PutFile(CONFIG, NEW, 0o644))
    untouched(victim)
    assert said == Said("ok")
    config = root / CONFIG.lstrip("/")
    assert config.read_bytes() == NEW
    assert stat.S_IMODE(config.lstat().st_mode) == 0o644


SWAP = """#!/bin/sh
for t in {directory}/.config.tune-new*; do
    [ -f "$t" ] && [ ! -h "$t" ] && rm -f "$t" && ln -s {victim} "$t"
done
exec {real} "$@"
"""


def swapping(
    directory: Path, victim: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Callable[[], None]:
    """The directory's owner, quick enough: every temporary file there is swapped for a link
    to the victim when tune sets its mode (a chmod first on PATH for lib.sh, os.fchmod for
    the Python executor)."""
    shims = tmp_path / "shims"
    shims.mkdir()
    shim = shims / "chmod"
    shim.write_text(SWAP.format(directory=directory, victim=victim, real="/bin/chmod"))
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:/usr/bin:/bin")

    def swap() -> None:
        for entry in directory.iterdir():
            if entry.name.startswith(".config.tune-new") and not entry.is_symlink():
                entry.unlink()
                entry.symlink_to(victim)

    return swap


@pytest.mark.parametrize("executor", sorted(EXECUTORS))
def test_a_temporary_file_swapped_for_a_link_while_written_is_refused(
    tmp_path: Path, executor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh name is not enough where the directory's owner watches it (inotify): the mode,
    the bytes and the sync must reach the file tune created, not whatever the name holds by
    then."""
    root, victim = users_directory(tmp_path)
    directory = (root / CONFIG.lstrip("/")).parent
    swap = swapping(directory, victim, monkeypatch, tmp_path)
    fchmod = os.fchmod

    def swapped_first(fd: int, mode: int) -> None:
        swap()
        fchmod(fd, mode)

    monkeypatch.setattr("reconciler.hosts.directory.os.fchmod", swapped_first)
    write = PutFile(CONFIG, NEW, 0o644)
    if executor == "python":
        EXECUTORS[executor](root, write)
    else:
        env = {"PATH": os.environ["PATH"], **lab_env(root)}
        script = f"{LIBRARY}{op_call(write)}\n"
        subprocess.run(["sh"], input=script.encode(), env=env, capture_output=True, check=False)
    untouched(victim)


@pytest.mark.parametrize("executor", sorted(EXECUTORS))
def test_a_link_to_a_directory_at_the_file_itself_is_refused(tmp_path: Path, executor: str) -> None:
    """The config itself made a link to a directory (/etc/cron.d, here one outside the
    snapshot): `mv -f` moved root's new file into that directory. The link is replaced."""
    root, _ = users_directory(tmp_path)
    elsewhere = tmp_path / "cron.d"
    elsewhere.mkdir()
    config = root / CONFIG.lstrip("/")
    config.unlink()
    config.symlink_to(elsewhere)
    assert EXECUTORS[executor](root, PutFile(CONFIG, NEW, 0o644)) == Said("ok")
    assert list(elsewhere.iterdir()) == []
    assert not config.is_symlink() and config.read_bytes() == NEW


@pytest.fixture
def umask_000() -> Iterator[None]:
    before = os.umask(0)
    yield
    os.umask(before)


# A file of each directory an apply creates: sysctl.d, tmpfiles.d, udev's rules, a systemd
# drop-in directory, and /etc/tune, whose irqbalance policy root runs.
CREATED = [
    "/etc/sysctl.d/90-tune.conf",
    "/etc/tmpfiles.d/90-tune.conf",
    "/etc/udev/rules.d/90-tune.rules",
    "/etc/systemd/system/irqbalance.service.d/90-tune.conf",
    "/etc/tune/irqbalance-policy",
]


@pytest.mark.parametrize("executor", sorted(EXECUTORS))
@pytest.mark.parametrize("path", CREATED)
def test_a_directory_apply_creates_is_never_world_writable(
    tmp_path: Path, executor: str, path: str, umask_000: None
) -> None:
    """Under umask 000 the Python executor's makedirs made each of them 0777: anyone could
    plant a sysctl.d file, a udev rule or the policy script root runs. 0755, whatever the
    umask."""
    root = tmp_path / "host"
    root.mkdir()
    assert EXECUTORS[executor](root, PutFile(path, b"# tune\n", 0o644)) == Said("ok")
    made = Path(path).parent
    while made != Path("/"):
        assert stat.S_IMODE((root / made.relative_to("/")).stat().st_mode) == 0o755, made
        made = made.parent
