"""`tune report`: the record of real runs on small snapshot hosts, against golden Markdown.

Run ids, times and the snapshot's path differ per test run; they are normalised before the
comparison. Set TUNE_UPDATE_GOLDEN=1 to rewrite the golden files (then read the diff).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import run_tune, write
from markdown_view import acting, cells, codes
from shared_run import SharedRun
from small_host import SmallHost, build

from reconciler.apply.journal import RUNS
from reconciler.render import report as render

GOLDEN = Path(__file__).parent / "data" / "report"
PROFILE = """
name: small-gpu
sysctl:
  kernel.numa_balancing:
    value: 0
    priority: P0
    reason: "automatic NUMA page migration stalls DMA"
  vm.swappiness:
    value: {swappiness}
    priority: P2
    reason: "keep the model server's pages in memory"
cmdline:
  set:
    processor.max_cstate:
      value: 1
      priority: P1
      reason: "deep C-states add wake-up latency"
checks:
  kernel:
    value: ">=6.15"
    reason: "newer kernel"
probes:
  score:
    run: [sh, -c, 'echo "score: $((100 - $(cat "$TUNE_ROOT/proc/sys/vm/swappiness")))"']
    metric: 'score: ([0-9]+)'
    unit: points
    gate: {{regress_max: 5%}}
  latency:
    run: [sh, -c, 'echo "p50: $(cat "$TUNE_ROOT/proc/sys/vm/swappiness").5 ms"']
    metric: 'p50: ([0-9.]+) ms'
    better: lower
    unit: ms
