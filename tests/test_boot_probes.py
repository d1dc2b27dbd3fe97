"""Probes around the reboot phase: `tune apply --reboot-phase` measures before, the snapshot
"reboots" (tests/test_reboot_phase.py's simulation), `tune verify` measures after the boot and
judges the gates; a failed gate rolls the boot configuration back like a failed check.

The probe reads the snapshot's running /proc/cmdline, so what it prints changes at the boot,
and back again once a rollback and another boot restore the prior command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tune
from small_host import SmallHost, build, tree, write_profile
from test_reboot_phase import reboot
from test_report import assert_golden, normalised

from reconciler.apply.journal import read_run, run_ids
from reconciler.hosts.directory import SnapshotHost

KERNEL_CMDLINE = "root=/dev/sda1 ro quiet\n"
# Prints the running processor.max_cstate, 9 when the kernel was booted without it.
CSTATE = [
    "sh",
    "-c",
    'c=$(grep -o "processor.max_cstate=[0-9]*" "$TUNE_ROOT/proc/cmdline");'
    ' c=${c#*=}; echo "cstate: ${c:-9}"',
]


def setup(tmp_path: Path, better: str, gate: dict[str, object]) -> tuple[Path, Path]:
    root = build(
        tmp_path / "host",
        SmallHost(
            etc={
                "proc/cmdline": f"BOOT_IMAGE=/vmlinuz {KERNEL_CMDLINE}",
                "etc/kernel/cmdline": KERNEL_CMDLINE,
            }
        ),
    )
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "cmdline": {"set": {"processor.max_cstate": 1}},
            "probes": {
                "cstate": {
                    "run": CSTATE,
                    "metric": r"cstate: ([0-9]+)",
                    "better": better,
                    "gate": gate,
                }
            },
        },
    )
    return root, profile


def run_records(root: Path) -> list[dict[str, Any]]:
    host = SnapshotHost(root)
    run = read_run(host, run_ids(host)[-1])
    assert run is not None
    return [r.to_json() for r in run.records]


def measured(root: Path) -> dict[str, float]:
    return {
        str(r["when"]): r["results"][0]["median"]
        for r in run_records(root)
        if r["type"] == "probes"
    }


def apply_and_reboot(root: Path, profile: Path) -> dict[str, bytes]:
    result = run_tune("apply", profile, "--reboot-phase", "--root", root, "-y")
    assert result.code == 0, result.err
    assert "Probes cstate run before the first change; `tune verify` runs them again" in result.out
    # Only the measurement before: the phase is not in effect until the boot.
    assert measured(root) == {"before": 9.0}
    assert [r["type"] for r in run_records(root)][-1] == "end"
    reboot(root)
    assert "processor.max_cstate=1" in (root / "proc/cmdline").read_text()
    return tree(root)


def report(root: Path) -> dict[str, Any]:
    result = run_tune("report", "--root", root, "--format", "json")
    assert result.code == 0, result.err
    data: dict[str, Any] = json.loads(result.out)
    return data


def test_verify_measures_after_the_boot_and_the_report_shows_both(tmp_path: Path) -> None:
    root, profile = setup(tmp_path, "lower", {"regress_max": "5%"})
    apply_and_reboot(root, profile)
    result = run_tune("verify", "--root", root)
    assert result.code == 0, result.err
    assert measured(root) == {"before": 9.0, "after-boot": 1.0}
    records = run_records(root)
    [gate] = [r for r in records if r["type"] == "gate"]
    assert (gate["when"], gate["ok"], gate["before"], gate["after"]) == ("after-boot", True, 9, 1)
    # The measurement follows the apply's end; a new end keeps the outcome last.
    assert [r["type"] for r in records][-4:] == ["end", "probes", "gate", "end"]
    [row] = report(root)["probes"]
    assert (row["before"], row["after"], row["after_boot"]) == (9.0, None, 1.0)
    assert row["change_percent"] == pytest.approx(-88.888, abs=0.01)
    markdown = run_tune("report", "--root", root).out
    assert_golden("after-boot.md", normalised(markdown, root))


def test_a_gate_that_fails_after_the_boot_rolls_the_boot_configuration_back(
    tmp_path: Path,
) -> None:
    root, profile = setup(tmp_path, "higher", {"regress_max": "5%"})
    before = tree(root)
    apply_and_reboot(root, profile)
    result = run_tune("verify", "--root", root)
    assert result.code == 3
    assert "probe gate failed: cstate: 9 -> 1 (-88.9%) regresses more than 5%" in result.err
    assert "its 1 write to the boot configuration is rolled back" in result.err
    assert (root / "etc/kernel/cmdline").read_text() == KERNEL_CMDLINE
    assert not (root / "var/lib/tune/pending.json").exists()
    records = run_records(root)
    assert records[-1]["outcome"] == "boot-rolled-back"
    # Booting the restored configuration brings the prior command line, and the number back.
    reboot(root)
    after = tree(root)
    assert {k: v for k, v in after.items() if k != "proc/sys/kernel/random/boot_id"} == {
        k: v for k, v in before.items() if k != "proc/sys/kernel/random/boot_id"
    }
    [row] = report(root)["probes"]
    assert row["gate"]["ok"] is False and row["gate"]["kept"] is False
    markdown = run_tune("report", "--root", root).out
    assert_golden("boot-rolled-back.md", normalised(markdown, root))


def test_keep_on_regression_keeps_the_boot_configuration(tmp_path: Path) -> None:
    root, profile = setup(tmp_path, "higher", {"regress_max": "5%"})
    booted = apply_and_reboot(root, profile)
    result = run_tune("verify", "--root", root, "--keep-on-regression")
    assert result.code == 0, result.err
    assert "gate failed, kept: cstate: 9 -> 1" in result.err
    assert tree(root) == booted
    records = run_records(root)
    assert records[-1] == {**records[-1], "type": "end", "outcome": "applied"}
    [gate] = [r for r in records if r["type"] == "gate"]
    assert gate["kept"] is True


def test_no_probes_at_apply_means_none_after_the_boot(tmp_path: Path) -> None:
    root, profile = setup(tmp_path, "higher", {"regress_max": "5%"})
    result = run_tune("apply", profile, "--reboot-phase", "--root", root, "-y", "--no-probes")
    assert result.code == 0, result.err
    reboot(root)
    assert run_tune("verify", "--root", root).code == 0
    assert not [r for r in run_records(root) if r["type"] in ("probes", "gate")]


def test_an_apply_of_both_phases_is_judged_after_the_boot_against_its_last_measurement(
    tmp_path: Path,
) -> None:
    """Without a phase flag the runtime part takes effect at once and is measured after it;
    the boot's gate then compares with that measurement, the state the boot started from."""
    root, profile = setup(tmp_path, "lower", {"regress_max": "5%"})
    result = run_tune("apply", profile, "--root", root, "-y")
    assert result.code == 0, result.err
    assert "Probes cstate run before the first change and after the last." in result.out
    assert measured(root) == {"before": 9.0, "after": 9.0}
    reboot(root)
    assert run_tune("verify", "--root", root).code == 0
    assert measured(root) == {"before": 9.0, "after": 9.0, "after-boot": 1.0}
    gates = [(r["when"], r["before"], r["after"]) for r in run_records(root) if r["type"] == "gate"]
    assert gates == [("after", 9, 9), ("after-boot", 9, 1)]
    [row] = report(root)["probes"]
    assert (row["before"], row["after"], row["after_boot"]) == (9.0, 9.0, 1.0)
