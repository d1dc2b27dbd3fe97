"""cpu: the governor of every CPU, idle states by name."""

from __future__ import annotations

from pathlib import Path

from conftest import TUNED, UNTUNED, by_id, notes, plan_json, write

CPUS = "/sys/devices/system/cpu"


def cpu(root: Path, n: int, governor: str | None, states: dict[str, int]) -> None:
    """CPU `n` with a scaling governor (None: no cpufreq) and idle states name -> disable."""
    if governor is not None:
        write(root, f"{CPUS}/cpu{n}/cpufreq/scaling_governor", governor + "\n")
    for index, (name, disabled) in enumerate(states.items()):
        write(root, f"{CPUS}/cpu{n}/cpuidle/state{index}/name", name + "\n")
        write(root, f"{CPUS}/cpu{n}/cpuidle/state{index}/disable", f"{disabled}\n")


def test_governor_is_compared_per_cpu(tmp_path: Path) -> None:
    root = tmp_path / "host"
    for n, governor in enumerate(["performance", "schedutil", "performance", "powersave"]):
        cpu(root, n, governor, {})
    write(root, f"{CPUS}/cpufreq/policy0/scaling_governor", "schedutil\n")  # not a cpuN
    plan = plan_json(tmp_path, root, "name: t\ncpu:\n  governor: performance\n")
    assert plan["code"] == 2
    changes = by_id(plan)
    assert sorted(changes) == ["cpu:cpu1:governor", "cpu:cpu3:governor"]
    assert changes["cpu:cpu3:governor"]["current"] == "powersave"
    assert changes["cpu:cpu3:governor"]["desired"] == "performance"


def test_cpus_sort_numerically_in_the_plan(tmp_path: Path) -> None:
    root = tmp_path / "host"
    for n in (10, 2, 1):
        cpu(root, n, "schedutil", {})
    plan = plan_json(tmp_path, root, "name: t\ncpu:\n  governor: performance\n")
    assert [c["target"] for c in plan["changes"]] == [
        "cpu1:governor",
        "cpu2:governor",
        "cpu10:governor",
    ]


def test_no_cpufreq_at_all_is_one_change_from_none(tmp_path: Path) -> None:
    root = tmp_path / "host"
    cpu(root, 0, None, {"POLL": 0, "C1": 0})
    plan = plan_json(tmp_path, root, "name: t\ncpu:\n  governor: performance\n")
    assert plan["code"] == 2
    change = by_id(plan)["cpu:cpu*:governor"]
    assert (change["current"], change["desired"]) == (None, "performance")
    [note] = notes(plan)
    assert note == f"{tmp_path / 'p.yaml'}:3:13: No CPU exposes cpufreq/scaling_governor."


def test_idle_state_is_found_by_name_not_by_index(tmp_path: Path) -> None:
    root = tmp_path / "host"
    cpu(root, 0, None, {"POLL": 0, "C1": 0, "C2": 0})
    cpu(root, 1, None, {"POLL": 0, "C2": 1, "C1": 0})  # C2 is state1 here
    plan = plan_json(tmp_path, root, "name: t\ncpu:\n  idle_states: {disable: [C2]}\n")
    assert plan["code"] == 2
    changes = by_id(plan)
    assert sorted(changes) == ["cpu:cpu0:idle:C2"]
    assert (changes["cpu:cpu0:idle:C2"]["current"], changes["cpu:cpu0:idle:C2"]["desired"]) == (
        "enabled",
        "disabled",
    )


def test_enable_a_disabled_state(tmp_path: Path) -> None:
    root = tmp_path / "host"
    cpu(root, 0, None, {"POLL": 0, "C1": 1})
    plan = plan_json(tmp_path, root, "name: t\ncpu:\n  idle_states: {enable: [C1]}\n")
    change = by_id(plan)["cpu:cpu0:idle:C1"]
    assert (change["current"], change["desired"]) == ("disabled", "enabled")


def test_state_a_cpu_does_not_expose_is_in_sync(tmp_path: Path) -> None:
    # processor.max_cstate=1 running: C2 is gone from every CPU, so it cannot be entered.
    root = tmp_path / "host"
    for n in range(4):
        cpu(root, n, None, {"POLL": 0, "C1": 0})
    plan = plan_json(tmp_path, root, "name: t\ncpu:\n  idle_states: {disable: [C2]}\n")
    assert plan["code"] == 0
    assert plan["changes"] == []
    assert "C2 is not exposed on 4 CPUs: in sync, it cannot be entered." in notes(plan)


def test_state_exposed_on_some_cpus_only(tmp_path: Path) -> None:
    root = tmp_path / "host"
    cpu(root, 0, None, {"POLL": 0, "C1": 0, "C2": 0})
    cpu(root, 1, None, {"POLL": 0, "C1": 0})
    plan = plan_json(tmp_path, root, "name: t\ncpu:\n  idle_states: {disable: [C2]}\n")
    assert sorted(by_id(plan)) == ["cpu:cpu0:idle:C2"]


def test_example_hosts(tmp_path: Path) -> None:
    text = "name: t\ncpu:\n  governor: performance\n  idle_states: {disable: [C2]}\n"
    plan = plan_json(tmp_path, UNTUNED, text)
    changes = by_id(plan)
    assert len(changes) == 256  # 128 governors and 128 C2 states
    assert changes["cpu:cpu64:idle:C2"]["current"] == "enabled"
    assert plan_json(tmp_path, TUNED, text)["code"] == 0


def test_priority_and_reason_of_idle_states(tmp_path: Path) -> None:
    root = tmp_path / "host"
    cpu(root, 0, None, {"C2": 0})
    plan = plan_json(
        tmp_path,
        root,
        "name: t\ncpu:\n  idle_states: {disable: [C2], priority: P0, reason: exit latency}\n",
    )
    change = by_id(plan)["cpu:cpu0:idle:C2"]
    assert (change["priority"], change["reason"]) == ("P0", "exit latency")
