"""`tune apply` with probes: measured before and after the phase, journaled, and a failed gate
rolls the phase back. The probe reads the snapshot's swappiness, so a rollback shows in it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_tune
from small_host import SmallHost, build, tree, write_profile

from reconciler.apply.journal import read_run, run_ids
from reconciler.hosts.directory import SnapshotHost

# "score" is 100 - swappiness: lowering swappiness from 60 to 10 raises it from 40 to 90;
# raising it to 90 drops the score to 10, a regression a 5% gate refuses.
SCORE = ["sh", "-c", 'echo "score: $((100 - $(cat "$TUNE_ROOT/proc/sys/vm/swappiness")))"']


def setup(tmp_path: Path, swappiness: int, gate: dict[str, object]) -> tuple[Path, Path]:
    root = build(tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60"}))
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "sysctl": {"vm.swappiness": swappiness},
            "probes": {"score": {"run": SCORE, "metric": r"score: ([0-9]+)", "gate": gate}},
        },
    )
    return root, profile


def records(root: Path, record_type: str) -> list[dict[str, object]]:
    host = SnapshotHost(root)
    run = read_run(host, run_ids(host)[-1])
    assert run is not None
    return [r for r in (r.to_json() for r in run.records) if r.get("type") == record_type]


def medians(root: Path) -> dict[str, object]:
    return {str(r["when"]): r["results"][0]["median"] for r in records(root, "probes")}  # type: ignore[index]


def test_improvement_within_the_gate_is_kept_and_both_measurements_journaled(
    tmp_path: Path,
) -> None:
    root, profile = setup(tmp_path, 10, {"regress_max": "5%"})
    result = run_tune("apply", "--yes", profile, "--root", root, "--runtime-only", "--no-persist")
    assert result.code == 0, result.err
    assert "Probes score run before the first change and after the last." in result.out
    assert (root / "proc/sys/vm/swappiness").read_text() == "10\n"
    assert medians(root) == {"before": 40.0, "after": 90.0}
    [gate] = records(root, "gate")
    assert gate["ok"] is True and gate["before"] == 40.0 and gate["after"] == 90.0
    [step] = records(root, "step")
    assert step["operations"] == ["write /proc/sys/vm/swappiness: 10"]
    assert step["priority"] in ("P0", "P1", "P2") and step["phase"] == "runtime"


def test_regression_past_the_gate_rolls_the_phase_back_and_exits_3(tmp_path: Path) -> None:
    root, profile = setup(tmp_path, 90, {"regress_max": "5%"})
    before = tree(root)
    result = run_tune("apply", "--yes", profile, "--root", root, "--runtime-only", "--no-persist")
    assert result.code == 3
    assert "(the probes after the phase: probe gate failed: score: 40 -> 10 (-75.0%)" in result.err
    assert "rolled back 1 write" in result.err
    assert tree(root) == before
    assert medians(root) == {"before": 40.0, "after": 10.0}
    [gate] = records(root, "gate")
    assert gate["ok"] is False and gate["kept"] is False
    assert [r["type"] for r in records(root, "restored")] == ["restored"]
    assert records(root, "end")[-1]["outcome"] == "rolled-back"


def test_keep_on_regression_keeps_the_changes_and_says_so(tmp_path: Path) -> None:
    root, profile = setup(tmp_path, 90, {"regress_max": "5%"})
    result = run_tune(
        "apply",
        "--yes",
        profile,
        "--root",
        root,
        "--runtime-only",
        "--no-persist",
        "--keep-on-regression",
    )
    assert result.code == 0, result.err
    assert (root / "proc/sys/vm/swappiness").read_text() == "90\n"
    assert "gate failed, kept: score: 40 -> 10" in result.err
    [gate] = records(root, "gate")
    assert gate["ok"] is False and gate["kept"] is True
    assert records(root, "end")[-1]["outcome"] == "applied"


@pytest.mark.parametrize("gate", [{"min": 50}, {"regress_max": 5}])
def test_no_probes_runs_none_and_gates_nothing(tmp_path: Path, gate: dict[str, object]) -> None:
    root, profile = setup(tmp_path, 90, gate)
    result = run_tune(
        "apply", "--yes", profile, "--root", root, "--runtime-only", "--no-persist", "--no-probes"
    )
    assert result.code == 0, result.err
    assert (root / "proc/sys/vm/swappiness").read_text() == "90\n"
    assert records(root, "probes") == [] and records(root, "gate") == []


def test_absolute_gate_judges_after_alone(tmp_path: Path) -> None:
    root, profile = setup(tmp_path, 45, {"min": 60})
    before = tree(root)
    result = run_tune("apply", "--yes", profile, "--root", root, "--runtime-only", "--no-persist")
    assert result.code == 3
    assert "score: 55 is below the minimum 60" in result.err
    assert tree(root) == before


def test_probe_that_worked_before_and_fails_after_is_a_failed_gate(tmp_path: Path) -> None:
    root = build(tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60"}))
    # Fails once swappiness is no longer 60: the change broke what the probe runs.
    check = 'test "$(cat "$TUNE_ROOT/proc/sys/vm/swappiness")" = 60 && echo "ok: 1"'
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "sysctl": {"vm.swappiness": 10},
            "probes": {
                "ok": {"run": ["sh", "-c", check], "metric": r"ok: (\d)", "gate": {"min": 0}}
            },
        },
    )
    before = tree(root)
    result = run_tune("apply", "--yes", profile, "--root", root, "--runtime-only", "--no-persist")
    assert result.code == 3
    assert "ok: measured 1 before, then exited with status 1" in result.err
    assert tree(root) == before
