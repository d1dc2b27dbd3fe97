"""`tune apply --runtime-only -H`, `tune history -H` and `tune rollback -H` against real sshd.

The target runs the apply as one detached POSIX sh script (no Python there); with TUNE_ROOT set
it emulates the kernel like a local snapshot does, so an apply over SSH must leave exactly the
tree, and the journal, that `tune apply --root` leaves on a copy of the same snapshot.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import BLACKWELL, PROJECT, UNTUNED, copy_host, run_tune
from small_host import SmallHost, build, tree, write_profile
from ssh_fixture import SshLab, StartLab, journal_records, minimal_host, sshd_available

from reconciler.apply.journal import LOCK
from reconciler.hosts.lock import Holder

pytestmark = pytest.mark.skipif(
    not sshd_available(), reason="needs root and openssh-server (.ci/run installs it)"
)

# Fields that differ between any two runs: when, and which run.


@pytest.fixture(scope="module")
def blackwell_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The untuned example cut down to the files the Blackwell profile reads."""
    return minimal_host(UNTUNED, BLACKWELL, tmp_path_factory.mktemp("t") / "untuned")


def tune(lab: SshLab, *args: str | Path) -> tuple[int, str, str]:
    result = run_tune(*args, "--ssh-config", lab.config)
    return result.code, result.out, result.err


def history(lab: SshLab, name: str) -> list[dict[str, Any]]:
    code, out, err = tune(lab, "history", "-H", name, "--format", "json")
    assert (code, err) == (0, "")
    rows: list[dict[str, Any]] = json.loads(out)["runs"]
    return rows


@pytest.mark.slow
def test_apply_over_ssh_equals_the_local_apply(
    tmp_path: Path, start_lab: StartLab, blackwell_host: Path
) -> None:
    remote = copy_host(blackwell_host, tmp_path / "remote")
    local = copy_host(blackwell_host, tmp_path / "local")
    before = tree(remote)
    lab = start_lab({"h1": remote})
    code, out, err = tune(lab, "apply", "--runtime-only", "-y", BLACKWELL, "-H", "h1")
    assert (code, err) == (0, "")
    assert "Applied 24 changes (363 writes) to ssh h1" in out
    assert run_tune("apply", "--runtime-only", "-y", BLACKWELL, "--root", local).code == 0
    after = tree(remote)
    assert after != before
    assert after == tree(local)  # byte-identical, PCI config space and /proc/modules included
    assert (remote / "var/lib/tune/profile.yaml").read_bytes() == (
        local / "var/lib/tune/profile.yaml"
    ).read_bytes()
    assert journal_records(remote) == journal_records(local)
    # List the runs (the newest read with them) and observe (profile.yaml with it) in one
    # batch, who owns tune's state, upload and start with the first long poll: none of them
    # per knob.
    assert lab.exec_requests()["h1"] == 3

    code, out, _ = tune(lab, "apply", "--runtime-only", "-y", BLACKWELL, "-H", "h1")
    assert code == 0 and "In sync: nothing to change on ssh h1." in out
    assert tree(remote) == after
    (row,) = history(lab, "h1")
    assert (row["outcome"], row["changes"], row["writes"]) == ("applied", 24, 363)
    assert row["phase"] == "runtime"

    code, out, err = tune(lab, "rollback", "--yes", "-H", "h1")
    assert (code, err) == (0, "")
    assert "363 restored" in out
    assert tree(remote) == before
    assert not (remote / "var/lib/tune/profile.yaml").exists()
    assert [r["outcome"] for r in history(lab, "h1")] == ["rolled-back"]
    code, out, _ = tune(lab, "rollback", "--yes", "-H", "h1")
    assert code == 0 and "already rolled back" in out


def small(root: Path, cpus: int) -> Path:
    return build(
        root,
        SmallHost(
            sysctls={"vm.swappiness": "60"},
            governors=["schedutil"] * cpus,
            modules=["nvidia"],
            gpus=[512, 512],
        ),
    )


def small_profile(path: Path) -> Path:
    return write_profile(
        path,
        {
            "sysctl": {"vm.swappiness": 10},
            "cpu": {"governor": "performance"},
            "modules": {"nvidia_peermem": "loaded"},
            "pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 4096}],
        },
    )


