"""cpu: the governor of every CPU, idle states by name.

Cases of a host's files in and a plan out are data, in tests/kinds/cpu/ (`test_kinds_data`);
what stays here are tables of values, the example hosts and behaviour.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import TUNED, UNTUNED, by_id, notes, plan_json, run_tune


def test_example_hosts(tmp_path: Path) -> None:
    text = "name: t\ncpu:\n  governor: performance\n  idle_states: {disable: [C2]}\n"
    plan = plan_json(tmp_path, UNTUNED, text)
    changes = by_id(plan)
    assert len(changes) == 256  # 128 governors and 128 C2 states
    assert changes["cpu:cpu64:idle:C2"]["current"] == "enabled"
    assert plan_json(tmp_path, TUNED, text)["code"] == 0


BASE = Path(__file__).resolve().parent.parent / "profiles" / "base-gpu-inference.yaml"


def test_the_base_profile_converges_on_a_vm_without_cpufreq(untuned: Path) -> None:
    # A VM: the hypervisor keeps frequency scaling and no cpufreq driver binds, so no CPU has
    # cpufreq/. The governor is then no knob of this host: one note, apply does the rest, and
    # check is silent after. Before, the governor stayed drift forever and apply refused.
    for cpufreq in untuned.glob("sys/devices/system/cpu/cpu*/cpufreq"):
        shutil.rmtree(cpufreq)
    shutil.rmtree(untuned / "sys/devices/system/cpu/cpufreq", ignore_errors=True)
    applied = run_tune("apply", BASE, "--runtime-only", "--root", untuned, "--yes")
    assert applied.code == 0, applied.err
    plan = plan_json(untuned.parent, untuned, BASE.read_text())
    assert plan["code"] == 0 and plan["changes"] == []
    assert any("No CPU exposes cpufreq/scaling_governor" in n for n in notes(plan))
    check = run_tune("check", BASE, "--root", untuned, "--quiet")
    assert (check.code, check.out) == (0, "")
