"""A pushed run whose script dies on the target (kill -9, the OOM killer) leaves a journal
without its `end` and a lock nobody holds: the controller says so as soon as it sees it, with
what the journal shows and the command that restores it, instead of waiting its whole timeout
for a script that is gone and calling it "still running"."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import write
from small_host import SmallHost, build, write_profile

from reconciler.apply.journal import read_run, run_ids
from reconciler.apply.sh_engine import apply_remote
from reconciler.core.errors import ApplyFailed, ExitCode, RunKilled
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import load_profile

from .drive import FAULT, ShEngine

TIMEOUT = 30


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A small host with the two sysctls the profiles below set, neither as they want it."""
    return build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60", "vm.dirty_ratio": "20"}))


@pytest.mark.parametrize("at", [0, 1])
def test_a_pushed_run_whose_script_was_killed_is_said_killed_at_once(
    root: Path, tmp_path: Path, at: int
) -> None:
    """Killed before its first write, and before its second: either way no `end` comes."""
    profile = write_profile(
        tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10, "vm.dirty_ratio": 15}}
    )
    engine = ShEngine(timeout=TIMEOUT)
    work = engine.prepare(root, profile)
    write(root, FAULT, f"{at} crash\n")
    started = time.monotonic()
    with pytest.raises(RunKilled) as caught:
        apply_remote(
            engine.host(root),
            work,
            load_profile(profile),
            phase="runtime",
            timeout=TIMEOUT,
            interval=0.02,
            run_id="20261207T000000Z-k1ll3d",
        )
    assert time.monotonic() - started < TIMEOUT / 3
    said = str(caught.value)
    assert caught.value.exit_code == ExitCode.UNFINISHED_RUN
    assert "run 20261207T000000Z-k1ll3d" in said and "was killed" in said
    # The step record comes before its write.
    assert f"after {at + 1} of its {len(work.steps)} steps" in said
    assert "tune rollback -H" in said


def test_a_run_stopped_while_it_writes_a_file_rolls_every_step_back(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM trapped while put_file creates its temporary file (noclobber on, umask 077):
    the rollback then writes as any write does, and restores the sysctls before it."""
    shims = tmp_path / "shims"
    shims.mkdir()
    chmod = shims / "chmod"
    chmod.write_text('#!/bin/sh\nkill -TERM "$PPID"\nexec /bin/chmod "$@"\n')
    chmod.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:/usr/bin:/bin")
    profile = write_profile(
        tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10, "vm.dirty_ratio": 15}}
    )
    swappiness = (root / "proc/sys/vm/swappiness").read_text()
    with pytest.raises(ApplyFailed, match="interrupted by SIGTERM"):
        ShEngine(timeout=TIMEOUT).apply(root, profile)
    assert (root / "proc/sys/vm/swappiness").read_text() == swappiness
    run = read_run(SnapshotHost(root), run_ids(SnapshotHost(root))[-1])
    assert run is not None and run.outcome == "rolled-back"
