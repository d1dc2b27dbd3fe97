"""The fleet runner: every host gets a result, in order; one host's failure touches no other."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest
from conftest import BLACKWELL, TUNED, UNTUNED, run_tune

from reconciler.audit.engine import audit
from reconciler.audit.model import Report
from reconciler.audit.thresholds import Thresholds
from reconciler.core.changes import Plan
from reconciler.core.errors import HostError
from reconciler.core.files import Files, Request
from reconciler.hosts.base import Host
from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.fleet import HostResult, fleet_exit_code, for_each_host
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile
from reconciler.render import as_json, fleet
from reconciler.render import audit_fleet as audit_fleet


class CountingHost(Host):
    def __init__(self, name: str, fails: bool = False) -> None:
        self.name = name
        self.fails = fails
        self.closed = 0

    def fetch(self, request: Request) -> Files:
        if self.fails:
            raise HostError(f"{self.name}: cannot connect to {self.name}:22: connection refused.")
        return Files(contents={"/proc/sys/kernel/hostname": self.name.encode()})

    def close(self) -> None:
        self.closed += 1


def test_a_run_in_process_leaves_the_garbage_collector_as_it_found_it() -> None:
    import gc

    before = gc.get_freeze_count()
    for_each_host([CountingHost(f"h{n}") for n in range(3)], lambda h: h.fetch(Request()))
    run_tune("plan", BLACKWELL, "--root", UNTUNED, "--format", "json")
    assert gc.get_freeze_count() == before


def test_results_keep_host_order_and_failures_stay_with_their_host() -> None:
    hosts = [CountingHost(f"h{n}", fails=n in (2, 5)) for n in range(8)]
    results = for_each_host(hosts, lambda h: h.fetch(Request()).value("/proc/sys/kernel/hostname"))
    assert [r.name for r in results] == [h.name for h in hosts]
    assert [r.value for r in results] == ["h0", "h1", None, "h3", "h4", None, "h6", "h7"]
    assert [str(r.error) for r in results if r.error] == [
        "h2: cannot connect to h2:22: connection refused.",
        "h5: cannot connect to h5:22: connection refused.",
    ]
    assert all(h.closed == 1 for h in hosts), "every host is closed after its work, failed or not"


def test_no_more_than_forks_hosts_run_at_once() -> None:
    running, most = 0, 0
    lock = threading.Lock()
    gate = threading.Barrier(3, timeout=60)

    def work(host: CountingHost) -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        gate.wait()  # three at a time must be possible, or this deadlocks (and times out)
        with lock:
            running -= 1
        return host.name

    results = for_each_host([CountingHost(f"h{n}") for n in range(9)], work, forks=3)
    assert [r.value for r in results] == [f"h{n}" for n in range(9)]
    assert most == 3


def test_a_bug_on_one_host_is_that_host_s_error() -> None:
    def work(host: CountingHost) -> int:
        return 1 // (host.name != "h1")

    results = for_each_host([CountingHost("h0"), CountingHost("h1")], work)
    assert results[0].value == 1
    assert "internal error: ZeroDivisionError" in str(results[1].error)


def test_progress_counts_every_host_once() -> None:
    seen: list[tuple[int, int]] = []
    for_each_host(
        [CountingHost(f"h{n}") for n in range(5)], lambda h: 0, progress=lambda *a: seen.append(a)
    )
    assert sorted(seen) == [(n, 5) for n in range(1, 6)]


@pytest.mark.parametrize(
    ("values", "failed", "code"),
    [([True, True], False, 0), ([True, False], False, 2), ([False, True], True, 1), ([], False, 0)],
)
def test_fleet_exit_code(values: list[bool], failed: bool, code: int) -> None:
    results: list[HostResult[bool]] = [HostResult(f"h{n}", value=v) for n, v in enumerate(values)]
    if failed:
        results.append(HostResult("down", error=HostError("down: connection refused.")))
    assert fleet_exit_code(results, clean=lambda clean: clean) == code


def fleet_of_snapshots() -> list[HostResult[Plan]]:
    loaded = load_profile(BLACKWELL)

    def plan_of(root: Path) -> Plan:
        return make_plan(loaded, observe(SnapshotHost(root, name=root.name), loaded.profile))

    return [
        HostResult("tuned-1", value=plan_of(TUNED)),
        HostResult("untuned-1", value=plan_of(UNTUNED)),
        HostResult("down-1", error=HostError("down-1: cannot connect to down-1:22: refused.")),
    ]


def test_fleet_text_is_a_table_then_details_of_hosts_not_in_sync() -> None:
    out = fleet.render(fleet_of_snapshots(), "text", color=False)
    table, _, details = out.partition("\n\n")
    # Changes are profile entries, as the plan's summary counts them; writes the knobs.
    assert table.splitlines() == [
        "HOST       STATUS                       RUNTIME  REBOOT  WRITES  PENDING  CHECKS OK  PLAN",
        "tuned-1    in sync                            0       0       0        0      11/11  -",
        "untuned-1  29 changes, 3 failed checks       24       5     368        0       8/11  A",
        "down-1     error                              -       -       -        -          -  -",
    ]
    assert details.startswith("3 hosts: 1 in sync, 1 with changes, 1 unreachable or failed.")
    assert "== Plan A, for 1 host: untuned-1\nRuntime phase" in details
    assert "Plan: 29 to change (24 runtime, 5 reboot; 368 writes)" in details
    assert details.endswith("Errors:\n    down-1: cannot connect to down-1:22: refused.\n")
    assert "tuned-1" not in details.replace("untuned-1", ""), "hosts in sync have no details"


def test_fleet_text_verbose_shows_each_host_in_full() -> None:
    out = fleet.render(fleet_of_snapshots(), "text", color=False, verbose=True)
    assert "== untuned-1\ntune plan: blackwell-8x on gpu-node-07" in out
    assert "== down-1: error\ndown-1: cannot connect to down-1:22: refused." in out
    assert "== tuned-1" not in out, "hosts in sync have no details"


def a_thousand_hosts() -> tuple[list[HostResult[Plan]], dict[str, list[str]]]:
    """1,000 fabricated hosts, as a big fleet is: most alike, some drifted their own way, a
    few down; each plan's host its own (name, kernel). And the hosts of each sort."""
    tuned, untuned, _ = (r.value for r in fleet_of_snapshots())
    assert tuned is not None and untuned is not None
    one_off = dataclasses.replace(untuned, compared=untuned.compared[1:])
    results: list[HostResult[Plan]] = []
    sorts: dict[str, list[str]] = {"tuned": [], "untuned": [], "one-off": [], "own": [], "down": []}
    for n in range(1000):
        name = f"gpu-{n:04d}"
        if n % 50 == 7:
            error = HostError(f"{name}: cannot connect to {name}:22: connection refused.")
            results.append(HostResult(name, error=error))
            sorts["down"].append(name)
            continue
        plan, sort = (
            (tuned, "tuned")
            if n % 3 == 0
            else (one_off, "one-off")
            if n % 10 == 1
            else (untuned, "untuned")
        )
        if n % 97 == 5 and sort != "tuned":  # a knob of its own: a plan no other host has
            own = dataclasses.replace(plan.compared[0], desired=str(n))
            plan, sort = dataclasses.replace(plan, compared=(own, *plan.compared[1:])), "own"
        sorts[sort].append(name)
        host = dataclasses.replace(plan.host, name=name, kernel=f"6.8.{n % 4}")
        results.append(HostResult(name, value=dataclasses.replace(plan, host=host)))
    return results, sorts


