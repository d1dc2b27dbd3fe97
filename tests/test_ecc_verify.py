"""`tune verify` after the boot a reboot-phase apply of ECC prepared: each GPU must run with
the ECC mode tune set pending (`ecc.mode.current`), or the pending mode is rolled back."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import profile, run_tune, write
from engines.test_ecc import BUSES, PROFILE, ecc_host, ecc_of

from reconciler.facts import nvidia_smi
from reconciler.facts.kernel import BOOT_ID
from reconciler.hosts import recorded

PENDING = "var/lib/tune/pending.json"


def applied(tmp_path: Path) -> Path:
    root = ecc_host(tmp_path / "host")
    write(root, BOOT_ID, "00000000-0000-4000-8000-000000000001\n")
    done = run_tune("apply", profile(tmp_path, PROFILE), "--reboot-phase", "--root", root, "-y")
    assert done.code == 0, done.err
    return root


def boot(root: Path, *, takes_pending: bool) -> None:
    """The snapshot boots: a new boot id; each GPU runs with its pending ECC mode, or (a GPU
    that did not take it, `takes_pending` false) keeps the mode it had."""
    write(root, BOOT_ID, "00000000-0000-4000-8000-000000000002\n")
    if not takes_pending:
        return
    stdout = root / recorded.where(nvidia_smi.QUERY).lstrip("/") / "stdout"
    lines = stdout.read_text().splitlines(keepends=True)
    booted = [line.replace("Enabled, Disabled\n", "Disabled, Disabled\n") for line in lines]
    stdout.write_text("".join(booted))


def test_the_boot_brought_the_ecc_mode_and_verify_says_so(tmp_path: Path) -> None:
    root = applied(tmp_path)
    recorded = json.loads((root / PENDING).read_text())["expected"]
    assert recorded == {"ecc": dict.fromkeys(BUSES, "Disabled")}
    boot(root, takes_pending=True)
    result = run_tune("verify", "--root", root)
    assert result.code == 0, result.err
    assert f"ok  GPU {BUSES[1]} has ecc.mode.current: Disabled" in result.out
    assert not (root / PENDING).exists()
    # What the plan and `tune check` see: nothing left to change, nothing pending.
    check = run_tune("check", profile(tmp_path, PROFILE), "--root", root)
    assert check.code == 0, check.out


def test_a_gpu_that_kept_its_mode_fails_verify_and_the_pending_mode_is_rolled_back(
    tmp_path: Path,
) -> None:
    root = applied(tmp_path)
    assert ecc_of(root) == [("Enabled", "Disabled")] * 2
    boot(root, takes_pending=False)
    result = run_tune("verify", "--root", root)
    assert result.code == 3
    assert f"GPU {BUSES[0]} has ecc.mode.current: Enabled, not Disabled" in result.err
    assert ecc_of(root) == [("Enabled", "Enabled")] * 2


def test_check_reports_the_mode_waiting_for_the_reboot_as_pending_not_drift(
    tmp_path: Path,
) -> None:
    root = applied(tmp_path)
    check = run_tune("check", profile(tmp_path, PROFILE), "--root", root)
    assert check.code == 0, check.out
    assert "2 pending reboot" in check.out
