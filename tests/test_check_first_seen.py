"""The record of when `tune check` first saw each drift: kept across runs, forgotten when a knob
is back, and never trusted or fatal when it is not one tune wrote."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import run_tune, write
from small_host import SmallHost, build, persisted, write_profile

from reconciler.drift.first_seen import RECORD, parse, updated

T0 = 1748822400.0  # 2025-06-02T00:00:00Z


def test_updated_keeps_first_sightings_and_forgets_what_is_back() -> None:
    before = {"sysctl:a": "2025-06-01T00:00:00Z", "sysctl:b": "2025-06-01T00:00:00Z"}
    assert updated(before, ["sysctl:a", "sysctl:c"], T0) == {
        "sysctl:a": "2025-06-01T00:00:00Z",
        "sysctl:c": "2025-06-02T00:00:00Z",
    }


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'{"format": 2, "first_seen": {}}',
        b'{"format": 1, "first_seen": {"a": 1}}',
        b'{"format": 1, "first_seen": {"a": "yesterday"}}',
        b"\xff",
    ],
)
def test_anything_but_a_record_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse(data)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A small host in sync with `profile`, its boot-time file included, and no state of tune's
    (as the tuned example host): the record is what these tests are about."""
    sysctls = {"kernel.numa_balancing": "0"}
    return build(tmp_path / "h", SmallHost(sysctls=sysctls, etc=persisted(sysctls)))


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    return write_profile(tmp_path / "p.yaml", {"sysctl": {"kernel.numa_balancing": 0}})


def drifted(host: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(time, "time", lambda: T0)
    write(host, "/proc/sys/kernel/numa_balancing", "1\n")
    return host / RECORD.lstrip("/")


def test_a_damaged_record_is_a_note_and_starts_again(
    host: Path, profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = drifted(host, monkeypatch)
    write(host, RECORD, "{cut")
    record.chmod(0o600)
    result = run_tune("check", profile, "--root", host)
    assert result.code == 2
    assert f"{RECORD}: ignored, first sightings start again (" in result.out
    assert "since 2025-06-02T00:00:00Z" in result.out
    assert json.loads(record.read_text())["first_seen"] == {
        "sysctl:kernel.numa_balancing": "2025-06-02T00:00:00Z"
    }


def test_a_record_others_can_write_is_not_believed(
    host: Path, profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = drifted(host, monkeypatch)
    planted = {"format": 1, "first_seen": {"sysctl:kernel.numa_balancing": "2001-01-01T00:00Z"}}
    write(host, RECORD, json.dumps(planted))
    record.chmod(0o666)
    result = run_tune("check", profile, "--root", host)
    assert result.code == 2
    assert "2001" not in result.out
    assert "other users can write to it" in result.out
    # Replaced by one of its own, which the next check believes.
    assert record.stat().st_mode & 0o777 == 0o600
    assert "2001" not in record.read_text()


def test_a_record_that_cannot_be_written_costs_the_since_not_the_check(
    host: Path, profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = drifted(host, monkeypatch)
    record.parent.parent.mkdir(parents=True, exist_ok=True)
    record.parent.write_text("a file where the directory goes\n")
    result = run_tune("check", profile, "--root", host)
    assert result.code == 2
    assert "First sightings of drift are not kept:" in result.out


def test_a_state_directory_others_can_write_is_not_written_in(
    host: Path, profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record file is tune's to replace; a directory above it that another user could
    write to (and so swap for a link) is not tune's to write in at all."""
    record = drifted(host, monkeypatch)
    state = record.parent.parent
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o777)
    result = run_tune("check", profile, "--root", host)
    assert result.code == 2
    assert "First sightings of drift are not kept: refusing to use /var/lib/tune:" in result.out
    assert not record.parent.exists()
