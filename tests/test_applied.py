"""Reading run journals (the apply contract) as data: bytes in, an applied run or an error out."""

from __future__ import annotations

import json

import pytest
from applied_state import journal

from reconciler.apply.applied import applied_run, latest_applied
from reconciler.core.errors import JournalError
from reconciler.core.files import Files

PATH = "/var/lib/tune/runs/20250601T120000Z-a1b2c3.jsonl"
STEP = {
    "id": "sysctl:vm.swappiness",
    "kind": "sysctl",
    "target": "vm.swappiness",
    "current": "60",
    "desired": "10",
}


def lines(*records: object) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def test_an_applied_run() -> None:
    run = applied_run(PATH, journal(steps=(STEP,)).encode())
    assert run is not None
    assert (run.run_id, run.profile, run.phase, run.finished) == (
        "20250601T120000Z-a1b2c3",
        "blackwell-8x",
        "all",
        "2025-06-01T12:00:05Z",
    )
    assert [(s.id, s.desired) for s in run.steps] == [("sysctl:vm.swappiness", "10")]
    assert run.finished_at.timestamp() == 1748779205


@pytest.mark.parametrize(
    "data",
    [
        journal().encode()[:40],  # the run record cut short by a crash: nothing was written
        journal(outcome="rolled-back").encode(),
        journal(outcome="rollback-failed").encode(),
        journal(outcome=None).encode(),  # interrupted: no end record
        journal().encode()[:-3],  # the end record cut short by a crash
    ],
    ids=["cut-run", "rolled-back", "rollback-failed", "interrupted", "cut-end"],
)
def test_runs_that_did_not_apply(data: bytes) -> None:
    assert applied_run(PATH, data) is None


def test_a_time_without_offset_is_utc() -> None:
    run = applied_run(PATH, journal(finished="2025-06-01T12:00:05").encode())
    assert run is not None and run.finished_at.timestamp() == 1748779205


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            lines({"type": "written", "seq": 1}, {"type": "end"}),
            f"{PATH}:1: a run journal starts with a run record",
        ),
        (b"[1]\n{}\n", f"{PATH}:1: a journal record is a JSON object"),
        (b"", f"{PATH}:1: the journal is empty, so what the run changed cannot be known"),
        (b"\0" * 4096, f"{PATH}:1: the journal holds 4,096 NUL bytes and no record"),
        (
            journal(steps=({**STEP, "desired": 10},)).encode(),
            f"{PATH}:2: step.desired is 10, not text or a list or null",
        ),
        (journal(finished="yesterday").encode(), f"{PATH}: end time 'yesterday' is not ISO 8601."),
        (
            lines(
                {"type": "run"},
                {"type": "end", "outcome": "applied", "finished": "2025-06-01"},
            ),
            f"{PATH}:1: the run record has no run_id",
        ),
    ],
)
def test_journals_that_are_not_journals(data: bytes, message: str) -> None:
    with pytest.raises(JournalError) as caught:
        applied_run(PATH, data)
    assert str(caught.value).splitlines()[0].startswith(message)


def test_latest_applied_goes_newest_first_and_skips_what_did_not_apply() -> None:
    older = "/var/lib/tune/runs/20250501T000000Z-000001.jsonl"
    newer = "/var/lib/tune/runs/20250701T000000Z-000002.jsonl"
    files = Files(
        contents={
            PATH: journal(steps=(STEP,)).encode(),
            older: journal(run_id="20250501T000000Z-000001").encode(),
            newer: journal(run_id="20250701T000000Z-000002", outcome="rolled-back").encode(),
            "/var/lib/tune/runs/notes.txt": b"not a journal",
        },
        listings={"/var/lib/tune/runs": (older, newer, PATH, "/var/lib/tune/runs/notes.txt")},
    )
    run = latest_applied(files)
    assert run is not None and run.run_id == "20250601T120000Z-a1b2c3"
    assert latest_applied(Files()) is None


def test_an_unreadable_journal_is_an_error() -> None:
    files = Files(errors={PATH: "Permission denied"}, listings={"/var/lib/tune/runs": (PATH,)})
    with pytest.raises(JournalError, match="cannot read run journal \\(Permission denied\\)"):
        latest_applied(files)


def test_run_ids_of_one_second_sort_in_the_order_they_were_made() -> None:
    """`tune rollback` takes the last run by its id: two runs in one second (a script that
    applies twice) must not sort by a random suffix."""
    from datetime import UTC, datetime

    from reconciler.apply.journal import new_run_id

    second = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
    for _ in range(20):  # the suffix's random digit must never reorder them
        made = [new_run_id(second.replace(microsecond=us)) for us in (0, 1, 15, 16, 999_999)]
        assert sorted(made) == made
        assert all(len(i) == len("20261201T100000Z-a1b2c3") for i in made)


def planned(phase: str) -> bytes:
    """A run of `phase` whose plan had a runtime and a reboot change, and which applied the
    runtime one: what `tune apply --runtime-only` journals."""
    text = journal(steps=(STEP,)).replace('"phase": "all"', f'"phase": "{phase}"')
    head, rest = text.split("\n", 1)
    changes = [
        {"id": "sysctl:vm.swappiness", "phase": "runtime", "applied_now": True},
        {"id": "cmdline:amd_pstate", "phase": "reboot", "applied_now": False},
        {"id": "sysctl:kernel.numa_balancing", "phase": "runtime", "applied_now": False},
    ]
    plan = json.dumps({"type": "plan", "changes": changes, "pending": [], "failed_checks": []})
    return f"{head}\n{plan}\n{rest}".encode()


@pytest.mark.parametrize(
    ("phase", "not_applied"),
    [
        ("runtime", {"cmdline:amd_pstate"}),
        # A runtime change a reboot-phase run left alone was applied before, or never: unknown
        # from this run, so it stays drift.
        ("reboot", set()),
        ("all", set()),
        ("a phase from the future", set()),
    ],
)
def test_the_knobs_of_a_phase_the_run_did_not_apply(phase: str, not_applied: set[str]) -> None:
    run = applied_run(PATH, planned(phase))
    assert run is not None and run.not_applied == not_applied


def test_a_run_journaled_before_the_plan_record_left_nothing_unapplied() -> None:
    run = applied_run(PATH, journal(steps=(STEP,)).replace('"all"', '"runtime"').encode())
    assert run is not None and run.not_applied == frozenset()


def test_what_a_run_left_out_is_not_applied() -> None:
    # `apply --skip-missing`: a module the kernel lacks, and the file written without it.
    left = ["file:/etc/modules-load.d/tune.conf", "module:nvidia_peermem"]
    plan = json.dumps({"type": "plan", "changes": [], "left_out": left})
    head, rest = journal(steps=(STEP,)).split("\n", 1)
    run = applied_run(PATH, f"{head}\n{plan}\n{rest}".encode())
    assert run is not None and run.not_applied == frozenset(left)
