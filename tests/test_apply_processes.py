"""Apply as separate processes: killed with SIGKILL mid-run, stopped with SIGTERM, and racing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import BLACKWELL, PROJECT, run_tune
from small_host import tree

from reconciler.apply.journal import LOCK, read_run, run_ids
from reconciler.hosts.directory import SnapshotHost

# Applies BLACKWELL to a snapshot with the real engine, and stops after `pause_after` writes
# (marker file written) until killed: a process that dies in the middle of an apply.
PAUSING_APPLY = """
import sys, time
from pathlib import Path
from reconciler.apply.python_engine import execute
from reconciler.apply.work import prepare
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import load_profile

root, profile, marker, pause_after = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])

class Pausing(SnapshotHost):
    writes = 0
    def set_attr(self, path, value):
        super().set_attr(path, value)
        self.writes += 1
        if self.writes == pause_after:
            marker.write_text("paused")
            while True:
                time.sleep(0.05)

host = Pausing(root)
loaded = load_profile(profile)
execute(host, prepare(host, loaded, runtime_only=True), loaded)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(PROJECT)}


def _start_paused(tmp_path: Path, root: Path, pause_after: int) -> subprocess.Popen[bytes]:
    script = tmp_path / "pausing_apply.py"
    script.write_text(PAUSING_APPLY)
    marker = tmp_path / "paused"
    process = subprocess.Popen(
        [sys.executable, str(script), str(root), str(BLACKWELL), str(marker), str(pause_after)],
        env=_env(),
    )
    while not marker.exists():
        assert process.poll() is None, "the apply ended before it paused"
        time.sleep(0.05)
    return process


def test_kill_9_mid_apply_then_rollback_restores_everything(tmp_path: Path, untuned: Path) -> None:
    before = tree(untuned)
    process = _start_paused(tmp_path, untuned, pause_after=140)
    process.send_signal(signal.SIGKILL)
    process.wait()
    (run_id,) = run_ids(SnapshotHost(untuned))
    run = read_run(SnapshotHost(untuned), run_id)
    assert run is not None and run.outcome == "interrupted"
    assert tree(untuned) != before
    history = run_tune("history", "--root", untuned)
    assert "interrupted" in history.out
    result = run_tune("rollback", "--yes", "--root", untuned)
    assert result.code == 0, result.err
    assert tree(untuned) == before


def test_sigterm_mid_apply_rolls_back_and_exits_3(tmp_path: Path, untuned: Path) -> None:
    before = tree(untuned)
    process = _start_paused(tmp_path, untuned, pause_after=60)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) != 0
    (run_id,) = run_ids(SnapshotHost(untuned))
    run = read_run(SnapshotHost(untuned), run_id)
    assert run is not None and run.outcome == "rolled-back"
    assert tree(untuned) == before


def test_concurrent_applies_exactly_one_wins(untuned: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "reconciler.cli",
        "apply",
        str(BLACKWELL),
        "--runtime-only",
        "--root",
        str(untuned),
        "--yes",
        "--no-persist",
    ]
    processes = [
        subprocess.Popen(
            command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    results = [(p.wait(timeout=120), *p.communicate()) for p in processes]
    winners = [r for r in results if r[0] == 0 and "Applied 19 changes (358 writes)" in r[1]]
    assert len(winners) == 1, results
    for code, out, err in results:
        if (code, out, err) in winners:
            continue
        # Refused while the winner held the lock, or started after it was done.
        assert (code == 1 and err.startswith(f"another tune run holds {LOCK} (pid ")) or (
            code == 0 and "In sync: nothing to change" in out
        ), (code, out, err)
    assert len(run_ids(SnapshotHost(untuned))) == 1
