"""`tune check --prometheus`: metrics node_exporter's textfile collector can read, written so a
scrape never sees half a file."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from applied_state import write_applied
from conftest import BLACKWELL, PROJECT, run_tune, write
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from reconciler.core.changes import Change, HostFacts, Phase, Plan
from reconciler.drift.check import DriftReport
from reconciler.render.metrics import exposition

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        assert family.documentation, f"{family.name} has no HELP"
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


# The tuned example host's profile entries as metrics count them: its 241 knobs less the
# per-CPU and per-device ones, each entry once (the one ConnectX's two settings are two).
ENTRIES = 29


def knob(target: str, kind: str = "sysctl", phase: str = "runtime") -> dict[str, str]:
    return {"profile": "blackwell-8x", "kind": kind, "target": target, "phase": phase}


def test_metrics_of_a_drifted_host(tuned: Path, tmp_path: Path) -> None:
    write_applied(tuned)
    write(tuned, "/proc/sys/kernel/numa_balancing", "1\n")
    target = tmp_path / "tune.prom"
    result = run_tune("check", BLACKWELL, "--root", tuned, "--quiet", "--prometheus", target)
    assert result.code == 2
    samples = parse(target.read_text())
    assert value(samples, "tune_check_success") == 1
    assert value(samples, "tune_last_check_timestamp_seconds") > 1.7e9
    assert value(samples, "tune_knobs_drifted", profile="blackwell-8x") == 1
    assert value(samples, "tune_knob_in_sync", **knob("kernel.numa_balancing")) == 0
    assert value(samples, "tune_knob_in_sync", **knob("vm.swappiness")) == 1
    lxc = knob("101:lxc.cgroup2.devices.allow", "lxc", "reboot")
    assert value(samples, "tune_knob_in_sync", **lxc) == 1
    in_sync = [v for (name, _), v in samples.items() if name == "tune_knob_in_sync"]
    assert (len(in_sync), sum(in_sync)) == (ENTRIES, ENTRIES - 1)
    assert value(samples, "tune_pending_reboot", profile="blackwell-8x") == 0
    assert value(samples, "tune_knobs_not_applied", profile="blackwell-8x") == 0
    assert value(samples, "tune_applied", profile="blackwell-8x") == 1
    assert value(samples, "tune_checks_failed", profile="blackwell-8x") == 0
    assert value(samples, "tune_check_passing", profile="blackwell-8x", check="pci_link") == 1
    assert value(samples, "tune_last_apply_timestamp_seconds", profile="blackwell-8x") == (
        1748779205  # 2025-06-01T12:00:05Z
    )
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_one_series_per_profile_entry_whatever_the_cpus(tuned: Path, tmp_path: Path) -> None:
    write_applied(tuned)
    for cpu in (1, 2, 3):
        write(tuned, f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", "schedutil\n")
    target = tmp_path / "tune.prom"
    assert run_tune("check", BLACKWELL, "--root", tuned, "--prometheus", target).code == 2
    samples = parse(target.read_text())
    assert value(samples, "tune_knobs_drifted", profile="blackwell-8x") == 1
    assert value(samples, "tune_knob_in_sync", **knob("governor", "cpu")) == 0
    assert value(samples, "tune_knob_in_sync", **knob("nvidia_peermem", "module")) == 1
    assert value(samples, "tune_knob_in_sync", **knob("max_read_request", "pci")) == 1
    labels = [dict(key) for _, key in samples]
    assert not [ls for ls in labels if re.search(r"cpu\d|0000:", ls.get("target", ""))]
    assert len(samples) < 60


def test_metrics_count_pending_reboots_as_in_sync(tuned: Path, tmp_path: Path) -> None:
    text = (tuned / "proc/cmdline").read_text().replace(" amd_pstate=active", "")
    (tuned / "proc/cmdline").write_text(text)
    target = tmp_path / "tune.prom"
    assert run_tune("check", BLACKWELL, "--root", tuned, "--prometheus", target).code == 0
    samples = parse(target.read_text())
    assert value(samples, "tune_pending_reboot", profile="blackwell-8x") == 1
    assert value(samples, "tune_knob_in_sync", **knob("amd_pstate", "cmdline", "reboot")) == 1
    assert value(samples, "tune_knobs_drifted", profile="blackwell-8x") == 0


def test_since_apply_adds_changed_after_apply(tuned: Path, tmp_path: Path) -> None:
    write_applied(tuned)
    write(tuned, "/proc/sys/vm/swappiness", "60\n")
    target = tmp_path / "tune.prom"
    run_tune("check", BLACKWELL, "--root", tuned, "--since-apply", "--prometheus", target)
    samples = parse(target.read_text())
    assert value(samples, "tune_knobs_changed_after_apply", profile="blackwell-8x") == 1


def test_a_failed_check_replaces_the_metrics_with_failure(tmp_path: Path) -> None:
    target = tmp_path / "tune.prom"
    target.write_text("tune_check_success 1\n")
    result = run_tune("check", "--root", tmp_path / "missing", "--prometheus", target)
    assert result.code == 1
    samples = parse(target.read_text())
    assert value(samples, "tune_check_success") == 0
    assert {name for name, _ in samples} == {
        "tune_check_success",
        "tune_last_check_timestamp_seconds",
    }


def test_unwritable_metrics_file_is_an_error(tuned: Path, tmp_path: Path) -> None:
    target = tmp_path / "no-such-dir" / "tune.prom"
    result = run_tune("check", BLACKWELL, "--root", tuned, "--prometheus", target)
    assert result.code == 1
    assert result.err == f"{target}: cannot write metrics (No such file or directory).\n"


def report_with_target(target: str) -> DriftReport:
    host = HostFacts("h", "snapshot", None, None)
    change = Change("sysfs", target, "1", "0", Phase.RUNTIME)
    return DriftReport(Plan('odd"profile\\', host, (change,), (), (), ()), None, False, (), ())


@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1))
def test_labels_survive_any_text(target: str) -> None:
    samples = parse(exposition(report_with_target(target), 1.5))
    labels = {"profile": 'odd"profile\\', "kind": "sysfs", "target": target, "phase": "runtime"}
    assert value(samples, "tune_knob_in_sync", **labels) == 0


def test_every_series_names_one_profile_entry() -> None:
    """Two containers are two profile entries: a series each, never one for both (a drifted
    container's 0 hidden behind, or reported for, the other). A governor on many CPUs is one
    entry: one series."""
    host = HostFacts("h", "snapshot", None, None)
    allow = "lxc.cgroup2.devices.allow"

    def lxc(container: str, current: str) -> Change:
        return Change(
            "lxc",
            f"{container}:{allow}",
            (current,),
            ("c 195:* rwm",),
            Phase.REBOOT,
            setting=allow,
            subject=container,
        )

    def governor(cpu: int) -> Change:
        return Change(
            "cpu",
            f"cpu{cpu}:governor",
            "performance",
            "performance",
            Phase.RUNTIME,
            setting="governor",
            subject=f"cpu{cpu}",
        )

    compared = (lxc("101", "c 195:* rwm"), lxc("102", "c 511:* rwm"), governor(0), governor(1))
    report = DriftReport(Plan("p", host, compared, (), (), ()), None, False, (), ())
    samples = parse(exposition(report, 1.5))  # parse: no label set twice
    in_sync = {
        dict(labels)["target"]: v
        for (name, labels), v in samples.items()
        if name == "tune_knob_in_sync"
    }
    assert in_sync == {f"101:{allow}": 1, f"102:{allow}": 0, "governor": 1}
    assert value(samples, "tune_knobs_drifted", profile="p") == 1


def test_a_textfile_names_no_series_twice(tuned: Path, tmp_path: Path) -> None:
    """Parsed as the exposition format (prometheus_client's own parser), each metric's label
    sets are distinct, on a host with something of every sort: drift, pending, checks."""
    write_applied(tuned)
    write(tuned, "/proc/sys/kernel/numa_balancing", "1\n")
    text = (tuned / "proc/cmdline").read_text().replace(" amd_pstate=active", "")
    (tuned / "proc/cmdline").write_text(text)
    target = tmp_path / "tune.prom"
    run_tune("check", BLACKWELL, "--root", tuned, "--since-apply", "--prometheus", target)
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    for family in text_string_to_metric_families(target.read_text()):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in seen, f"{key} twice"
            seen.add(key)
    assert len(seen) > ENTRIES


WRITER = """
import sys, time
from reconciler.render.metrics import write_atomically

def pause(stage):
    if stage == sys.argv[2]:
        print("paused", flush=True)
        time.sleep(600)

write_atomically(sys.argv[1], sys.stdin.read(), pause)
"""


@pytest.mark.parametrize("stage", ["opened", "written", "synced"])
def test_killed_while_writing_leaves_the_old_file(tmp_path: Path, stage: str) -> None:
    target = tmp_path / "tune.prom"
    old = exposition(report_with_target("/sys/old"), 1.0)
    target.write_text(old)
    new = exposition(report_with_target("/sys/new" + "x" * 100_000), 2.0)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target), stage],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(PROJECT)},
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    writer.stdin.write(new)
    writer.stdin.close()
    assert writer.stdout.readline() == "paused\n"
    writer.send_signal(signal.SIGKILL)
    assert writer.wait() == -signal.SIGKILL
    assert target.read_text() == old
    parse(target.read_text())
    leftovers = [p.name for p in tmp_path.iterdir() if p != target]
    assert len(leftovers) == 1
    assert leftovers[0].startswith(".tune.prom.") and leftovers[0].endswith(".tmp")


def test_the_writer_replaces_the_file_when_not_killed(tmp_path: Path) -> None:
    target = tmp_path / "tune.prom"
    target.write_text("old\n")
    new = exposition(report_with_target("/sys/new"), 2.0)
    subprocess.run(
        [sys.executable, "-c", WRITER, str(target), "never"],
        input=new,
        env={**os.environ, "PYTHONPATH": str(PROJECT)},
        text=True,
        check=True,
    )
    assert target.read_text() == new
    assert [p.name for p in tmp_path.iterdir()] == ["tune.prom"]
