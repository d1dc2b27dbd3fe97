"""Probes of a -H host without sshd: the probe script and the apply script with its probe waits,
run by this machine's `sh` against a snapshot (TUNE_ROOT), as the target would run them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lab import lab_env
from small_host import SmallHost, build, tree, write_profile
from test_shell_read import LocalShellHost

from reconciler.apply.run_record import contexts, plan_record
from reconciler.apply.sh_engine import start, wait
from reconciler.apply.sh_script import ApplyScript, send_probes
from reconciler.apply.work import prepare
from reconciler.core.errors import ApplyFailed
from reconciler.hosts.shell import ScriptResult
from reconciler.probes.phase import PhaseProbes, Records
from reconciler.probes.remote import remote_executor
from reconciler.probes.runner import run_probe
from reconciler.profile.load import load_profile
from reconciler.profile.probe_spec import ProbeSpec
from reconciler.steps.records import ProbesMeasured, RunStarted

SCORE = ["sh", "-c", 'echo "score: $((100 - $(cat "$TUNE_ROOT/proc/sys/vm/swappiness")))"']


class PathShellHost(LocalShellHost):
    """The target's sh with only the commands in `bin` on its PATH."""

    def __init__(self, root: Path, bin_dir: Path) -> None:
        super().__init__(root)
        self.bin = str(bin_dir)

    def run_script(self, script: str, timeout: float | None = None) -> ScriptResult:
        env = {"PATH": self.bin, **lab_env(self.root)}
        data = script.encode("utf-8", "surrogateescape")  # file names as the host gave them
        done = subprocess.run([self.bin + "/sh"], input=data, capture_output=True, env=env)
        return ScriptResult(done.stdout, done.stderr, done.returncode)


def commands(tmp_path: Path, *names: str) -> Path:
    """A bin directory holding only `names`, linked from this machine's PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in names:
        found = shutil.which(name)
        assert found is not None, name
        os.symlink(found, bin_dir / name)
    return bin_dir


WORDS = st.lists(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=20),
    max_size=5,
)


@settings(max_examples=40)
@given(WORDS)
def test_every_argv_reaches_the_probe_on_the_target_intact(words: list[str]) -> None:
    """Quotes, `$`, backquotes, globs, newlines, leading dashes: each word arrives as itself."""
    host = LocalShellHost("/")
    done = remote_executor(host, 10.0)(
        ["sh", "-c", 'printf "%s\\0" "$@"', "sh", "first", *words], 10, {}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\0")[:-1] == ["first", *words]


def test_the_environment_reaches_the_probe(tmp_path: Path) -> None:
    done = remote_executor(LocalShellHost(tmp_path), 10.0)(
        ["sh", "-c", 'printf "%s|%s" "$TUNE_X" "$TUNE_ROOT"'], 10, {"TUNE_X": "a b'$c"}
    )
    assert done.stdout == f"a b'$c|{tmp_path}"


def test_gpu_p2p_on_a_host_without_python3_is_skipped_not_failed(tmp_path: Path) -> None:
    host = PathShellHost(tmp_path, commands(tmp_path, "sh", "timeout", "setsid"))
    spec = ProbeSpec(builtin="gpu-p2p", metric="sum_gbps")
    result = run_probe("p2p", spec, remote_executor(host, 10.0))
    assert result.skipped == "skipped: no python3 on the host"
    assert result.ok and result.values == ()


def test_a_host_without_timeout_says_so(tmp_path: Path) -> None:
    host = PathShellHost(tmp_path, commands(tmp_path, "sh", "echo"))
    spec = ProbeSpec(run=["echo", "n: 1"], metric=r"n: (\d)")
    result = run_probe("n", spec, remote_executor(host, 10.0))
    assert result.error == (
        "exited with status 126: timeout (coreutils) is not installed on the host; "
        "tune bounds probes with it"
    )


def test_a_command_probe_missing_on_the_host_is_an_error(tmp_path: Path) -> None:
    spec = ProbeSpec(run=["no-such-benchmark", "--fast"], metric=r"n: (\d)")
    result = run_probe("n", spec, remote_executor(LocalShellHost(tmp_path), 10.0))
    assert result.error == "exited with status 127: no-such-benchmark: not found on the host"


def setup(tmp_path: Path, swappiness: int) -> tuple[Path, Path]:
    root = build(tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60"}))
    probes = {"score": {"run": SCORE, "metric": r"score: ([0-9]+)", "gate": {"min": 50}}}
    profile = write_profile(
        tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": swappiness}, "probes": probes}
    )
    return root, profile


def test_a_failed_gate_is_rolled_back_by_the_script_on_the_target(tmp_path: Path) -> None:
    from reconciler.apply.sh_engine import apply_remote

    root, profile = setup(tmp_path, 70)  # score 30, below the gate's minimum of 50
    before = tree(root)
    loaded = load_profile(str(profile))
    shell = LocalShellHost(root)
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False, with_persistence=False)
    around = PhaseProbes(loaded.profile.probes, "runtime", execute=remote_executor(shell, 10.0))
    with pytest.raises(ApplyFailed, match=r"score: 30 is below the minimum 50\); rolled back 1"):
        apply_remote(shell, work, loaded, phase="runtime", timeout=60, interval=0.05, around=around)
    assert tree(root) == before


def test_without_a_verdict_in_time_the_script_rolls_back_on_its_own(tmp_path: Path) -> None:
    """The controller measured before, then vanished: no verdict after the phase ever comes."""
    root, profile = setup(tmp_path, 10)
    before = tree(root)
    loaded = load_profile(str(profile))
    shell = LocalShellHost(root)
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False, with_persistence=False)
    header = RunStarted(
        "20260101T000000Z-000001", "2026-01-01T00:00:00Z", "small", "runtime", "lab", None
    )
    script = ApplyScript.of(
        work.steps,
        header,
        None,
        plan_record(work.plan, work.steps),
        contexts(work.plan, work.steps),
        probes_wait=1,
    )
    start(shell, script)
    measured = Records()
    measured.record(ProbesMeasured("before", "runtime", ()))
    first = send_probes(script.run_id, "before", "ok", measured.lines)
    paused = wait(shell, script.run_id, 30, 0.05, first=first, pause_at=0)
    assert paused.records[-1].to_json() == {"type": "verified", "seq": 0}
    assert (root / "proc/sys/vm/swappiness").read_text() == "10\n"
    run = wait(shell, script.run_id, 30, 0.05)
    assert run.outcome == "rolled-back"
    failed = next(r for r in (r.to_json() for r in run.records) if r["type"] == "failed")
    assert failed == {
        "type": "failed",
        "error": "no probe results from tune within 1 s",
        "at": "the probes after the phase",
    }
    assert tree(root) == before
