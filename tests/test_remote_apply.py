"""The rendered apply script run by this machine's `sh` (no sshd needed): the primitives and the
engine around them against a local snapshot apply."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from conftest import write
from hypothesis import given
from hypothesis import strategies as st
from small_host import SmallHost, build, tree, write_profile
from test_shell_read import LocalShellHost

from reconciler.apply.journal import LOCK, PROFILE, before_apply, read_run, run_ids
from reconciler.apply.python_engine import execute
from reconciler.apply.sh_engine import apply_remote, store_profile_remote
from reconciler.apply.sh_script import printf_format, quoted
from reconciler.apply.work import prepare
from reconciler.core.errors import ConnectError, LockHeld
from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.shell import ScriptResult
from reconciler.profile.load import load_profile


@given(st.binary(max_size=300))
def test_printf_format_prints_exactly_the_bytes(data: bytes) -> None:
    done = subprocess.run(["sh", "-c", f"printf {printf_format(data)}"], capture_output=True)
    assert done.stdout == data


# Any text a profile or a host can give: no NUL (argv cannot hold one), no lone surrogates (not
# text: an argv is encoded to UTF-8 before sh sees it).
WORDS = st.text(
    alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=60
)


@given(WORDS)
def test_quoted_is_one_literal_word(text: str) -> None:
    done = subprocess.run(["sh", "-c", f"printf '%s' {quoted(text)}"], capture_output=True)
    assert done.stdout == text.encode()


def host_and_profile(tmp_path: Path, name: str) -> tuple[Path, Path]:
    root = build(
        tmp_path / name,
        SmallHost(
            sysctls={"vm.swappiness": "60", "net.ipv4.tcp_rmem": "4096 131072 6291456"},
            governors=["schedutil", "performance", "schedutil"],
            thp="always",
            modules=["nvidia"],
            gpus=[512, 4096, 256],
        ),
    )
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "sysctl": {"vm.swappiness": 10, "net.ipv4.tcp_rmem": "4096 87380 0x1000000"},
            "sysfs": {"/sys/kernel/mm/transparent_hugepage/enabled": "madvise"},
            "cpu": {"governor": "performance"},
            "modules": {"nvidia_peermem": "loaded", "nvidia": "loaded"},
            "pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 1024}],
        },
    )
    return root, profile


def test_the_script_leaves_the_tree_a_local_apply_leaves(tmp_path: Path) -> None:
    remote, profile = host_and_profile(tmp_path, "remote")
    local, _ = host_and_profile(tmp_path, "local")
    loaded = load_profile(str(profile))
    shell = LocalShellHost(remote)
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False)
    done = apply_remote(shell, work, loaded, phase="runtime", timeout=60, interval=0.05)
    snapshot = SnapshotHost(local)
    execute(snapshot, prepare(snapshot, loaded, runtime_only=True), loaded)
    assert tree(remote) == tree(local)
    run = read_run(SnapshotHost(remote), done.run_id)
    (local_id,) = run_ids(snapshot)
    local_run = read_run(snapshot, local_id)
    assert run is not None and local_run is not None
    assert [s.to_json() for _, s in run.steps] == [s.to_json() for _, s in local_run.steps]
    assert run.outcome == "applied"


def test_an_apply_reads_profile_yaml_once_in_the_observation(tmp_path: Path) -> None:
    """The stored profile.yaml the run replaces (its prior text journaled) is the one the
    observation read in its batch: the apply costs one round trip, the start and the first
    poll together."""
    remote, profile = host_and_profile(tmp_path, "remote")
    write(remote, PROFILE, "# an earlier apply's\n")
    loaded = load_profile(str(profile))
    shell = LocalShellHost(remote)
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False)
    shell.scripts.clear()
    done = apply_remote(shell, work, loaded, phase="runtime", timeout=60, interval=0.05)
    assert len(shell.scripts) == 1, "the start and the first poll"
    run = read_run(SnapshotHost(remote), done.run_id)
    assert run is not None and run.profile_prior == (True, "# an earlier apply's\n")


def held_lock(root: Path, seconds: float) -> subprocess.Popen[bytes]:
    """Another process holding the target's lock for `seconds`, once it has it."""
    lock = root / LOCK.lstrip("/")
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        ["flock", lock, "sh", "-c", f"echo held; sleep {seconds}"], stdout=subprocess.PIPE
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    return holder


