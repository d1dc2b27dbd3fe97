"""Probes: spec validation, the runner (argv, timeout, process group, metric), gates."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import profile, run_tune, write
from hypothesis import assume, given
from hypothesis import strategies as st
from small_host import SmallHost, build

from reconciler.core.schema import validate
from reconciler.probes.gates import judge
from reconciler.probes.runner import run_probe
from reconciler.profile.probe_spec import Gate, ProbeSpec


def spec(**fields: object) -> ProbeSpec:
    return validate(ProbeSpec, fields)


def test_command_probe_median_of_repeats(tmp_path: Path) -> None:
    counter = tmp_path / "n"
    counter.write_text("0")
    # Prints 10, 30, 20 on successive runs: the median is 20, not the last or the mean.
    script = (
        f"n=$(($(cat {counter}) + 1)); echo $n > {counter}; "
        'case $n in 1) v=10;; 2) v=30;; *) v=20;; esac; echo "tokens: $v token/s"'
    )
    result = run_probe("tps", spec(run=["sh", "-c", script], metric=r"tokens: ([0-9.]+)", repeat=3))
    assert result.values == (10.0, 30.0, 20.0)
    assert result.median == 20.0
    assert result.ok and result.skipped is None


def test_metric_missing_and_failing_command_are_errors() -> None:
    missing = run_probe("x", spec(run=["echo", "nothing here"], metric=r"tps: (\d+)"))
    assert missing.error is not None and "not found" in missing.error
    failing = run_probe("x", spec(run=["sh", "-c", "echo boom >&2; exit 3"], metric=r"(\d+)"))
    assert failing.error == "exited with status 3: boom"
    absent = run_probe("x", spec(run=["/nonexistent/bench"], metric=r"(\d+)"))
    assert absent.error is not None and absent.error.startswith("exited with status 127")


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    started = time.monotonic()
    result = run_probe("slow", spec(run=["sh", "-c", script], metric=r"(\d+)", timeout=0.5))
    assert result.error == "timed out after 0.5 s"
    assert time.monotonic() - started < 30
    child = int(pidfile.read_text())
    for _ in range(50):  # the kernel reaps the orphan shortly after SIGKILL
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"background child {child} survived the probe's timeout")


def test_probe_reads_snapshot_state_through_tune_root(tmp_path: Path) -> None:
    untuned = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    text = """
name: probes
probes:
  swappiness:
    run: [sh, -c, 'echo "value: $(cat "$TUNE_ROOT/proc/sys/vm/swappiness")"']
    metric: 'value: ([0-9]+)'
    better: lower
    gate: {max: 30}