def test_a_thousand_hosts_are_a_row_each_and_each_plan_once() -> None:
    results, sorts = a_thousand_hosts()
    out = fleet.render(results, "text", color=False)
    lines = out.splitlines()
    assert len(lines) < 2000, len(lines)
    rows = [line for line in lines if line.startswith("gpu-")]
    assert [row.split()[0] for row in rows] == [r.name for r in results], "a row a host"
    # The plan most hosts share, once, with how many hosts it is for and the first of them.
    untuned = sorts["untuned"]
    letter = next(row.split()[-1] for row in rows if row.startswith(untuned[0]))
    heading = f"== Plan {letter}, for {len(untuned)} hosts: {', '.join(untuned[:8])} and "
    assert out.count(heading) == 1
    assert {row.split()[0] for row in rows if row.endswith(f"  {letter}")} == set(untuned)
    assert out.count("Runtime phase (live: tune apply --runtime-only)") == fleet.IN_FULL
    # The plans of fewer hosts by a line each: all there, each a letter of its own.
    assert "Other plans, each by its last line (-v shows each in full):" in out
    letters = {row.split()[-1] for row in rows} - {"-"}
    assert len(letters) == 2 + len(sorts["own"])
    # Alike errors once, the hosts named.
    assert out.count("connection refused") == 1
    assert "(20 hosts): cannot connect to <host>:22: connection refused." in out
    changed = 1000 - len(sorts["tuned"]) - len(sorts["down"])
    assert (
        f"1000 hosts: {len(sorts['tuned'])} in sync, {changed} with changes, 20 unreachable" in out
    )
    verbose = fleet.render(results, "text", color=False, verbose=True)
    assert verbose.count("tune plan: blackwell-8x on ") == changed
    assert verbose.count("connection refused") == 20


