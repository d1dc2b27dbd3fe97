"""The shipped cron and systemd examples run a `tune check` command line this tune accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from applied_state import write_applied
from conftest import PROJECT, run_tune, write

from reconciler.apply.journal import STATE

EXAMPLES = PROJECT / "examples"
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter/"


def cron_command() -> list[str]:
    jobs = [
        line
        for line in (EXAMPLES / "cron/tune-check").read_text().splitlines()
        if line.strip() and not line.startswith("#") and "=" not in line.split()[0]
    ]
    assert len(jobs) == 1
    fields = shlex.split(jobs[0])
    assert fields[:8] == ["*/5", "*", "*", "*", "*", "root", "flock", "-n"]
    # The lock is tune's root-only state directory: one in a directory every user can write
    # (/run/lock) lets any user hold it and silence the check.
    assert fields[8] == STATE
    return fields[9:]


def systemd_command() -> list[str]:
    service = (EXAMPLES / "systemd/tune-check.service").read_text()
    exec_start = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    return shlex.split(exec_start.removeprefix("ExecStart="))


@pytest.mark.parametrize("command", [cron_command, systemd_command], ids=["cron", "systemd"])
def test_example_runs_quietly_on_a_tuned_host_and_mails_drift(
    tuned: Path, tmp_path: Path, command
) -> None:
    argv = command()
    assert Path(argv[0]).name == "tune"
    args = [a.replace(TEXTFILE_DIR, f"{tmp_path}/") for a in argv[1:]]
    write_applied(tuned)
    quiet = run_tune(*args, "--root", tuned)
    assert (quiet.code, quiet.out, quiet.err) == (0, "", "")
    assert (tmp_path / "tune.prom").is_file()
    write(tuned, "/proc/sys/kernel/numa_balancing", "1\n")
    drift = run_tune(*args, "--root", tuned)
    assert drift.code == 2
    assert drift.out.startswith("DRIFT sysctl kernel.numa_balancing: 1 (want 0) since ")


def test_timer_is_persistent_and_spread() -> None:
    timer = (EXAMPLES / "systemd/tune-check.timer").read_text().splitlines()
    assert "Persistent=true" in timer
    assert any(line.startswith("RandomizedDelaySec=") for line in timer)
    assert any(line.startswith("OnCalendar=") for line in timer), "Persistent needs OnCalendar"


def test_alert_rules_use_only_metrics_tune_writes(tuned: Path, tmp_path: Path) -> None:
    from ruamel.yaml import YAML

    rules = YAML(typ="safe").load((EXAMPLES / "prometheus/tune-alerts.yml").read_text())
    exprs = {r["alert"]: r["expr"] for group in rules["groups"] for r in group["rules"]}
    assert {"TuneDrift", "TuneCheckFailing", "TuneCheckStale"} <= set(exprs)
    write_applied(tuned)
    write(tuned, "/proc/sys/kernel/numa_balancing", "1\n")  # a drift, so every series is there
    prom = tmp_path / "tune.prom"
    run_tune("check", "--since-apply", "--root", tuned, "--prometheus", prom)
    written = {
        line.split()[2] for line in prom.read_text().splitlines() if line.startswith("# TYPE")
    }
    for alert, expr in exprs.items():
        used = set(re.findall(r"\btune_[a-z_]+", expr))
        assert used and used <= written, f"{alert} uses {used - written}, which tune never writes"
