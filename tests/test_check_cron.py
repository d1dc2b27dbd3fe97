"""The quick start's flow (docs/quickstart.md) as an operator runs it, then `tune check --quiet`
from cron for a day: a host on which exactly the documented flow ran is silent and exits 0 until
something actually moves, and a drift's "since" is its first sighting, whatever the clock says
later."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import BLACKWELL, run_tune, write
from small_host import SmallHost, build, persisted, write_profile

from reconciler.drift.first_seen import RECORD

START = datetime(2025, 6, 2, 0, 0, tzinfo=UTC)
CRON_EVERY = timedelta(hours=1)  # cron runs it every 5 minutes; an hour keeps the test short


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = START
        monkeypatch.setattr(time, "time", lambda: self.now.timestamp())

    def stamp(self) -> str:
        return self.now.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


def applied_runtime_only(root: Path) -> None:
    """`tune plan PROFILE`, then `tune apply --runtime-only --yes`, as the quick start says."""
    assert run_tune("plan", BLACKWELL, "--root", root).code == 2
    applied = run_tune("apply", "--runtime-only", "--yes", "--root", root)
    assert applied.code == 0, applied.err


def cron(root: Path, clock: Clock, runs: int) -> list[tuple[int, str, str]]:
    """`tune check --quiet` (no PROFILE: the stored one; no terminal) `runs` times, an
    interval apart."""
    seen = []
    for _ in range(runs):
        result = run_tune("check", "--quiet", "--root", root)
        seen.append((result.code, result.out, result.err))
        clock.now += CRON_EVERY
    return seen


@pytest.mark.slow
def test_a_day_of_cron_after_the_documented_flow_is_silent_until_a_knob_moves(
    untuned: Path, clock: Clock
) -> None:
    applied_runtime_only(untuned)
    # The reboot phase was never applied and the example host fails three audit checks
    # (kernel, cpufreq driver, IOMMU): reported by a plain check, never mailed.
    loud = run_tune("check", "--root", untuned)
    assert "NOT APPLIED cmdline amd_pstate" in loud.out
    assert "FAIL check kernel: 6.8.12-9-pve (want >=6.14)" in loud.out
    assert loud.code == 0

    assert cron(untuned, clock, 24) == [(0, "", "")] * 24
    # The TuneDrift alert (tune_knobs_drifted > 0) stays quiet; the rest has its own series.
    prom = untuned.parent / "tune.prom"
    assert run_tune("check", "--quiet", "--root", untuned, "--prometheus", prom).code == 0
    assert {
        line.split("{")[0]: line.rsplit(" ", 1)[1]
        for line in prom.read_text().splitlines()
        if line.startswith(("tune_knobs_", "tune_checks_failed", "tune_applied"))
    } == {
        "tune_knobs_drifted": "0",
        "tune_knobs_not_applied": "5",
        "tune_checks_failed": "3",
        "tune_applied": "1",
    }

    write(untuned, "/proc/sys/kernel/numa_balancing", "1\n")
    first_sighting = clock.stamp()
    line = f"DRIFT sysctl kernel.numa_balancing: 1 (want 0) since {first_sighting}\n"
    assert cron(untuned, clock, 12) == [(2, line, "")] * 12

    # Put back by hand: silent again, and a later drift is a new first sighting.
    write(untuned, "/proc/sys/kernel/numa_balancing", "0\n")
    assert cron(untuned, clock, 2) == [(0, "", "")] * 2
    write(untuned, "/proc/sys/kernel/numa_balancing", "1\n")
    again = clock.stamp()
    assert again != first_sighting
    assert cron(untuned, clock, 1) == [(2, line.replace(first_sighting, again), "")]


@pytest.fixture
def small_tuned(tmp_path: Path) -> tuple[Path, Path]:
    """A small host in sync with a profile of two sysctls and the kernel check, boot-time file
    included, and no state of tune's (as the tuned example host): what a check of first
    sightings needs."""
    sysctls = {"kernel.numa_balancing": "0", "vm.swappiness": "10"}
    root = build(tmp_path / "h", SmallHost(sysctls=sysctls, etc=persisted(sysctls)))
    profile = write_profile(
        tmp_path / "p.yaml",
        {"sysctl": {k: int(v) for k, v in sysctls.items()}, "checks": {"kernel": ">=6.14"}},
    )
    return root, profile


def test_the_record_of_first_sightings_is_root_only_and_holds_what_is_wrong_now(
    small_tuned: tuple[Path, Path], clock: Clock
) -> None:
    tuned, profile = small_tuned
    record = tuned / RECORD.lstrip("/")
    (tuned / "var/lib/tune").mkdir(mode=0o700, parents=True)  # tune has state here
    assert run_tune("check", profile, "--root", tuned).code == 0
    assert not record.exists()  # nothing wrong: nothing to remember, no file
    write(tuned, "/proc/sys/kernel/numa_balancing", "1\n")
    write(tuned, "/proc/sys/kernel/osrelease", "6.8.12-9-pve\n")
    run_tune("check", profile, "--root", tuned)
    assert record.stat().st_mode & 0o777 == 0o600
    assert record.parent.stat().st_mode & 0o777 == 0o700
    first = clock.stamp()
    clock.now += CRON_EVERY
    write(tuned, "/proc/sys/kernel/osrelease", "6.14.0-1-pve\n")
    run_tune("check", profile, "--root", tuned)
    assert json.loads(record.read_text()) == {
        "format": 1,
        "first_seen": {"sysctl:kernel.numa_balancing": first},
    }


def test_a_host_tune_keeps_no_state_on_is_not_written_by_a_check(
    small_tuned: tuple[Path, Path],
) -> None:
    """A snapshot (the bundled example hosts among them) is read, never changed, by a check:
    without tune's state directory there, first sightings are not kept."""
    tuned, profile = small_tuned
    write(tuned, "/proc/sys/kernel/numa_balancing", "1\n")
    before = sorted(p for p in tuned.rglob("*"))
    drifted = run_tune("check", profile, "--root", tuned)
    assert drifted.code == 2, drifted.err
    assert sorted(p for p in tuned.rglob("*")) == before


