"""Saved plans (`tune plan` then `tune apply`): said where they are on every run, named with
their age when applied, held to the host and the phases they were made for."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import BLACKWELL, SAVED, UNTUNED, run_tune, write
from small_host import SmallHost, build, tree, write_profile

from reconciler.core.errors import ExitCode

BOOT_FILE = "etc/default/grub.d/90-tune.cfg"


def test_every_plan_says_where_it_saved_itself_and_how_to_apply_it() -> None:
    untuned = UNTUNED  # a plan reads the host, never writes to it
    both = run_tune("plan", BLACKWELL, "--root", untuned, "--format", "json")
    assert both.err == (
        f"{SAVED}`tune apply --runtime-only` applies its live settings, `tune apply` both phases.\n"
    )
    named = run_tune("plan", BLACKWELL, "--root", untuned, "--runtime-only", "--save", "p.json")
    assert named.err == (
        "tune: plan saved in p.json; `tune apply p.json` applies it (the runtime phase only).\n"
    )
    assert json.loads(Path("p.json").read_text())["phases"] == ["runtime"]


def test_a_runtime_only_plan_shows_and_applies_the_runtime_phase_only(untuned: Path) -> None:
    shown = run_tune("plan", BLACKWELL, "--root", untuned, "--runtime-only")
    assert shown.code == ExitCode.CHANGES
    assert "Runtime phase" in shown.out and "Reboot phase" not in shown.out
    applied = run_tune("apply", "--yes")
    assert applied.code == 0, applied.err
    assert not (untuned / BOOT_FILE).exists()  # the boot configuration was not in the plan
    assert "Applied 24 changes (363 writes)" in applied.out


def test_a_plan_is_not_applied_to_a_phase_it_does_not_cover(tmp_path: Path) -> None:
    untuned = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    run_tune("plan", profile, "--root", untuned, "--runtime-only")
    before = tree(untuned)
    refused = run_tune("apply", "--yes", "--reboot-phase")
    assert refused.code == ExitCode.USAGE
    assert refused.err.splitlines()[-1] == (
        ".tune/plan.json covers the runtime phase only, not the reboot phase: run tune plan "
        "again without --runtime-only or --reboot-phase."
    )
    assert tree(untuned) == before


def test_a_bare_apply_names_the_saved_plan_and_its_age(tmp_path: Path) -> None:
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    assert run_tune("plan", profile, "--root", root).code == ExitCode.CHANGES
    saved = Path(".tune/plan.json")
    data = json.loads(saved.read_text())
    saved.write_text(json.dumps({**data, "saved_at": data["saved_at"] - 3 * 3600 - 5}))
    applied = run_tune("apply", "--yes")
    assert applied.code == 0, applied.err
    assert applied.err == (
        "tune: applying the plan in .tune/plan.json, saved 3 hours ago (profile small for "
        "small, both phases).\n"
    )


def test_a_plan_made_for_another_host_is_refused(tmp_path: Path) -> None:
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    assert run_tune("plan", profile, "--root", root).code == ExitCode.CHANGES
    # The same place, another machine: reinstalled, or a snapshot of another node copied over.
    write(root, "/proc/sys/kernel/hostname", "other\n")
    before = tree(root)
    refused = run_tune("apply", "--yes")
    assert refused.code == ExitCode.HOST_ERROR
    assert refused.err.splitlines()[-1] == (
        ".tune/plan.json was made for host small, not other: run tune plan on this host."
    )
    assert tree(root) == before


def test_a_plan_saved_before_phases_were_recorded_covers_both(tmp_path: Path) -> None:
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    assert run_tune("plan", profile, "--root", root).code == ExitCode.CHANGES
    saved = Path(".tune/plan.json")
    data = json.loads(saved.read_text())
    del data["phases"], data["saved_at"]
    saved.write_text(json.dumps({**data, "version": 1}))
    applied = run_tune("apply", "--yes")
    assert applied.code == 0, applied.err
    assert applied.err == (
        "tune: applying the plan in .tune/plan.json (profile small for small, both phases).\n"
    )