def test_round_trips_do_not_grow_with_the_number_of_knobs(
    tmp_path: Path, start_lab: StartLab
) -> None:
    profile = small_profile(tmp_path / "p.yaml")
    few, many = small(tmp_path / "few", 1), small(tmp_path / "many", 64)
    lab = start_lab({"few": few, "many": many})
    for name, writes in (("few", 5), ("many", 68)):
        code, out, err = tune(
            lab, "apply", "--runtime-only", "--no-persist", "-y", profile, "-H", name
        )
        assert (code, err) == (0, ""), out
        assert f"Applied 4 changes ({writes} writes)" in out  # 4 entries, however many CPUs
    counts = lab.exec_requests()
    assert counts["few"] == counts["many"] == 3


def test_a_value_that_does_not_read_back_rolls_everything_back(
    tmp_path: Path, start_lab: StartLab
) -> None:
    """The module loads but never shows in /proc/modules: the read-back fails on the target,
    which restores the changes made before it; exit 3, like a local apply."""
    profile = small_profile(tmp_path / "p.yaml")
    root = small(tmp_path / "host", 4)
    modules = root / "proc/modules"
    modules.unlink()
    modules.symlink_to("/dev/null")
    before = tree(root)
    lab = start_lab({"h1": root})
    code, _, err = tune(lab, "apply", "--runtime-only", "--no-persist", "-y", profile, "-H", "h1")
    assert code == 3
    assert "module:nvidia_peermem: wrote 'loaded' but /proc/modules reads back 'absent'" in err
    assert "rolled back" in err
    assert tree(root) == before
    (row,) = history(lab, "h1")
    assert row["outcome"] == "rolled-back"


def test_values_reach_the_target_intact(tmp_path: Path, start_lab: StartLab) -> None:
    """The schema keeps quotes and `$` out of kernel values; what it admits (printf's `%`, glob
    brackets, runs of spaces) must still arrive as written, in the file and in profile.yaml."""
    root = small(tmp_path / "host", 1)
    (root / "proc/sys/kernel/domainname").write_text("(none)\n")
    (root / "proc").joinpath("x").mkdir()  # something for a stray glob to match
    local = copy_host(root, tmp_path / "local")
    value = "a %s  [x] = /proc/@+:%%d"
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"kernel.domainname": value}})
    lab = start_lab({"h1": root})
    code, _, err = tune(lab, "apply", "--runtime-only", "--no-persist", "-y", profile, "-H", "h1")
    assert (code, err) == (0, "")
    assert "a %s [x] = /proc/@+:%%d" in (root / "proc/sys/kernel/domainname").read_text()
    assert value in (root / "var/lib/tune/profile.yaml").read_text()
    assert (
        run_tune("apply", "--runtime-only", "--no-persist", "-y", profile, "--root", local).code
        == 0
    )
    assert tree(root) == tree(local)


@pytest.mark.slow
def test_a_connection_cut_mid_apply_leaves_the_run_complete(
    tmp_path: Path, start_lab: StartLab, blackwell_host: Path
) -> None:
    """The client dies (SIGKILL) while the target applies: the detached script finishes the run,
    and `tune history -H` says how it ended; the tree is the applied one, not half of it."""
    remote = copy_host(blackwell_host, tmp_path / "remote")
    local = copy_host(blackwell_host, tmp_path / "local")
    lab = start_lab({"h1": remote})
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    client = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconciler.cli",
            "apply",
            "--runtime-only",
            "-y",
            str(BLACKWELL),
            "-H",
            "h1",
            "--ssh-config",
            str(lab.config),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runs = remote / "var/lib/tune/runs"
    try:
        # Not a timing assertion: a bound so a broken start fails instead of hanging.
        for _ in range(600):
            journals = list(runs.glob("*.jsonl")) if runs.exists() else []
            if journals and b'"type":"step"' in journals[0].read_bytes():
                break
            time.sleep(0.05)
        else:
            pytest.fail("the apply never started on the target")
    finally:
        os.kill(client.pid, signal.SIGKILL)
        client.wait()
    (journal,) = runs.glob("*.jsonl")
    assert b'"type":"end"' not in journal.read_bytes()  # cut mid-apply
    for _ in range(1200):
        if b'"type":"end"' in journal.read_bytes():
            break
        time.sleep(0.05)
    (row,) = history(lab, "h1")
    assert row["outcome"] == "applied"
    assert run_tune("apply", "--runtime-only", "-y", BLACKWELL, "--root", local).code == 0
    assert tree(remote) == tree(local)


