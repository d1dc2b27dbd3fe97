"""cpu: the governor of every CPU, idle states by name.

Cases of a host's files in and a plan out are data, in tests/kinds/cpu/ (`test_kinds_data`);
what stays here are tables of values, the example hosts and behaviour.
"""

from __future__ import annotations

from pathlib import Path

from conftest import TUNED, UNTUNED, by_id, plan_json


def test_example_hosts(tmp_path: Path) -> None:
    text = "name: t\ncpu:\n  governor: performance\n  idle_states: {disable: [C2]}\n"
    plan = plan_json(tmp_path, UNTUNED, text)
    changes = by_id(plan)
    assert len(changes) == 256  # 128 governors and 128 C2 states
    assert changes["cpu:cpu64:idle:C2"]["current"] == "enabled"
    assert plan_json(tmp_path, TUNED, text)["code"] == 0
