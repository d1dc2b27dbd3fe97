"""Probes on a -H host against real sshd: `tune probe -H`, `tune apply --runtime-only -H` with
probes around the phase (the target's journal holds the same records a local apply writes),
and `tune report -H`. The lab's remote side has TUNE_ROOT naming the host's snapshot, so a
probe that reads "$TUNE_ROOT/proc/sys/vm/swappiness" measures the state the apply changes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_host, run_tune
from small_host import SmallHost, build, tree, write_profile
from ssh_fixture import SshLab, StartLab, journal_records, sshd_available

pytestmark = pytest.mark.skipif(
    not sshd_available(), reason="needs root and openssh-server (.ci/run installs it)"
)

# "score" is 100 - swappiness: lowering swappiness from 60 to 10 raises it from 40 to 90.
SCORE = ["sh", "-c", 'echo "score: $((100 - $(cat "$TUNE_ROOT/proc/sys/vm/swappiness")))"']


def tune(lab: SshLab, *args: str | Path) -> tuple[int, str, str]:
    result = run_tune(*args, "--ssh-config", lab.config)
    return result.code, result.out, result.err


def host_and_profile(
    tmp_path: Path, swappiness: int, probes: dict[str, Any] | None = None
) -> tuple[Path, Path]:
    root = build(tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60"}))
    gated = {"run": SCORE, "metric": r"score: ([0-9]+)", "gate": {"regress_max": "5%"}}
    profile = write_profile(
        tmp_path / "p.yaml",
        {"sysctl": {"vm.swappiness": swappiness}, "probes": probes or {"score": gated}},
    )
    return root, profile


def local_apply(tmp_path: Path, root: Path, profile: Path, *flags: str) -> tuple[Path, int]:
    """The same apply on a copy of the same snapshot, here: what the remote one must equal."""
    local = copy_host(root, tmp_path / "local")
    result = run_tune("apply", profile, "--root", local, "--runtime-only", "-y", *flags)
    return local, result.code


def test_probe_runs_on_the_target_one_round_trip_per_run(
    tmp_path: Path, start_lab: StartLab
) -> None:
    # The argument's length, printed by the target's sh: quotes, `$`, backquotes and spaces
    # must reach the probe as one intact word.
    word = 'it\'s $HOME `id` "q"  *'
    root, profile = host_and_profile(
        tmp_path,
        10,
        {
            "score": {"run": SCORE, "metric": r"score: ([0-9]+)", "repeat": 2},
            "word": {"run": ["sh", "-c", 'echo "len: ${#1}"', "sh", word], "metric": r"len: (\d+)"},
        },
    )
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "probe", profile, "-H", "h1", "--format", "json")
    assert (code, err) == (0, "")
    score, length = json.loads(out)["probes"]
    assert score["values"] == [40.0, 40.0]
    assert length["values"] == [len(word)]
    assert lab.exec_requests()["h1"] == 3


def test_a_probe_timeout_kills_its_process_group_on_the_target(
    tmp_path: Path, start_lab: StartLab
) -> None:
    # The probe starts a worker in the background and waits: the timeout must end both.
    pids = tmp_path / "host" / "pids"
    slow = ["sh", "-c", 'sleep 300 & echo $! >"$TUNE_ROOT/pids"; echo $$ >>"$TUNE_ROOT/pids"; wait']
    root, profile = host_and_profile(
        tmp_path, 10, {"slow": {"run": slow, "metric": r"n: (\d+)", "timeout": 1}}
    )
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "probe", profile, "-H", "h1")
    assert code == 1, err
    assert "timed out after 1 s" in out
    for pid in pids.read_text().split():
        assert not running(int(pid)), f"process {pid} of the probe outlived its timeout"


def running(pid: int) -> bool:
    """Whether `pid` is alive (not gone, not a zombie), after a bounded wait for the kill."""
    for _ in range(100):  # a bound so a wrong kill fails instead of hanging, not a timing
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state == "Z":
            return False
        time.sleep(0.05)
    return True


def test_apply_with_probes_over_ssh_journals_what_the_local_apply_does(
    tmp_path: Path, start_lab: StartLab
) -> None:
    root, profile = host_and_profile(tmp_path, 10)
    local, local_code = local_apply(tmp_path, root, profile, "--no-persist")
    assert local_code == 0
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "apply", profile, "-H", "h1", "--runtime-only", "-y", "--no-persist")
    assert (code, err) == (0, ""), out
    assert "Probes score run before the first change and after the last." in out
    assert tree(root) == tree(local)
    assert journal_records(root) == journal_records(local)
    probes = [r for r in journal_records(root) if r["type"] == "probes"]
    assert [(p["when"], p["results"][0]["median"]) for p in probes] == [
        ("before", 40.0),
        ("after", 90.0),
    ]
    # runs with the observation (profile.yaml with it), owners of the state, start; a probe
    # run, hand over + poll; a probe run, verdict + poll.
    assert lab.exec_requests()["h1"] == 7
    assert not [p.name for p in (root / "var/lib/tune/runs").iterdir() if ".jsonl." in p.name]

    # The report over SSH is the report of the same run read here, but for where it was read.
    code, remote_report, err = tune(lab, "report", "-H", "h1")
    assert (code, err) == (0, "")
    local_report = run_tune("report", "--root", root).out
    assert "| score (`score: ([0-9]+)`, higher is better) | 40 | 90 |" in remote_report
    assert without_source(remote_report) == without_source(local_report)


def without_source(report: str) -> str:
    return "\n".join(line for line in report.splitlines() if "Observed from" not in line)


def test_a_failed_gate_over_ssh_rolls_the_target_back(tmp_path: Path, start_lab: StartLab) -> None:
    root, profile = host_and_profile(tmp_path, 90)
    before = tree(root)
    local, local_code = local_apply(tmp_path, root, profile)
    assert local_code == 3
    lab = start_lab({"h1": root})
    code, _, err = tune(lab, "apply", profile, "-H", "h1", "--runtime-only", "-y")
    assert code == 3
    assert "the probes after the phase: probe gate failed: score: 40 -> 10 (-75.0%)" in err
    assert "rolled back" in err
    assert tree(root) == before
    assert not (root / "var/lib/tune/profile.yaml").exists()
    assert journal_records(root) == journal_records(local)
    assert journal_records(root)[-1]["outcome"] == "rolled-back"


def test_keep_on_regression_over_ssh_keeps_the_changes(tmp_path: Path, start_lab: StartLab) -> None:
    root, profile = host_and_profile(tmp_path, 90)
    local, _ = local_apply(tmp_path, root, profile, "--keep-on-regression")
    lab = start_lab({"h1": root})
    code, _, err = tune(
        lab, "apply", profile, "-H", "h1", "--runtime-only", "-y", "--keep-on-regression"
    )
    assert code == 0, err
    assert "gate failed, kept: score: 40 -> 10" in err
    assert (root / "proc/sys/vm/swappiness").read_text() == "90\n"
    assert journal_records(root) == journal_records(local)


def test_gpu_p2p_on_a_target_without_cuda_is_skipped(tmp_path: Path, start_lab: StartLab) -> None:
    root, profile = host_and_profile(
        tmp_path, 10, {"p2p": {"builtin": "gpu-p2p", "metric": "sum_gbps"}}
    )
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "probe", profile, "-H", "h1", "--format", "json")
    [p2p] = json.loads(out)["probes"]
    if p2p["skipped"] is None:
        pytest.skip("this machine has a CUDA device: tests/test_probes.py measures it")
    assert (code, err) == (0, "")
    assert p2p["skipped"].startswith("skipped: no CUDA device"), p2p
    assert p2p["error"] is None and p2p["values"] == []
