"""/var/lib/tune/status.json, what an engine reads of tune without parsing text: written whole
by apply, verify and check with what each came to, and printed by `tune status` (text, JSON).
Snapshot hosts; the boot is faked as the reboot-phase tests fake it (`test_reboot_phase.reboot`:
a new boot id, /proc/cmdline from the configured line)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import BLACKWELL, run_tune, write
from small_host import tree
from test_reboot_phase import reboot

from reconciler.apply.journal import run_ids
from reconciler.flow.status import check_writes
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import load_profile
from reconciler.steps.status import STATUS, Status

BOOT_BEFORE = "ff1694c4-cc0f-5bdb-ab8e-46e37d87bf8c"  # the example host's
BOOT_AFTER = "00000000-0000-4000-8000-000000000002"  # `reboot`'s


def status_of(root: Path) -> dict[str, Any]:
    path = root / STATUS.lstrip("/")
    data = json.loads(path.read_text())
    Status.from_json(path.read_bytes())  # what tune status reads back, strictly
    assert isinstance(data, dict)
    return data


def boot_pending(status: dict[str, Any]) -> tuple[object, ...]:
    return status["reboot_pending"], status["armed"], status["pending_run"]


def test_apply_writes_the_profile_in_sync_and_the_boot_it_leaves_pending(untuned: Path) -> None:
    assert not (untuned / STATUS.lstrip("/")).exists()
    assert run_tune("apply", BLACKWELL, "--root", untuned, "-y").code == 0
    (run_id,) = run_ids(SnapshotHost(untuned))
    status = status_of(untuned)
    assert {k: v for k, v in status.items() if k != "updated"} == {
        "format_version": 1,
        "profile": "blackwell-8x",
        "profile_digest": load_profile(BLACKWELL).pinned_as,
        "updated_by": "apply",
        "boot_id": BOOT_BEFORE,
        "in_sync": True,
        "drift": 0,
        "reboot_pending": True,
        "armed": False,
        "pending_run": run_id,
        "last_run": run_id,
        "last_verification": None,
    }
    assert status["updated"].endswith("Z")
    assert (untuned / STATUS.lstrip("/")).stat().st_mode & 0o777 == 0o644

    # Applied again, nothing to change: still in sync, the run and the boot it left kept, and
    # the file not even replaced (new file, then rename: a new inode), as it would say the same.
    inode = (untuned / STATUS.lstrip("/")).stat().st_ino
    assert run_tune("apply", BLACKWELL, "--root", untuned, "-y").code == 0
    assert (untuned / STATUS.lstrip("/")).stat().st_ino == inode
    again = status_of(untuned)
    assert (again["in_sync"], again["last_run"], again["pending_run"]) == (True, run_id, run_id)


def test_a_phase_left_unapplied_is_not_called_in_sync(untuned: Path) -> None:
    grub = untuned / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0", "GRUB_DEFAULT=saved"))
    result = run_tune("apply", BLACKWELL, "--reboot-phase", "--arm", "--root", untuned, "-y")
    assert result.code == 0, result.err
    status = status_of(untuned)
    assert (status["reboot_pending"], status["armed"]) == (True, True)
    assert (status["in_sync"], status["drift"]) == (None, None)  # the runtime phase: tune check


def test_verify_records_not_rebooted_then_held_with_the_new_boot_id(untuned: Path) -> None:
    assert run_tune("apply", BLACKWELL, "--root", untuned, "-y").code == 0
    (run_id,) = run_ids(SnapshotHost(untuned))
    assert run_tune("verify", "--root", untuned).code == 10
    status = status_of(untuned)
    assert status["updated_by"] == "verify"
    assert status["last_verification"] == {
        "boot_id": BOOT_BEFORE,
        "run_id": run_id,
        "verdict": "not-rebooted",
        "at": status["updated"],
    }
    assert (status["reboot_pending"], status["pending_run"]) == (True, run_id)

    reboot(untuned)
    # Booted, not yet verified: no reboot waits any more, the run still awaits its verdict.
    assert run_tune("check", BLACKWELL, "--root", untuned).code == 0
    status = status_of(untuned)
    assert (status["reboot_pending"], status["pending_run"]) == (False, run_id)
    assert run_tune("verify", "--root", untuned).code == 0
    status = status_of(untuned)
    assert status["last_verification"]["verdict"] == "held"
    assert status["last_verification"]["boot_id"] == status["boot_id"] == BOOT_AFTER
    assert (status["reboot_pending"], status["armed"], status["pending_run"]) == (
        False,
        False,
        None,
    )
    assert (status["in_sync"], status["drift"], status["last_run"]) == (True, 0, run_id)


def test_a_failed_verification_is_recorded_and_the_drift_no_longer_known(untuned: Path) -> None:
    assert run_tune("apply", BLACKWELL, "--reboot-phase", "--root", untuned, "-y").code == 0
    reboot(untuned)
    cmdline = untuned / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().replace(" amd_pstate=active", ""))
    assert run_tune("verify", "--root", untuned).code == 3
    status = status_of(untuned)
    assert status["last_verification"]["verdict"] == "failed"
    assert status["last_verification"]["boot_id"] == BOOT_AFTER
    assert (status["in_sync"], status["drift"], status["reboot_pending"]) == (None, None, False)


def test_a_rollback_says_the_host_is_no_longer_known_in_sync(untuned: Path) -> None:
    assert run_tune("apply", BLACKWELL, "--runtime-only", "--root", untuned, "-y").code == 0
    assert status_of(untuned)["in_sync"] is None  # the reboot phase is left: not known
    assert run_tune("apply", BLACKWELL, "--root", untuned, "-y").code == 0
    (_first, second) = run_ids(SnapshotHost(untuned))
    assert (status_of(untuned)["in_sync"], status_of(untuned)["pending_run"]) == (True, second)

    assert run_tune("rollback", "--root", untuned, "-y").code == 0
    status = status_of(untuned)
    assert (status["updated_by"], status["in_sync"], status["drift"]) == ("rollback", None, None)
    # The reboot phase's run is rolled back: its boot no longer pending; the runtime run stays.
    assert (status["reboot_pending"], status["pending_run"]) == (False, None)
    assert status["last_run"] == second
    inode = (untuned / STATUS.lstrip("/")).stat().st_ino
    result = run_tune("rollback", second, "--root", untuned, "-y")
    assert result.code == 0 and "already rolled back" in result.out
    assert (untuned / STATUS.lstrip("/")).stat().st_ino == inode, "nothing restored: not rewritten"


def test_check_records_in_sync_then_the_drift_it_finds(untuned: Path) -> None:
    assert run_tune("apply", BLACKWELL, "--root", untuned, "-y").code == 0
    reboot(untuned)
    assert run_tune("verify", "--root", untuned).code == 0
    verified = status_of(untuned)["last_verification"]

    assert run_tune("check", BLACKWELL, "--root", untuned).code == 0
    status = status_of(untuned)
    assert (status["updated_by"], status["in_sync"], status["drift"]) == ("check", True, 0)
    assert status["profile_digest"] == load_profile(BLACKWELL).pinned_as
    assert status["last_verification"] == verified  # kept: a check verifies no boot

    write(untuned, "/proc/sys/kernel/numa_balancing", "1\n")
    assert run_tune("check", "--root", untuned).code == 2  # against the stored profile
    status = status_of(untuned)
    assert (status["in_sync"], status["drift"]) == (False, 1)
    # The stored profile is the applied one: its digest is the one the apply recorded.
    assert status["profile_digest"] == load_profile(BLACKWELL).pinned_as


def test_check_writes_no_status_where_tune_never_applied(untuned: Path) -> None:
    before = tree(untuned)
    assert run_tune("check", BLACKWELL, "--root", untuned).code == 2
    assert tree(untuned) == before  # no state directory made by a read-only command
    assert not check_writes(SnapshotHost(untuned))


def test_tune_status_prints_a_few_lines_and_the_fields_as_json(untuned: Path) -> None:
    result = run_tune("status", "--root", untuned)
    assert result.code == 0, result.err
    assert "No status on snapshot" in result.out
    empty = json.loads(run_tune("status", "--root", untuned, "--format", "json").out)
    assert (empty["kind"], empty["profile"], empty["in_sync"], empty["armed"]) == (
        "status",
        None,
        None,
        False,
    )

    assert run_tune("apply", BLACKWELL, "--root", untuned, "-y").code == 0
    (run_id,) = run_ids(SnapshotHost(untuned))
    result = run_tune("status", "--root", untuned)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == f"Profile: blackwell-8x ({load_profile(BLACKWELL).pinned_as})"
    assert lines[1] == "State: in sync"
    assert lines[2].startswith(f"Reboot: pending (run {run_id})")
    assert lines[3] == "Last verification: none"
    document = json.loads(run_tune("status", "--root", untuned, "--format", "json").out)
    assert document["host"] == {"name": str(untuned)}
    # The document's format is every document's (2); status.json's its own (1).
    assert (document["format_version"], status_of(untuned)["format_version"]) == (2, 1)
    fields = {k: v for k, v in document.items() if k not in ("kind", "host", "format_version")}
    assert fields == {k: v for k, v in status_of(untuned).items() if k != "format_version"}

    out = untuned.parent / "status.txt"
    assert run_tune("status", "--root", untuned, "-o", out).code == 0
    assert out.read_text() == result.out


def test_a_status_file_tune_did_not_write_exits_1(untuned: Path) -> None:
    write(untuned, STATUS, '{"in_sync": "yes"}\n')
    result = run_tune("status", "--root", untuned)
    assert result.code == 1
    assert f"{STATUS} is not a status tune wrote" in result.err


def test_an_apply_replaces_a_damaged_status(untuned: Path) -> None:
    write(untuned, STATUS, "{cut")
    assert run_tune("apply", BLACKWELL, "--root", untuned, "-y").code == 0
    assert status_of(untuned)["in_sync"] is True


def test_a_runtime_only_apply_leaves_no_boot_pending_and_the_reboot_phase_to_check(
    untuned: Path,
) -> None:
    assert run_tune("apply", BLACKWELL, "--runtime-only", "--root", untuned, "-y").code == 0
    status = status_of(untuned)
    assert (status["reboot_pending"], status["armed"], status["pending_run"]) == (
        False,
        False,
        None,
    )
    assert (status["in_sync"], status["drift"], status["boot_id"]) == (None, None, BOOT_BEFORE)