"""
    path = profile(tmp_path, text)
    before = run_tune("probe", path, "--root", untuned, "--format", "json")
    assert before.code == 2, before.err
    data = json.loads(before.out)
    assert data["probes"][0]["median"] == 60
    assert "above the maximum 30" in data["gates"][0]["message"]
    write(untuned, "/proc/sys/vm/swappiness", "10\n")
    after = run_tune("probe", path, "--root", untuned)
    assert after.code == 0
    assert "swappiness" in after.out and " 10 " in after.out


def test_builtin_gpu_probe_without_cuda_is_skipped_not_failed(tmp_path: Path) -> None:
    have_cuda = _cuda_available()
    if have_cuda:
        pytest.skip("this machine has a CUDA device; see test_builtin_gpu_probe_on_a_gpu")
    result = run_probe("p2p", spec(builtin="gpu-p2p", metric="sum_gbps"))
    assert result.ok
    assert result.skipped is not None and result.skipped.startswith("skipped: no CUDA device")
    assert result.values == ()


@pytest.mark.skipif(not shutil.which("nvidia-smi"), reason="no NVIDIA GPU on this machine")
def test_builtin_gpu_probe_on_a_gpu() -> None:
    if not _cuda_available():
        pytest.skip("an NVIDIA driver but neither PyTorch nor CuPy with CUDA")
    result = run_probe("h2d", spec(builtin="gpu-p2p", metric="h2d_gbps", timeout=600))
    assert result.ok and result.skipped is None, result.output
    assert result.median is not None and result.median > 1.0  # any PCIe link beats 1 GB/s
    print(json.dumps(result.details, indent=1))


def _cuda_available() -> bool:
    from reconciler.probes.runner import run_argv

    done = run_argv(["python3", "-c", "import torch; print(torch.cuda.is_available())"], 120, {})
    if done.returncode == 0 and done.stdout.strip() == "True":
        return True
    done = run_argv(
        ["python3", "-c", "import cupy; print(cupy.cuda.runtime.getDeviceCount())"], 120, {}
    )
    return done.returncode == 0 and done.stdout.strip() not in ("", "0")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"metric": "x"}, "exactly one of builtin or run"),
        ({"builtin": "gpu-p2p", "run": ["x"], "metric": "sum_gbps"}, "exactly one"),
        ({"builtin": "gpu-p2p", "metric": "tflops"}, "has no metric 'tflops'"),
        ({"run": ["x"], "metric": "no group"}, "exactly one (group)"),
        ({"run": ["x"], "metric": "(a)(b)"}, "exactly one (group)"),
        ({"run": ["x"], "metric": "(unclosed"}, "not a valid regular expression"),
        ({"run": [], "metric": "(x)"}, "at least 1 item"),
        ({"run": ["x"], "metric": "(x)", "repeat": 0}, "greater than or equal to 1"),
        ({"run": ["x"], "metric": "(x)", "gate": {}}, "needs regress_max, min or max"),
        ({"run": ["x"], "metric": "(x)", "gate": {"regress_max": "150%"}}, "less than or equal"),
        ({"run": ["x"], "metric": "(x)", "better": "more"}, "'higher' or 'lower'"),
    ],
)
def test_invalid_probe_specs(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        validate(ProbeSpec, fields)
    assert message in str(info.value)


def test_probe_errors_in_a_profile_have_positions(tmp_path: Path) -> None:
    path = profile(tmp_path, "name: p\nprobes:\n  tps:\n    run: [bench]\n    metric: 'no group'\n")
    result = run_tune("validate", path)
    assert result.code == 65
    assert result.err.startswith(f"{path}:4:5: probes.tps: metric needs exactly one (group)")


def test_percent_gate_accepts_both_spellings() -> None:
    assert validate(Gate, {"regress_max": "5%"}).regress_max == 5.0
    assert validate(Gate, {"regress_max": 5}).regress_max == 5.0


values = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False)
percents = st.floats(min_value=0, max_value=100, allow_nan=False)


@given(before=values, pct=percents, better=st.sampled_from(["higher", "lower"]))
def test_no_change_never_regresses(before: float, pct: float, better: str) -> None:
    assert judge(Gate(regress_max=pct), better, before, before).ok


@given(before=positive, pct=percents, after=positive, better_after=positive)
def test_regress_gate_is_monotonic_for_higher_is_better(
    before: float, pct: float, after: float, better_after: float
) -> None:
    assume(better_after >= after)
    gate = Gate(regress_max=pct)
    if judge(gate, "higher", before, after).ok:
        assert judge(gate, "higher", before, better_after).ok


@given(before=values, after=values, pct=percents)
def test_lower_is_better_mirrors_higher_is_better(before: float, after: float, pct: float) -> None:
    gate = Gate(regress_max=pct)
    assert judge(gate, "lower", before, after).ok == judge(gate, "higher", -before, -after).ok


@given(before=positive, pct=st.floats(min_value=0.5, max_value=99, allow_nan=False))
def test_regress_gate_boundary(before: float, pct: float) -> None:
    gate = Gate(regress_max=pct)
    assert judge(gate, "higher", before, before * (1 - (pct - 0.25) / 100)).ok
    assert not judge(gate, "higher", before, before * (1 - (pct + 0.25) / 100)).ok
    assert judge(gate, "lower", before, before * (1 + (pct - 0.25) / 100)).ok
    assert not judge(gate, "lower", before, before * (1 + (pct + 0.25) / 100)).ok


@given(after=values, low=values, high=values)
def test_absolute_bounds(after: float, low: float, high: float) -> None:
    assume(low <= high)
    verdict = judge(Gate(min=low, max=high), "higher", None, after)
    assert verdict.ok == (low <= after <= high)


def test_missing_results_do_not_fail_gates() -> None:
    assert judge(Gate(regress_max=1), "higher", None, 5.0).ok  # nothing to compare with
    assert judge(Gate(min=100), "higher", 5.0, None).ok  # probe skipped after the phase


def test_runner_uses_no_shell_for_profile_argv(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    result = run_probe("x", spec(run=["echo", f"1; touch {marker}"], metric=r"(\d+)"))
    assert result.values == (1.0,)
    assert not marker.exists()


def test_probes_do_not_inherit_settings_tune_made_for_itself(tmp_path: Path) -> None:
    import reconciler

    script = 'echo "value: ${PYDANTIC_DISABLE_PLUGINS:-unset}" | sed "s/__all__/1/; s/unset/0/"'
    result = run_probe("env", spec(run=["sh", "-c", script], metric=r"value: (\d)"))
    expected = 0.0 if reconciler._OWN_SETTING else 1.0
    assert result.values == (expected,)