def test_a_script_waits_for_a_holder_that_is_ending(tmp_path: Path) -> None:
    # A detached apply between its `end` record and its exit: the next script waits for it.
    root, _ = host_and_profile(tmp_path, "h")
    holder = held_lock(root, 1)
    store_profile_remote(LocalShellHost(root), "profile\n")
    assert holder.wait() == 0
    assert (root / PROFILE.lstrip("/")).read_text() == "profile\n"


def test_a_script_refuses_a_run_that_goes_on(tmp_path: Path) -> None:
    root, _ = host_and_profile(tmp_path, "h")
    holder = held_lock(root, 30)
    try:
        started = time.monotonic()
        # `flock` itself holds it here, and writes no holder's line.
        with pytest.raises(LockHeld, match=f"another tune run holds {LOCK} \\(its holder wrote"):
            store_profile_remote(LocalShellHost(root), "profile\n")
        assert 4 < time.monotonic() - started < 20
    finally:
        holder.kill()
        holder.wait()
    assert not (root / PROFILE.lstrip("/")).exists()


class BrokenAfterStart(LocalShellHost):
    """Once `breaking`: the next script runs, then its session ends with no exit status, as
    paramiko reports a connection that broke (-1); every later round trip finds it closed."""

    breaking = False

    def run_script(self, script: str, timeout: float | None = None) -> ScriptResult:
        if not self.breaking:
            return super().run_script(script, timeout)
        if self.scripts:
            raise ConnectError(f"{self.name}: the connection is closed.")
        super().run_script(script, timeout)
        return ScriptResult(b"", b"", -1)


def test_a_connection_that_breaks_as_the_run_starts_says_where_to_look(tmp_path: Path) -> None:
    """The start and the first poll are one round trip: a connection that breaks in it is a
    connection error naming `tune history` (the run may have started and goes on without it),
    never "could not be started"; the host ends the run on its own."""
    remote, profile = host_and_profile(tmp_path, "remote")
    loaded = load_profile(str(profile))
    shell = BrokenAfterStart(remote)
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False)
    shell.scripts.clear()
    shell.breaking = True
    with pytest.raises(ConnectError) as caught:
        apply_remote(shell, work, loaded, phase="runtime", timeout=60, interval=0.05)
    said = str(caught.value)
    assert "the connection broke before the apply answered" in said
    assert "if it started, it goes on without the connection" in said
    assert f"`tune history -H {shell.name}` shows which" in said
    deadline = time.monotonic() + 60
    while (run := read_run(SnapshotHost(remote), run_ids(SnapshotHost(remote))[0])) is None or (
        run.outcome == "interrupted"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert run.outcome == "applied"


def test_a_directory_named_like_a_journal_is_no_newer_run(tmp_path: Path) -> None:
    """runs/ holds a directory `zzz.jsonl`: the batch's newest-journal glob matches it, the
    listing (files only) does not. The check before a run reads the listing's newest run on
    its own, and finds it ended, never "no run" or the directory."""
    remote, profile = host_and_profile(tmp_path, "remote")
    loaded = load_profile(str(profile))
    shell = LocalShellHost(remote)
    apply_remote(
        shell,
        prepare(shell, loaded, runtime_only=True, preflight_here=False),
        loaded,
        phase="runtime",
        timeout=60,
        interval=0.05,
    )
    (remote / "var/lib/tune/runs/zzz.jsonl").mkdir(mode=0o700)
    before_apply(shell)  # raises for an unfinished run or one it cannot find