def test_fleet_json_is_a_list_of_the_one_host_documents() -> None:
    objects = json.loads(fleet.render(fleet_of_snapshots(), "json", color=False))
    assert [(o["target"], o["kind"], o["status"]) for o in objects] == [
        ("tuned-1", "plan", "in-sync"),
        ("untuned-1", "plan", "changes"),
        ("down-1", "plan", "error"),
    ]
    single = json.loads(as_json(fleet_of_snapshots()[0].value))
    assert objects[0] == single | {"target": "tuned-1"}, "the same object as for one host"
    assert objects[1]["summary"] | {"in_sync": 0} == {
        "changes": 29,
        "runtime": 24,
        "reboot": 5,
        "in_sync": 0,
        "pending": 0,
        "checks": 11,
        "failed_checks": 3,
        "entries": {"changes": 29, "runtime": 24, "reboot": 5, "in_sync": 1},
        "writes": {"total": 368, "runtime": 363, "reboot": 5},
    }
    assert objects[2] == {
        "format_version": 2,
        "kind": "plan",
        "host": {"name": "down-1"},
        "status": "error",
        "error": "down-1: cannot connect to down-1:22: refused.",
        "target": "down-1",
    }


def test_fleet_markdown_has_the_summary_table_and_each_host_report() -> None:
    out = fleet.render(fleet_of_snapshots(), "markdown", color=False)
    assert "| untuned-1 | 29 changes, 3 failed checks | 24 | 5 | 368 | 0 | 8/11 |" in out
    assert "# Plan: gpu-node-07 against profile `blackwell-8x`" in out
    assert "# down-1: error" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", BLACKWELL, "--root", TUNED, "-H", "a"], "--root reads a snapshot"),
        (["plan", BLACKWELL, "-H", "a", "-H", "b", "--root", TUNED], "--root reads a snapshot"),
        (["plan", BLACKWELL, "--limit", "gpu"], "--limit selects hosts of an inventory; give -i"),
        (["plan", BLACKWELL, "-H", "a", "-H", "a"], "host a is given twice"),
        (
            ["snapshot", BLACKWELL, "-o", "x.tar.gz", "-H", "a", "-H", "b"],
            "tune snapshot works on one",
        ),
    ],
)
def test_remote_usage_errors(args: list[object], message: str) -> None:
    result = run_tune(*args)  # type: ignore[arg-type]
    assert result.code == 64
    assert message in result.err


def audit_of_snapshots() -> list[HostResult[Report]]:
    return [
        HostResult("tuned-1", value=audit(SnapshotHost(TUNED, name="tuned-1"), Thresholds())),
        HostResult("untuned-1", value=audit(SnapshotHost(UNTUNED, name="untuned-1"), Thresholds())),
        HostResult("down-1", error=HostError("down-1: cannot connect to down-1:22: refused.")),
    ]