"""


def applied_host(tmp_path: Path, swappiness: int, *flags: str) -> tuple[Path, int]:
    root = build(
        tmp_path / "host",
        SmallHost(
            sysctls={"vm.swappiness": "60", "kernel.numa_balancing": "1"},
            etc={
                "proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n",
                "etc/kernel/cmdline": "root=/dev/sda1 ro quiet\n",
            },
        ),
    )
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILE.format(swappiness=swappiness))
    result = run_tune(
        "apply", "--yes", profile, "--root", root, "--runtime-only", "--no-persist", *flags
    )
    return root, result.code


def normalised(text: str, root: Path) -> str:
    text = text.replace(str(root), "ROOT")
    text = re.sub(r"\d{8}T\d{6}Z-[0-9a-f]{6}", "RUN-ID", text)
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TIME", text)


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("TUNE_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def report(root: Path, *args: str) -> str:
    result = run_tune("report", "--root", root, *args)
    assert result.code == 0, result.err
    return normalised(result.out, root)


@pytest.mark.parametrize(
    ("golden", "swappiness", "flags", "code"),
    [
        ("applied.md", 10, (), 0),
        ("rolled-back.md", 90, (), 3),
        ("kept.md", 90, ("--keep-on-regression",), 0),
    ],
)
def test_report_of_a_recorded_run_matches_its_golden_file(
    tmp_path: Path, golden: str, swappiness: int, flags: tuple[str, ...], code: int
) -> None:
    root, got = applied_host(tmp_path, swappiness, *flags)
    assert got == code
    assert_golden(golden, report(root))


def test_json_has_the_same_numbers_and_output_file(tmp_path: Path) -> None:
    root, _ = applied_host(tmp_path, 90)
    data = json.loads(report(root, "--format", "json"))
    assert data["run"]["outcome"] == "rolled-back"
    score, latency = data["probes"]
    assert (score["before"], score["after"], score["change_percent"]) == (40.0, 10.0, -75.0)
    assert score["gate"] == {"ok": False, "message": score["gate"]["message"], "kept": False}
    assert (latency["before"], latency["after"], latency["gate"]) == (60.5, 90.5, None)
    assert [c["id"] for c in data["changes"]] == [
        "sysctl:kernel.numa_balancing",
        "sysctl:vm.swappiness",
    ]
    assert {c["status"] for c in data["changes"]} == {"rolled back"}
    assert [c["id"] for c in data["still_needed"]["reboot"]] == ["cmdline:processor.max_cstate"]
    assert [c["id"] for c in data["still_needed"]["checks"]] == ["check:kernel"]
    out = tmp_path / "system-improve.md"
    result = run_tune("report", "--root", root, "-o", out)
    assert result.code == 0 and result.out == "" and "(rolled-back)" in result.err
    assert normalised(out.read_text(), root) == (GOLDEN / "rolled-back.md").read_text()


def test_report_picks_the_run_asked_for(tmp_path: Path) -> None:
    root, _ = applied_host(tmp_path, 90)  # rolled back
    runs = sorted((root / RUNS.lstrip("/")).glob("*.jsonl"))
    old = runs[0].stem
    # A run journaled before tune recorded plans, probes and reasons (hand-written, fixed id).
    newer = "29991231T235959Z-abcdef"
    (root / RUNS.lstrip("/") / f"{newer}.jsonl").write_text(
        "\n".join(
            json.dumps(r)
            for r in (
                {
                    "type": "run",
                    "run_id": newer,
                    "started": "2999-12-31T23:59:59Z",
                    "profile": "old",
                    "phase": "runtime",
                    "host": "small",
                    "boot_id": None,
                },
                {
                    "type": "step",
                    "seq": 0,
                    "id": "sysctl:vm.swappiness",
                    "kind": "sysctl",
                    "target": "vm.swappiness",
                    "prior": "60",
                    "desired": "10",
                    "probe": {"path": "/proc/sys/vm/swappiness", "read": "words"},
                    "expect": "10",
                    "restored": "60",
                    "do": [{"op": "set", "path": "/proc/sys/vm/swappiness", "value": "10"}],
                    "undo": [],
                },
                {"type": "written", "seq": 0},
                {"type": "verified", "seq": 0},
                {"type": "end", "outcome": "applied", "finished": "2999-12-31T23:59:59Z"},
            )
        )
        + "\n"
    )
    latest = report(root)
    assert latest.startswith("# tune run RUN-ID: old on small\n")
    assert "No probes ran in this run." in latest
    assert "### unrecorded priority (1 change)" in latest
    assert "  write /proc/sys/vm/swappiness: 10\n" in latest
    assert "Not recorded: this run was journaled before tune recorded its plan." in latest
    assert report(root, old).startswith("# tune run RUN-ID: small-gpu on small\n")


def test_no_runs_and_unknown_run_are_one_sentence_errors(tmp_path: Path) -> None:
    root = build(tmp_path / "host", SmallHost())
    none = run_tune("report", "--root", root)
    assert none.code == 1 and "no tune runs on" in none.err and "Traceback" not in none.err
    applied_host(tmp_path / "b", 10)
    missing = run_tune("report", "20000101T000000Z-000000", "--root", tmp_path / "b" / "host")
    assert missing.code == 1 and "no run 20000101T000000Z-000000" in missing.err


def test_reboot_phase_changes_a_run_made_are_listed_as_waiting_for_the_reboot(
    tmp_path: Path,
) -> None:
    root = build(tmp_path / "host", SmallHost())
    run_id = "20260101T000000Z-000001"
    change = {
        "id": "cmdline:processor.max_cstate",
        "kind": "cmdline",
        "current": None,
        "desired": "1",
        "phase": "reboot",
        "priority": "P1",
        "reason": "",
        "applied_now": True,
    }
    pending = {
        "id": "cmdline:iommu",
        "running": None,
        "configured": "pt",
        "action": "reboot to apply",
    }
    journal = [
        {
            "type": "run",
            "run_id": run_id,
            "started": "2026-01-01T00:00:00Z",
            "profile": "p",
            "phase": "all",
            "host": "small",
            "boot_id": None,
        },
        {"type": "plan", "changes": [change], "pending": [pending], "failed_checks": []},
        {"type": "end", "outcome": "applied", "finished": "2026-01-01T00:00:01Z"},
    ]
    write(root, f"{RUNS}/{run_id}.jsonl", "".join(json.dumps(r) + "\n" for r in journal))
    text = report(root)
    assert (
        "### Made by this run, in effect after the next reboot\n\n"
        "- **cmdline:processor.max_cstate** (P1): (absent) → `1`\n"
    ) in text
    assert "### Configured, waiting for a reboot\n\n- **cmdline:iommu**: running (absent), " in text


EVIL = "`v` [fix](https://evil.example/r) ![](https://evil.example/p.png) <img src=x> | ~~s~~"


def hostile(value: object) -> object:
    """Every string of a report, with links, an image, HTML, a pipe and backticks after it."""
    if isinstance(value, str):
        return f"{value} {EVIL}"
    if isinstance(value, list):
        return [hostile(v) for v in value]
    if isinstance(value, dict):
        return {k: v if k == "better" else hostile(v) for k, v in value.items()}
    return value


def test_a_report_shows_the_text_of_its_run_record_as_text(tmp_path: Path) -> None:
    """A run record quotes the host and the profile (values, ids, paths, messages): none of
    it becomes a link, an image, HTML or another table cell in the Markdown report."""
    root, _ = applied_host(tmp_path, 90)
    data = hostile(json.loads(report(root, "--format", "json")))
    assert isinstance(data, dict)
    out = render.markdown(data)
    assert acting(out) == [], out
    assert f"60 {EVIL}" in codes(out)  # the prior swappiness, exact in its code span
    assert cells(out, "Profile") == ["Profile", f"small-gpu {EVIL}"], out


def test_a_report_folds_what_each_cpu_and_device_had_done_alike(
    runtime_applied: SharedRun,
) -> None:
    untuned = runtime_applied.root  # `tune apply --yes BLACKWELL --runtime-only`
    applied = runtime_applied.result
    assert applied.code == 0, applied.err
    text = report(untuned)
    lines = text.splitlines()
    assert "### P0 (4 changes, 138 writes)" in lines  # 4 profile entries, 138 knobs
    idle = lines.index(
        "- **cpu idle:C2 on 128 CPUs (cpu0-127)**: `enabled` → `disabled` (applied). Why: C2 "
        "exit latency (\\~400 us on Turin) stalls the CPU threads that launch GPU work."
    )
    assert lines[idle + 3] == "  write /sys/devices/system/cpu/cpu0/cpuidle/state2/disable: 1"
    assert lines[idle + 6] == "  The same for cpu1-127."
    assert "  The same for 0000:21:00.0 ... 0000:e1:00.0." in lines
    assert len(lines) < 250  # 1,498 unfolded
    # JSON keeps every step, each with what it folds by.
    steps = json.loads(report(untuned, "--format", "json"))["changes"]
    assert len(steps) == 363
    governor = next(s for s in steps if s["id"] == "cpu:cpu7:governor")
    assert (governor["setting"], governor["subject"]) == ("governor", "cpu7")
