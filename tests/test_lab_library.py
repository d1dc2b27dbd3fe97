"""The emulation of a kernel is the test lab's (tests/lab.sh), never tune's: no script tune sends
to a host carries any of it, and a snapshot without the lab library is refused, not written."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import lab
import pytest
from test_remote_apply import host_and_profile
from test_shell_read import LocalShellHost

from reconciler.apply.engines import ShellEngine
from reconciler.apply.journal import new_run_id, read_run
from reconciler.apply.sh_engine import run_with_library
from reconciler.apply.sh_script import LIBRARY, LIBRARY_DIR
from reconciler.apply.work import prepare
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import load_profile


def test_the_lab_library_holds_every_marker_and_tunes_none() -> None:
    # The markers below must name what only the emulation has: else the next test cannot fail.
    for marker in lab.MARKERS:
        assert marker in lab.TEXT, marker
        assert marker not in LIBRARY, marker


def test_no_script_for_a_host_carries_the_emulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command that writes a host through sh (the checks, the apply with its start and
    polls, the promotion, the stored profile, a command, the rollback, pending.json, the
    reboot): what reaches the host is the same for a lab snapshot as for a production host,
    and none of it is emulation."""
    sent: list[str] = []
    run_script = LocalShellHost.run_script

    def recording(self: LocalShellHost, script: str, timeout: float | None = None):  # type: ignore[no-untyped-def]
        sent.append(script)
        return run_script(self, script, timeout)

    monkeypatch.setattr(LocalShellHost, "run_script", recording)
    root, profile = host_and_profile(tmp_path, "h")
    lab.every_write(
        ShellEngine(LocalShellHost(root), timeout=60), load_profile(str(profile)), root, sent
    )


def test_a_snapshot_without_the_lab_library_is_refused(tmp_path: Path) -> None:
    """TUNE_ROOT alone would have the library write the snapshot as a kernel and run this
    machine's modprobe for it: it stops before anything."""
    root = tmp_path / "h"
    (root / "sys").mkdir(parents=True)
    (root / "sys/x").write_text("1\n")
    env = {"PATH": os.environ["PATH"], "TUNE_ROOT": str(root)}
    script = LIBRARY + 'ERR=; set_attr /sys/x 2 || echo "$ERR"\necho went on\n'
    done = subprocess.run(["sh"], input=script.encode(), capture_output=True, env=env)
    assert done.returncode != 0
    assert b"went on" not in done.stdout
    assert b"TUNE_LAB" in done.stderr
    assert (root / "sys/x").read_text() == "1\n"


def library_sent(scripts: list[str]) -> int:
    """How many of `scripts` carry the library itself (not only its check)."""
    return sum(s.count("take_lock() {") for s in scripts)


def test_an_apply_sends_the_library_once_per_connection(tmp_path: Path) -> None:
    root, profile = host_and_profile(tmp_path, "h")
    loaded = load_profile(str(profile))
    shell = LocalShellHost(root)
    engine = ShellEngine(shell, timeout=60)
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False)
    shell.scripts.clear()
    engine.wait_for_lock()
    run_id = new_run_id()
    engine.apply(work, loaded, phase="runtime", run_id=run_id)
    engine.promote(run_id, work.steps[:1])
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None
    engine.rollback(run)
    engine.clear_pending()
    assert library_sent(shell.scripts) == 1, "the first script stores it; the rest source it"
    assert len(shell.scripts) >= 6
    stored = root / LIBRARY_DIR.lstrip("/")
    (kept,) = stored.iterdir()
    assert kept.read_text().rstrip("\n") == LIBRARY.rstrip("\n")
    assert (stored.stat().st_mode & 0o777, kept.stat().st_mode & 0o777) == (0o700, 0o600)
    # A new connection (after a reboot) sends it once more; none of the scripts after it.
    shell.library = None
    shell.scripts.clear()
    engine.wait_for_lock()
    engine.clear_pending()
    assert library_sent(shell.scripts) == 1 and len(shell.scripts) == 2


@pytest.mark.parametrize("damage", ["changed", "link", "not root's"])
def test_a_stored_library_that_is_not_tunes_alone_is_never_sourced(
    tmp_path: Path, damage: str
) -> None:
    root, _ = host_and_profile(tmp_path, "h")
    shell = LocalShellHost(root)
    engine = ShellEngine(shell, timeout=60)
    engine.wait_for_lock()
    stored = root / LIBRARY_DIR.lstrip("/")
    (kept,) = stored.iterdir()
    planted = tmp_path / "planted.sh"
    planted.write_text(f"touch {tmp_path}/sourced\n")
    if damage == "changed":
        kept.write_text(kept.read_text() + f"touch {tmp_path}/sourced\n")
    elif damage == "link":
        kept.unlink()
        kept.symlink_to(planted)
    else:
        os.chown(kept, 65534, 65534)  # its bytes as stored, but another user may change them
    shell.scripts.clear()
    done = run_with_library(shell, "echo ran\n")
    assert done.stdout == b"ran\n"
    assert not (tmp_path / "sourced").exists()
    assert len(shell.scripts) == 2 and library_sent(shell.scripts) == 1, "sent again with it"
    assert not kept.is_symlink() and kept.read_text().rstrip("\n") == LIBRARY.rstrip("\n")
    assert kept.stat().st_mode & 0o777 == 0o600 and kept.stat().st_uid == os.geteuid()