def test_a_fleet_audit_is_a_table_of_hosts_then_of_findings_then_each_finding_once() -> None:
    out = audit_fleet.render(audit_of_snapshots(), "text", color=False)
    hosts, findings, totals, *details = out.split("\n\n")
    assert hosts.splitlines() == [
        "HOST       STATUS         P0  P1  P2",
        "tuned-1    clean           0   0   0",
        "untuned-1  21 actionable   6  13   2",
        "down-1     error           -   -   -",
    ]
    rows = [line.split() for line in findings.splitlines()]
    assert rows[0] == ["FINDING", "PRIORITY", "HOSTS", "ON"]
    assert ["pcie-mrrs", "P0", "1/2", "untuned-1"] in rows
    assert ["kernel-version", "P1", "1/2", "untuned-1"] in rows
    assert totals == "3 hosts: 1 clean, 1 with actionable findings, 1 unreachable or failed."
    kernel = next(d for d in details if d.startswith("== kernel-version")).splitlines()
    assert kernel[0] == "== kernel-version [kernel, P1]"
    assert kernel[2].startswith("  untuned-1 (not fixable by tune): ")
    assert details[-1] == "== down-1: error\ndown-1: cannot connect to down-1:22: refused.\n"


def test_a_fleet_audit_in_json_is_one_host_s_object_for_each_host() -> None:
    results = audit_of_snapshots()
    objects = json.loads(audit_fleet.render(results, "json", color=False))
    one = run_tune("audit", "--root", UNTUNED, "--format", "json")
    assert [(o["target"], o["status"]) for o in objects] == [
        ("tuned-1", "clean"),
        ("untuned-1", "actionable"),
        ("down-1", "error"),
    ]
    assert {o["kind"] for o in objects} == {"audit"}
    untuned = objects[1]
    assert untuned == json.loads(one.out) | {"target": "untuned-1"}
    assert objects[2]["error"] == "down-1: cannot connect to down-1:22: refused."


def test_commands_for_one_host_do_not_offer_fleet_options() -> None:
    for command in ("snapshot", "report", "rollback", "verify", "probe"):
        help_text = run_tune(command, "--help").out
        assert "--inventory" not in help_text and "--forks" not in help_text, command
        assert "-H, --host" in help_text, command
    for command in ("plan", "check", "apply", "audit", "history"):
        help_text = run_tune(command, "--help").out
        assert "-i, --inventory" in help_text and "--limit" in help_text, command


def test_a_fleet_audit_in_markdown_is_the_table_then_each_host_s_report() -> None:
    out = audit_fleet.render(audit_of_snapshots(), "markdown", color=False)
    assert "| untuned-1 | 21 actionable | 6 | 13 | 2 |" in out
    assert out.count("# Host audit: ") == 2
    assert "# down-1: error\n\n- down-1: cannot connect to down-1:22: refused." in out


def test_the_fleet_summaries_count_hosts_that_skip_entries() -> None:
    """A knob a host lacks is skipped, never a silent success across the fleet."""
    from reconciler.apply.engines import ApplyResult
    from reconciler.steps.ops import Skipped

    results = fleet_of_snapshots()
    tuned = results[0].value
    assert tuned is not None
    lacking = dataclasses.replace(tuned.compared[0], current=None, missing=True)
    odd = dataclasses.replace(tuned, compared=(lacking, *tuned.compared[1:]))
    results.append(HostResult("odd-1", value=odd))
    out = fleet.render(results, "text", color=False)
    assert "4 hosts: 2 in sync, 1 with changes, 1 unreachable or failed; 1 of them skip" in out
    done = [
        HostResult("tuned-1", value=ApplyResult(None, 0)),
        HostResult("odd-1", value=ApplyResult(None, 0)),
        HostResult("mod-1", value=ApplyResult("r1", 3, skipped=(Skipped("module:x", "no x"),))),
    ]
    plans = [HostResult("tuned-1", value=tuned), HostResult("odd-1", value=odd)]
    recap = fleet.applied(done, color=False, plans=plans)
    assert recap.splitlines()[0].split() == [
        "HOST",
        "RESULT",
        "CHANGES",
        "WRITES",
        "SKIPPED",
        "RUN",
    ]
    assert [line.split()[-2] for line in recap.splitlines()[1:4]] == ["0", "1", "1"]
    assert (
        "3 hosts: 1 applied, 2 already in sync, 0 rolled back, 0 unreachable or failed; "
        "2 of them skip entries" in recap
    )
