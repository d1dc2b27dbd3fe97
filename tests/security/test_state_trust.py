"""tune trusts only the state root (or the caller) wrote: its lock, its journals, a saved plan.

Attacks from issue #15 (items 3, 4 and 6), each replayed against a snapshot and, where tune has
a second engine, over the SSH lab: links planted in shared directories, a lock held by another
user, journals and plans another user wrote, state directories made under umask 000, and an
apply killed mid-run followed by another apply.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import BLACKWELL, SAVED, UNTUNED, copy_host, run_tune
from small_host import SmallHost, build, tree, write_profile
from ssh_fixture import SshLab, StartLab, minimal_host, sshd_available
from test_apply_processes import _start_paused

from reconciler.apply.journal import LOCK, RUNS, STATE
from reconciler.hosts.lock import Holder

NOBODY = 65534
OLD_LOCK = "/run/lock/tune.lock"  # where tune kept its lock: a 1777 directory on Debian
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as nobody")
with_sshd = pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")
INTERRUPTED = (
    "{} after {} writes and was never rolled back: `tune rollback` restores them, "
    "or `tune apply --after-interrupted` applies over them (one `tune rollback` then undoes "
    "both runs)."
)


def small_host(root: Path) -> Path:
    return build(root, SmallHost(sysctls={"vm.swappiness": "60"}, governors=["schedutil"] * 2))


def small_profile(path: Path) -> Path:
    return write_profile(
        path, {"sysctl": {"vm.swappiness": 10}, "cpu": {"governor": "performance"}}
    )


def apply(profile: Path, root: Path, *more: str) -> tuple[int, str]:
    result = run_tune(
        "apply", "--runtime-only", "--no-persist", "-y", profile, "--root", root, *more
    )
    return result.code, result.err


def local(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A directory `nobody` can reach (pytest's own are 0700), as /tmp's neighbours are."""
    directory = Path(tempfile.mkdtemp(prefix="tune-shared-", dir="/tmp"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def debian_run(root: Path) -> None:
    """/run as Debian has it: root's, with /run/lock writable by every user (1777)."""
    (root / "run").mkdir(mode=0o755, exist_ok=True)
    (root / "run/lock").mkdir(exist_ok=True)
    (root / "run/lock").chmod(0o1777)


@contextlib.contextmanager
def nobody_doing(action: Callable[[], None]) -> Iterator[None]:
    """`action` run as nobody in a child process that stays alive (holding what it opened)
    for the block; an action the kernel refuses (EACCES, ENOENT) is simply not done."""
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(ready_r)
            os.close(hold_w)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with contextlib.suppress(OSError):
                action()
            os.write(ready_w, b"x")
            os.read(hold_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(hold_r)
    try:
        assert os.read(ready_r, 1) == b"x"
        yield
    finally:
        os.close(hold_w)
        os.close(ready_r)
        os.waitpid(pid, 0)


def plant_links(root: Path, target: Path) -> Callable[[], None]:
    def plant() -> None:
        for path in {LOCK, OLD_LOCK}:
            with contextlib.suppress(OSError):
                os.symlink(target, local(root, path))

    return plant


@as_root
def test_a_link_planted_at_the_lock_never_truncates_its_target(shared: Path) -> None:
    root = small_host(shared / "host")
    debian_run(root)
    secret = shared / "shadow"
    secret.write_text("root:$6$secret:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    with nobody_doing(plant_links(root, secret)):
        code, err = apply(small_profile(shared / "p.yaml"), root)
    assert (code, err) == (0, "")
    assert secret.read_text() == "root:$6$secret:19000:0:99999:7:::\n"


@as_root
def test_another_user_cannot_hold_the_lock_with_a_pid_of_their_choosing(shared: Path) -> None:
    root = small_host(shared / "host")
    debian_run(root)

    def hold() -> None:
        import fcntl

        for path in {LOCK, OLD_LOCK}:
            with contextlib.suppress(OSError):
                fd = os.open(local(root, path), os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.write(fd, b"1\n")

    with nobody_doing(hold):
        code, err = apply(small_profile(shared / "p.yaml"), root)
    assert (code, err) == (0, "")


def test_the_saved_plan_is_never_written_through_a_link(tmp_path: Path) -> None:
    root = small_host(tmp_path / "host")
    victim = tmp_path / "authorized_keys"
    victim.write_text("ssh-ed25519 AAAA admin\n")
    (tmp_path / ".tune").mkdir()
    (tmp_path / ".tune/plan.json.new").symlink_to(victim)
    result = run_tune("plan", small_profile(tmp_path / "p.yaml"), "--root", root)
    assert result.code == 2 and result.err.startswith(SAVED)
    assert victim.read_text() == "ssh-ed25519 AAAA admin\n"
    assert json.loads((tmp_path / ".tune/plan.json").read_text())["version"] == 2


@as_root
@pytest.mark.parametrize(
    ("planted", "why"),
    [
        (lambda plan: os.chown(plan, NOBODY, NOBODY), "it is owned by uid 65534"),
        (lambda plan: plan.parent.chmod(0o777), "other users can write to it (mode 0777)"),
    ],
    ids=["plan owned by nobody", "plan in a 0777 directory"],
)
def test_apply_refuses_a_saved_plan_another_user_could_have_written(
    tmp_path: Path, planted: Callable[[Path], None], why: str
) -> None:
    root = small_host(tmp_path / "host")
    assert run_tune("plan", small_profile(tmp_path / "p.yaml"), "--root", root).code == 2
    planted(tmp_path / ".tune/plan.json")
    before = tree(root)
    result = run_tune("apply", "--runtime-only", "-y")
    assert result.code == 1
    assert result.err.startswith("refusing to use ") and why in result.err
    assert tree(root) == before


# Ways another user's hand gets into tune's state: the journal itself, or a directory above it.
PLANTED_STATE = {
    "journal owned by nobody": lambda root, journal: os.chown(journal, NOBODY, NOBODY),
    "runs directory 0777": lambda root, journal: journal.parent.chmod(0o777),
    "state directory 0777": lambda root, journal: local(root, STATE).chmod(0o777),
}


def only_journal(root: Path) -> Path:
    (journal,) = local(root, RUNS).glob("*.jsonl")
    return journal


@as_root
@pytest.mark.parametrize("planted", PLANTED_STATE.values(), ids=PLANTED_STATE.keys())
def test_rollback_refuses_a_journal_another_user_could_have_written(
    tmp_path: Path, planted: Callable[[Path, Path], None]
) -> None:
    root = small_host(tmp_path / "host")
    assert apply(small_profile(tmp_path / "p.yaml"), root) == (0, "")
    planted(root, only_journal(root))
    applied = tree(root)
    result = run_tune("rollback", "--yes", "--root", root)
    assert result.code == 1
    assert result.err.startswith("refusing to use /var/lib/tune")
    assert tree(root) == applied


def test_state_directories_are_private_whatever_the_umask(tmp_path: Path) -> None:
    root = small_host(tmp_path / "host")
    old = os.umask(0)
    try:
        code, err = apply(small_profile(tmp_path / "p.yaml"), root)
    finally:
        os.umask(old)
    assert (code, err) == (0, "")
    for directory in (STATE, RUNS, os.path.dirname(LOCK)):
        assert stat.S_IMODE(local(root, directory).stat().st_mode) == 0o700, directory


def test_a_killed_apply_blocks_the_next_until_rolled_back_and_one_rollback_undoes_both(
    tmp_path: Path, untuned: Path
) -> None:
    root = untuned
    before = tree(root)
    process = _start_paused(tmp_path, root, pause_after=40)
    process.send_signal(signal.SIGKILL)
    process.wait()
    (first,) = sorted(p.stem for p in local(root, RUNS).glob("*.jsonl"))
    result = run_tune("apply", "--runtime-only", "-y", BLACKWELL, "--root", root)
    assert result.code == 5
    assert result.err.strip() == f"run {first} on snapshot {root} " + INTERRUPTED.format(
        "was interrupted", 40
    )
    assert (
        run_tune(
            "apply", "--runtime-only", "-y", "--after-interrupted", BLACKWELL, "--root", root
        ).code
        == 0
    )
    result = run_tune("rollback", "--yes", "--root", root)
    assert result.code == 0, result.err
    assert [line.split(" on ")[0] for line in result.out.splitlines()][
        1
    ] == f"Rolled back run {first}"
    assert tree(root) == before
    again = run_tune("rollback", "--yes", "--root", root)
    assert again.code == 0 and "already rolled back; nothing to do" in again.out


# Over SSH: the same refusals and the same chain, from the sh engine on the target.


@pytest.fixture(scope="module")
def blackwell_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return minimal_host(UNTUNED, BLACKWELL, tmp_path_factory.mktemp("t") / "untuned")


def over_ssh(lab: SshLab, *args: str | Path) -> tuple[int, str, str]:
    result = run_tune(*args, "--ssh-config", lab.config)
    return result.code, result.out, result.err


@with_sshd
def test_over_ssh_state_is_private_whatever_the_umask(tmp_path: Path, start_lab: StartLab) -> None:
    root = small_host(tmp_path / "host")
    lab = start_lab({"h1": root})
    profile = small_profile(tmp_path / "p.yaml")
    code, _, err = over_ssh(
        lab, "apply", "--runtime-only", "--no-persist", "-y", profile, "-H", "h1"
    )
    assert (code, err) == (0, "")
    for directory in (STATE, RUNS, os.path.dirname(LOCK)):
        assert stat.S_IMODE(local(root, directory).stat().st_mode) == 0o700, directory
    (script,) = local(root, RUNS).glob("*.sh")
    assert stat.S_IMODE(script.stat().st_mode) == 0o600


@with_sshd
@as_root
@pytest.mark.parametrize("planted", PLANTED_STATE.values(), ids=PLANTED_STATE.keys())
def test_over_ssh_rollback_refuses_a_journal_another_user_could_have_written(
    tmp_path: Path, start_lab: StartLab, planted: Callable[[Path, Path], None]
) -> None:
    root = small_host(tmp_path / "host")
    lab = start_lab({"h1": root})
    profile = small_profile(tmp_path / "p.yaml")
    args = ("apply", "--runtime-only", "--no-persist", "-y", profile, "-H", "h1")
    assert over_ssh(lab, *args)[0] == 0
    planted(root, only_journal(root))
    applied = tree(root)
    code, _, err = over_ssh(lab, "rollback", "--yes", "-H", "h1")
    assert code == 1
    assert err.startswith("refusing to use /var/lib/tune")
    assert tree(root) == applied


def kill_when(root: Path, seq: int) -> threading.Thread:
    """SIGKILL the target's apply script (its pid is in the lock) once step `seq` is journaled."""

    def kill() -> None:
        runs, lock = local(root, RUNS), local(root, LOCK)
        for _ in range(1200):
            journals = list(runs.glob("*.jsonl")) if runs.exists() else []
            if journals and f'"seq":{seq},'.encode() in journals[0].read_bytes():
                holder = Holder.parse(lock.read_bytes()) if lock.exists() else None
                if holder is not None:
                    os.kill(int(holder.pid), signal.SIGKILL)
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=kill)
    thread.start()
    return thread


@pytest.mark.slow
@with_sshd
def test_over_ssh_a_killed_apply_blocks_the_next_and_one_rollback_undoes_both(
    tmp_path: Path, start_lab: StartLab, blackwell_host: Path
) -> None:
    root = copy_host(blackwell_host, tmp_path / "remote")
    before = tree(root)
    lab = start_lab({"h1": root})
    args = ("apply", "--runtime-only", "-y", BLACKWELL, "-H", "h1")
    killer = kill_when(root, 3)
    with contextlib.suppress(Exception):
        # The controller waits for an end that never comes: 5 s, then it gives up. The runs
        # below take the default timeout: a whole apply can take longer than 5 s on a busy
        # machine, and that is not what this test is about.
        over_ssh(lab, *args, "--command-timeout", "5")
    killer.join()
    (first,) = sorted(p.stem for p in local(root, RUNS).glob("*.jsonl"))
    code, _, err = over_ssh(lab, *args)
    assert code == 5
    # Said once the target's lock is found free: no other apply is going.
    assert err.strip().startswith(f"run {first} on ssh h1 was interrupted after ")
    code, _, err = over_ssh(lab, *args, "--after-interrupted")
    assert code == 0, err
    code, out, err = over_ssh(lab, "rollback", "--yes", "-H", "h1")
    assert (code, err) == (0, "")
    assert [line.split(" on ")[0] for line in out.splitlines()][1] == f"Rolled back run {first}"
    assert tree(root) == before


def test_over_ssh_a_stat_that_fails_never_reads_as_nobodys_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target's stat answering with an error (no `-c` in an old busybox, EACCES) once read
    as "not there yet", which the trust check passes: a 0777 state directory was trusted."""
    from test_shell_read import LocalShellHost

    from reconciler.core.errors import HostError

    root = tmp_path / "host"
    (root / STATE.lstrip("/")).mkdir(parents=True)
    (root / STATE.lstrip("/")).chmod(0o777)
    assert LocalShellHost(root).owned([RUNS])[1] == {RUNS: None}  # absent is nobody's yet
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "stat").write_text("#!/bin/sh\necho 'stat: unrecognized option: c' >&2\nexit 1\n")
    (fake / "stat").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    with pytest.raises(HostError, match="stat: unrecognized option"):
        LocalShellHost(root).owned([STATE, RUNS])


def test_over_ssh_who_owns_each_path_reads_as_the_snapshot_host_reads_it(tmp_path: Path) -> None:
    """One `stat` answers for every path that is there: absent ones, a link, a file and a
    directory in any order must each get their own answer, as lstat gives it."""
    from test_shell_read import LocalShellHost

    from reconciler.hosts.directory import SnapshotHost

    root = tmp_path / "host"
    (root / "var/lib/tune/runs").mkdir(parents=True, mode=0o700)
    (root / "var/lib/tune/runs/a.jsonl").write_text("{}\n")
    (root / "var/lib/tune/runs/a.jsonl").chmod(0o640)
    (root / "run").mkdir()
    (root / "run/tune").symlink_to("/nowhere")
    os.chown(root / "var/lib/tune/runs/a.jsonl", NOBODY, NOBODY)
    paths = ["/absent", STATE, "/run/tune", "/also/absent", RUNS, RUNS + "/a.jsonl"]
    for order in (paths, paths[::-1], paths[:1], []):
        shelled = LocalShellHost(root).owned(order)
        assert shelled == SnapshotHost(root).owned(order)
        assert list(shelled[1]) == order


def test_a_link_in_place_of_a_snapshots_state_is_judged_as_a_link(tmp_path: Path) -> None:
    """Live hosts and SSH judge a link at a state path itself (lstat); the snapshot engine
    followed it and judged where it led, so a link passed for the directory."""
    root = build(tmp_path / "host", SmallHost({"vm.swappiness": "60"}))
    (root / "opt/state").mkdir(parents=True, mode=0o700)
    (root / "var/lib").mkdir(parents=True)
    (root / "var/lib/tune").symlink_to("../../opt/state")
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    applied = run_tune("apply", profile, "--root", root, "--yes")
    assert applied.code == 1, applied.err
    assert "it is a symbolic link" in applied.err
    assert (root / "proc/sys/vm/swappiness").read_text() == "60\n"


@with_sshd
def test_over_ssh_a_fleet_refuses_an_interrupted_host_even_when_it_is_in_sync(
    tmp_path: Path, start_lab: StartLab
) -> None:
    """One host and a fleet follow one rule: a host whose last run has no end is refused (its
    changes are still there to roll back), even when nothing is left to change; the fleet
    skipped the check on such a host and called it in sync."""
    profile = small_profile(tmp_path / "p.yaml")
    roots = {name: small_host(tmp_path / name) for name in ("h1", "h2")}
    for root in roots.values():
        assert apply(profile, root)[0] == 0  # in sync now, with one journal each
    (journal,) = local(roots["h1"], RUNS).glob("*.jsonl")
    kept = [r for r in journal.read_bytes().splitlines(True) if b'"type":"end"' not in r]
    journal.write_bytes(b"".join(kept))  # as a kill before its end leaves it
    lab = start_lab(roots)
    code, out, _ = over_ssh(
        lab, "apply", "--runtime-only", "--no-persist", "-y", "--format", "json", profile,
        "-H", "h1", "-H", "h2",
    )  # fmt: skip
    assert code == 1
    h1, h2 = json.loads(out)
    assert (h1["target"], h1["status"]) == ("h1", "error")
    assert "was interrupted after" in h1["error"]
    assert (h2["target"], h2["status"]) == ("h2", "in-sync")


def test_a_tune_link_planted_in_a_shared_directory_is_refused(tmp_path: Path) -> None:
    """`.tune` as a link (issue #30, item 7): root's plan would land in the directory of the
    link's choosing (one that root owns: /etc/cron.d), and apply would read it from there."""
    root = small_host(tmp_path / "host")
    chosen = tmp_path / "chosen"
    chosen.mkdir(mode=0o700)
    (tmp_path / ".tune").symlink_to(chosen)
    result = run_tune("plan", small_profile(tmp_path / "p.yaml"), "--root", root)
    assert result.code == 2
    assert result.err == (
        "tune: could not save the plan: refusing to use .tune: it is a symbolic link, not a "
        "directory; tune only acts on state that root or you wrote and nobody else can change.\n"
    )
    assert list(chosen.iterdir()) == []
    (chosen / "plan.json").write_text("{}")
    before = tree(root)
    applied = run_tune("apply", "--runtime-only", "-y")
    assert applied.code == 1
    assert applied.err.startswith("refusing to use .tune: it is a symbolic link")
    assert tree(root) == before
