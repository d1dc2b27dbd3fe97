"""A push and a pull never write a host at the same time: a pull-mode `tune apply` on the host
(the Python engine) and a `tune apply -H` pushed from a controller (the sh script) take the
same lock, wait for it `lock.WAIT` seconds at most, and then exit 1 naming its holder: pid,
since when, and the command (for a push, the controller it came from). A pull that runs
entirely between a push's read and its apply is found by the push, lock held, before it writes.

Each run here holds the lock for as long as its profile's probe takes before the first write:
the probe marks the snapshot when it starts, so the other side tries exactly then."""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PROJECT, run_tune
from small_host import SmallHost, build, listing, tree, write_profile
from ssh_fixture import StartLab, sshd_available
from test_shell_read import LocalShellHost

from reconciler.apply.journal import LOCK, read_run, run_ids
from reconciler.apply.sh_engine import apply_remote
from reconciler.apply.sh_script import LIBRARY, _reads_as_read, _step_functions
from reconciler.apply.work import prepare
from reconciler.core.changes import Change, Phase
from reconciler.core.errors import ExitCode, HostChanged
from reconciler.core.quoting import quoted
from reconciler.hosts import lock
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import load_profile
from reconciler.steps.ops import Probe, Read, Step

MARK = "probe-started"
SINCE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"


def host(root: Path) -> Path:
    return build(root, SmallHost(sysctls={"vm.swappiness": "60"}))


def profile(path: Path, seconds: int) -> Path:
    """vm.swappiness 10, and a probe that holds the run `seconds` before its first write."""
    probe = f'touch "$TUNE_ROOT/{MARK}"; sleep {seconds}; echo "v: 1"'
    return write_profile(
        path,
        {
            "sysctl": {"vm.swappiness": 10},
            "probes": {
                "hold": {"run": ["sh", "-c", probe], "metric": "v: ([0-9]+)", "timeout": 60}
            },
        },
    )