def test_after_a_rollback_nothing_is_applied_and_cron_stays_quiet(
    untuned: Path, clock: Clock
) -> None:
    applied_runtime_only(untuned)
    rolled = run_tune("rollback", "--yes", "--root", untuned)
    assert rolled.code == 0, rolled.err
    # The rollback took the stored profile away: the check says what it found, exit 0.
    assert cron(untuned, clock, 2) == [(0, "", "")] * 2
    loud = run_tune("check", "--root", untuned)
    assert loud.code == 0
    assert "No run tune applied is in effect here" in loud.out
    assert loud.out.startswith("tune check: blackwell-8x on gpu-node-07")
    # Nothing was compared: no counts of checks or reboots that the profile was never asked.
    assert loud.out.splitlines()[-1] == (
        "Not applied: no run of tune is in effect on this host, and no profile is stored "
        "to compare it with; give PROFILE to see what is not applied."
    )
    quiet_json = json.loads(run_tune("check", "--root", untuned, "--format", "json").out)
    assert (quiet_json["compared"], quiet_json["status"]) == (False, "not-applied")
    metrics = untuned / "tune.prom"
    assert run_tune("check", "--root", untuned, "--prometheus", metrics).code == 0
    series = [line for line in metrics.read_text().splitlines() if not line.startswith("#")]
    assert [line for line in series if line.startswith("tune_")][2:] == [
        'tune_applied{profile="blackwell-8x"} 0'
    ]
    # Against the profile, every difference is one tune does not claim: not applied.
    against = run_tune("check", BLACKWELL, "--root", untuned, "--format", "json")
    report = json.loads(against.out)
    assert (against.code, report["status"], report["drift"]) == (0, "failing-checks", [])
    assert report["compared"] is True
    assert len(report["not_applied"]) == 368


def test_an_interrupted_run_is_not_taken_for_a_rolled_back_one(tuned: Path) -> None:
    from applied_state import write_run

    # The first apply died half-way: some of its writes are in effect, and no profile is stored.
    write_run(tuned, run_id="20250602T000000Z-cccccc", outcome=None)
    alone = run_tune("check", "--quiet", "--root", tuned)
    # Cron sees it as apply says it: interrupted, awaiting rollback (exit 5), and what to run.
    assert alone.code == 5, alone.err
    assert "run 20250602T000000Z-cccccc on snapshot" in alone.err
    assert "was interrupted after" in alone.err and "`tune rollback` restores them" in alone.err
    assert "no profile has been applied here" not in alone.err
    applying = run_tune("apply", BLACKWELL, "--root", tuned, "-y")
    assert applying.code == alone.code
    write(tuned, "/proc/sys/kernel/numa_balancing", "1\n")
    drift = run_tune("check", BLACKWELL, "--quiet", "--root", tuned)
    assert drift.code == 2
    assert drift.out.startswith("DRIFT sysctl kernel.numa_balancing: 1 (want 0)")