def test_sigterm_on_the_target_rolls_the_run_back(
    tmp_path: Path, start_lab: StartLab, blackwell_host: Path
) -> None:
    """The script's pid is in the lock file: SIGTERM to it (a shutdown, an admin) restores
    every step made so far, and the client reports the rollback with exit 3."""
    remote = copy_host(blackwell_host, tmp_path / "remote")
    before = tree(remote)
    lab = start_lab({"h1": remote})
    runs, lock = remote / "var/lib/tune/runs", remote / LOCK.lstrip("/")

    def terminate() -> None:
        for _ in range(600):
            journals = list(runs.glob("*.jsonl")) if runs.exists() else []
            if journals and b'"seq":3,' in journals[0].read_bytes() and lock.exists():
                holder = Holder.parse(lock.read_bytes())
                if holder is not None:
                    os.kill(int(holder.pid), signal.SIGTERM)
                    return
            time.sleep(0.05)

    import threading

    killer = threading.Thread(target=terminate)
    killer.start()
    code, _, err = tune(lab, "apply", "--runtime-only", "-y", BLACKWELL, "-H", "h1")
    killer.join()
    assert code == 3
    assert "interrupted by SIGTERM" in err
    assert tree(remote) == before
    assert [r["outcome"] for r in history(lab, "h1")] == ["rolled-back"]


def test_an_unmet_requirement_is_found_on_the_target_before_any_write(
    tmp_path: Path, start_lab: StartLab
) -> None:
    profile = small_profile(tmp_path / "p.yaml")
    root = small(tmp_path / "host", 2)
    (root / "proc/sys/vm/swappiness").chmod(0o444)  # read-only, as in a container
    before = tree(root)
    lab = start_lab({"h1": root})
    code, _, err = tune(lab, "apply", "--runtime-only", "--no-persist", "-y", profile, "-H", "h1")
    assert code == 1
    assert "sysctl:vm.swappiness cannot be changed: /proc/sys/vm/swappiness is read-only" in err
    assert tree(root) == before
    assert not list((root / "var/lib/tune/runs").glob("*.jsonl"))


def test_dry_run_over_ssh_writes_nothing(tmp_path: Path, start_lab: StartLab) -> None:
    profile = small_profile(tmp_path / "p.yaml")
    root = small(tmp_path / "host", 2)
    before = tree(root)
    lab = start_lab({"h1": root})
    code, out, err = tune(
        lab, "apply", "--runtime-only", "--no-persist", "--dry-run", profile, "-H", "h1"
    )
    assert (code, err) == (0, "")
    assert out.startswith("Dry run on ssh h1: 4 changes (6 writes), nothing written.")
    assert "run modprobe nvidia_peermem" in out
    assert tree(root) == before and not (root / "var").exists()
    assert lab.exec_requests()["h1"] == 1


def in_sync_without_a_stored_profile(root: Path, profile: Path) -> Path:
    """A host that matches `profile` with no profile.yaml: tuned by hand, or by a run whose
    record was removed."""
    done = run_tune("apply", "--runtime-only", "--no-persist", "-y", profile, "--root", root)
    assert done.code == 0, done.err
    (root / "var/lib/tune/profile.yaml").unlink()
    return root


def test_an_apply_with_nothing_to_change_stores_the_profile_over_ssh(
    tmp_path: Path, start_lab: StartLab
) -> None:
    """As on this machine: the profile becomes the host's last applied one, so `tune check -H`
    without a profile checks against it."""
    profile = small_profile(tmp_path / "p.yaml")
    root = in_sync_without_a_stored_profile(small(tmp_path / "host", 1), profile)
    local = copy_host(root, tmp_path / "local")
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "apply", "--runtime-only", "--no-persist", "-y", profile, "-H", "h1")
    assert (code, err) == (0, "")
    assert "In sync: nothing to change on ssh h1." in out
    assert (
        run_tune("apply", "--runtime-only", "--no-persist", "-y", profile, "--root", local).code
        == 0
    )
    stored = root / "var/lib/tune/profile.yaml"
    assert stored.read_bytes() == (local / "var/lib/tune/profile.yaml").read_bytes()
    assert oct(stored.stat().st_mode & 0o777) == oct(
        (local / "var/lib/tune/profile.yaml").stat().st_mode & 0o777
    )
    # List the runs with the newest (it must have ended) and observe (profile.yaml read in the
    # same batch), who owns tune's state, store it: one round trip more than an apply in sync
    # with its stored profile, which costs none.
    assert lab.exec_requests()["h1"] == 3
    code, out, _ = tune(lab, "apply", "--runtime-only", "--no-persist", "-y", profile, "-H", "h1")
    assert code == 0 and "In sync" in out
    assert lab.exec_requests()["h1"] == 3 + 2
    assert [r["outcome"] for r in history(lab, "h1")] == ["applied"]  # no run started

    code, out, err = tune(lab, "check", "--no-persist", "-H", "h1")
    assert (code, err) == (0, ""), out