def start(args: list[str], root: Path) -> subprocess.Popen[str]:
    """`tune ARGS` in its own process, returned once its probe has started and the lock names
    it (a push's probe may start before its detached script has taken the lock)."""
    held = root / LOCK.lstrip("/")
    process = subprocess.Popen(
        [sys.executable, "-m", "reconciler.cli", *args],
        env={**os.environ, "PYTHONPATH": str(PROJECT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Not a timing assertion: a bound so a broken start fails instead of hanging.
    for _ in range(1200):
        ours = held.exists() and args[1].encode() in held.read_bytes()
        if ((root / MARK).exists() and ours) or process.poll() is not None:
            break
        time.sleep(0.05)
    assert (root / MARK).exists(), process.communicate()
    return process


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def untouched_but_the_mark(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in tree(root).items() if k != MARK}


@pytest.mark.slow
@pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")
def test_a_push_finds_the_pull_holding_the_lock_and_names_it(
    tmp_path: Path, start_lab: StartLab
) -> None:
    root = host(tmp_path / "h1")
    pulled = profile(tmp_path / "pulled.yaml", 15)
    pushed = profile(tmp_path / "pushed.yaml", 0)
    lab = start_lab({"h1": root})
    pull = ["apply", str(pulled), "--runtime-only", "--yes", "--root", str(root)]
    puller = start(pull, root)
    try:
        before = untouched_but_the_mark(root)
        runs = run_ids(SnapshotHost(root))
        started = time.monotonic()
        done = run_tune(
            "apply", pushed, "--runtime-only", "--yes", "-H", "h1", "--ssh-config", lab.config
        )
        waited = time.monotonic() - started
        assert done.code == ExitCode.HOST_ERROR, done.err
        command = f"tune apply {pulled} --runtime-only --yes --root {root}"
        assert re.fullmatch(
            f"another tune run holds {LOCK} \\(pid {puller.pid}, since {SINCE}: "
            f"{re.escape(command)}\\); gave up after {lock.WAIT} s.\n",
            done.err,
        ), done.err
        assert waited >= lock.WAIT  # it waited before it gave up
        # The push changed nothing and started no run: the pull's is the only one.
        assert untouched_but_the_mark(root) == before
        assert run_ids(SnapshotHost(root)) == runs
    finally:
        code, _, err = finished(puller)
    assert code == ExitCode.IN_SYNC, err
    assert (root / "proc/sys/vm/swappiness").read_text() == "10\n"
    # Once the pull is done the push goes through, and finds nothing left to do.
    again = run_tune(
        "apply", pushed, "--runtime-only", "--yes", "-H", "h1", "--ssh-config", lab.config
    )
    assert again.code == ExitCode.IN_SYNC, again.err


@pytest.mark.slow
@pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")
def test_a_pull_finds_the_push_holding_the_lock_and_names_it(
    tmp_path: Path, start_lab: StartLab
) -> None:
    root = host(tmp_path / "h1")
    pushed = profile(tmp_path / "pushed.yaml", 15)
    pulled = profile(tmp_path / "pulled.yaml", 0)
    lab = start_lab({"h1": root})
    push = ["apply", str(pushed), "--runtime-only", "--yes", "-H", "h1"]
    pusher = start([*push, "--ssh-config", str(lab.config)], root)
    try:
        before = listing(root)
        done = run_tune("apply", pulled, "--runtime-only", "--yes", "--root", root)
        assert done.code == ExitCode.HOST_ERROR, done.err
        # The script's own pid on the target, and the controller's command line.
        command = f"tune {' '.join(push)} --ssh-config {lab.config}"
        command += f", pushed from {socket.gethostname()}"
        assert re.fullmatch(
            f"another tune run holds {LOCK} \\(pid [0-9]+, since {SINCE}: "
            f"{re.escape(command)}\\); gave up after {lock.WAIT} s.\n",
            done.err,
        ), done.err
        assert listing(root) == before
    finally:
        code, out, err = finished(pusher)
    assert code == ExitCode.IN_SYNC, err
    assert "Applied 2 changes to ssh h1" in out
    assert run_tune("apply", pulled, "--runtime-only", "--yes", "--root", root).code == 0


def test_a_run_that_ends_within_the_wait_is_waited_for(tmp_path: Path) -> None:
    root = host(tmp_path / "h1")
    pulled = profile(tmp_path / "pulled.yaml", 0)
    target = root / LOCK.lstrip("/")
    target.parent.mkdir(parents=True, mode=0o700)
    holder = subprocess.Popen(
        ["flock", target, "sh", "-c", "echo held; sleep 1"], stdout=subprocess.PIPE
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    done = run_tune("apply", pulled, "--runtime-only", "--yes", "--root", root)
    assert holder.wait() == 0
    assert done.code == ExitCode.IN_SYNC, done.err
    assert (root / "proc/sys/vm/swappiness").read_text() == "10\n"


class PullWhileAsked(io.StringIO):
    """The push's confirmation, answered yes once a pull has applied the host: the pull runs
    whole between the push's read of the host and its apply."""

    def __init__(self, pull: list[str]) -> None:
        super().__init__()
        self.pull = pull

    def isatty(self) -> bool:
        return True

    def readline(self, size: int | None = -1) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "reconciler.cli", *self.pull],
            env={**os.environ, "PYTHONPATH": str(PROJECT)},
            capture_output=True,
            text=True,
        )
        assert done.returncode == ExitCode.IN_SYNC, done.stderr
        return "y\n"


@pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")
def test_a_pull_between_a_pushs_read_and_its_apply_stops_the_push_before_any_write(
    tmp_path: Path, start_lab: StartLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = host(tmp_path / "h1")
    pushed = write_profile(tmp_path / "pushed.yaml", {"sysctl": {"vm.swappiness": 20}})
    pulled = write_profile(tmp_path / "pulled.yaml", {"sysctl": {"vm.swappiness": 10}})
    lab = start_lab({"h1": root})
    pull = ["apply", str(pulled), "--runtime-only", "--yes", "--root", str(root)]
    monkeypatch.setattr("sys.stdin", PullWhileAsked(pull))
    push = ("apply", pushed, "--runtime-only", "-H", "h1", "--ssh-config", lab.config)
    done = run_tune(*push)
    assert done.code == ExitCode.HOST_CHANGED == 9, done.out + done.err
    assert done.err.startswith(
        "ssh h1 changed since it was read (sysctl:vm.swappiness read '60', now '10'): another "
        "run (a pull?) wrote it meanwhile; nothing was written (run "
    ), done.err
    assert done.err.endswith("run again.\n")
    # The pull's value and stored profile stay; the push's run wrote nothing.
    assert (root / "proc/sys/vm/swappiness").read_text() == "10\n"
    assert "swappiness: 10" in (root / "var/lib/tune/profile.yaml").read_text()
    snapshot = SnapshotHost(root)
    runs = [read_run(snapshot, run_id) for run_id in run_ids(snapshot)]
    pushed_run = runs[-1]
    assert pushed_run is not None and pushed_run.outcome == "rolled-back"
    assert not pushed_run.steps
    # Read again, the push goes through.
    again = run_tune(*push, "--yes")
    assert again.code == ExitCode.IN_SYNC, again.err
    assert (root / "proc/sys/vm/swappiness").read_text() == "20\n"


@pytest.mark.parametrize(
    ("read", "said"),
    [(None, "is no longer absent"), (b"name: earlier\n", "is not the one read")],
    ids=["absent", "another"],
)
def test_a_pushed_run_stops_when_only_the_stored_profile_changed_since_it_was_read(
    tmp_path: Path, read: bytes | None, said: str
) -> None:
    """A pull with nothing to change stores its profile alone: the push finds that too."""
    root = host(tmp_path / "h1")
    stored = root / "var/lib/tune/profile.yaml"
    stored.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    if read is not None:
        stored.write_bytes(read)
    shell = LocalShellHost(root)
    loaded = load_profile(
        write_profile(tmp_path / "pushed.yaml", {"sysctl": {"vm.swappiness": 20}})
    )
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False)
    stored.write_bytes(b"name: pulled\n")  # the pull, between the read and the apply
    with pytest.raises(HostChanged, match=f"/var/lib/tune/profile.yaml {said}\\)"):
        apply_remote(shell, work, loaded, phase="runtime", timeout=30, interval=0.02)
    assert (root / "proc/sys/vm/swappiness").read_text() == "60\n"
    assert stored.read_bytes() == b"name: pulled\n"


@pytest.mark.parametrize(
    "data", [b"60\n", b"60", b"60\n\n", b"60\nx", b" 1  2\t3\n4\n", b"", b"a\\b \n", b"-n\n"]
)
def test_the_check_without_forks_reads_as_the_probe_reads(tmp_path: Path, data: bytes) -> None:
    """`is_line` and `is_words` (a push's check before its first write) agree with `reads`
    (`is_line` is used for a reading of one line only)."""
    (tmp_path / "f").write_bytes(data)
    text = data.decode()
    words = " ".join(text.split())
    cases = [("is_words", "reads words", words, words)]
    cases += [("is_words", "reads words", words + " x", words + " x")]
    for line in (text[:-1], text[:-1] + "x", "60"):
        if "\n" not in line:
            cases += [("is_line", "reads text", line, line + "\n")]
    script = LIBRARY + "".join(
        f"{fast} /f {quoted(value)}; printf '%s ' $?; {slow} /f '' {quoted(whole)}; echo $?\n"
        for fast, slow, value, whole in cases
    )
    done = LocalShellHost(tmp_path).run_script(script)
    for answers in done.stdout.decode().splitlines():
        fast, slow = answers.split()
        assert fast == slow, (data, done.stdout)


@pytest.mark.parametrize(
    ("path", "read"),
    [("/proc/sys/kernel/pid_max", Read.TEXT), ("/proc/sys/net/ipv4/tcp_rmem", Read.WORDS)],
)
def test_the_check_reads_this_kernels_sysctls_as_the_probe_does(path: str, read: Read) -> None:
    """The real kernel as the oracle (read only): dash's `read` takes a byte per read(2), and
    /proc/sys answers a read past offset 0 with end of file, so a sysctl read that way is its
    first character. The e2e guest's push stopped on `vm.swappiness read '60', now '60'`."""
    probe = Probe(path, read)
    prior = probe.value(Path(path).read_bytes())
    assert prior is not None and len(prior.strip()) > 1  # several bytes: the case that broke
    change = Change(kind="sysctl", target=path, current=prior, desired=prior, phase=Phase.RUNTIME)
    step = Step.of(change, probe=probe, expect=prior, restored=prior, do=(), undo=())
    script = LIBRARY + _step_functions(0, step) + f"{_reads_as_read(0, step)}; echo $?\n"
    done = LocalShellHost(Path("/")).run_script(script)
    assert done.stdout.decode().split()[-1:] == ["0"], done


def test_the_one_awk_check_reads_this_kernels_sysctls_as_tr_does() -> None:
    """`words_are` (a push's check of its sysctls, one awk for all) on the real kernel (read
    only): each file read from offset 0 whole, tabs and all, as `reads words` reads it."""
    paths = ["/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/kernel/pid_max", "/proc/sys/vm/swappiness"]
    values = [Probe(p, Read.WORDS).value(Path(p).read_bytes()) or "" for p in paths]
    assert len(values[0].split()) == 3  # tab-separated on the kernel's side
    pairs = " ".join(f"{quoted(p)} {quoted(v)}" for p, v in zip(paths, values, strict=True))
    moved = " ".join(f"{quoted(p)} {quoted(v + '0')}" for p, v in zip(paths, values, strict=True))
    script = LIBRARY + f"words_are {pairs}; echo $?\nwords_are {moved}; echo $?\n"
    done = LocalShellHost(Path("/")).run_script(script)
    assert done.stdout.decode().split() == ["0", "1"], done


def test_a_push_names_the_one_sysctl_of_several_that_changed_since_it_was_read(
    tmp_path: Path,
) -> None:
    """Several sysctls are checked by one awk; where one differs, each is read again for the
    message, which names the one that changed (the second here), not the first."""
    root = build(
        tmp_path / "h1", SmallHost(sysctls={"vm.swappiness": "60", "vm.dirty_ratio": "20"})
    )
    shell = LocalShellHost(root)
    pushed = {"sysctl": {"vm.swappiness": 10, "vm.dirty_ratio": 15}}
    loaded = load_profile(write_profile(tmp_path / "pushed.yaml", pushed))
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False)
    (root / "proc/sys/vm/dirty_ratio").write_text("12\n")  # a pull, between the read and apply
    with pytest.raises(HostChanged, match=r"sysctl:vm.dirty_ratio read '20', now '12'\)"):
        apply_remote(shell, work, loaded, phase="runtime", timeout=30, interval=0.02)
    assert (root / "proc/sys/vm/swappiness").read_text() == "60\n"
    checked = [s for s in shell.scripts if "SAME=; words_are '/proc/sys/vm/" in s]
    assert checked, "the sysctls were not checked together"
