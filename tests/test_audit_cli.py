"""`tune audit` as operators run it: exit codes, the JSON contract, the Markdown report, and the
suggested profile closing the loop through `tune validate` and `tune plan`."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from audit_support import closes_loop, run_audit
from conftest import BLACKWELL, TUNED, UNTUNED, run_tune

from reconciler.render.folding import fold

FINDING_KEYS = [
    "id", "area", "priority", "actionable", "phase", "observed", "evidence", "reason", "fix",
]  # fmt: skip
UNTUNED_ACTIONABLE = {
    "pcie-mrrs", "pcie-mrrs-io", "numa-balancing", "cstates-deep", "peermem-missing", "lxc-memlock",
    "lxc-stale-majors", "swappiness", "net-rmem-max", "net-wmem-max", "tcp-rmem", "tcp-wmem",
    "thp-always", "cpufreq-driver", "cpufreq-governor", "iommu-translated", "nmi-watchdog",
    "sched-autogroup", "gpu-persistence-off", "irq-remote-node", "pcie-acs-redirect",
}  # fmt: skip


def audit_json(root: object, *args: str) -> tuple[int, dict]:
    result = run_tune("audit", "--root", root, "--format", "json", *args)
    assert result.err == ""
    return result.code, json.loads(result.out)


def test_untuned_host_json_contract() -> None:
    code, report = audit_json(UNTUNED)
    assert code == 2
    assert list(report) == [
        "format_version",
        "kind",
        "host",
        "status",
        "findings",
        "good",
        "not_issues",
    ]
    assert report["status"] == "actionable"
    assert (report["format_version"], report["kind"]) == (2, "audit")
    assert all(list(f) == FINDING_KEYS for f in report["findings"])
    by_id = {f["id"]: f for f in report["findings"]}
    assert {i for i, f in by_id.items() if f["actionable"]} == UNTUNED_ACTIONABLE
    assert by_id["kernel-version"] | {"reason": ""} == {
        "id": "kernel-version",
        "area": "kernel",
        "priority": "P1",
        "actionable": False,
        "phase": "none",
        "observed": "kernel 6.8.12-9-pve, older than 6.14",
        "evidence": ["/proc/sys/kernel/osrelease: 6.8.12-9-pve"],
        "reason": "",
        "fix": "install a kernel 6.14 or newer and reboot into it",
    }
    assert by_id["numa-balancing"]["phase"] == "runtime"
    assert by_id["lxc-stale-majors"]["phase"] == "reboot"
    assert by_id["lxc-stale-majors"]["area"] == "container"
    assert all(f["evidence"] and f["reason"] and f["fix"] for f in report["findings"])
    priorities = [f["priority"] for f in report["findings"]]
    assert priorities == sorted(priorities)
    host = report["host"]
    assert (host["cpu_model"], host["sockets"], host["cpus"], host["numa_nodes"]) == (
        "AMD EPYC 9335 32-Core Processor", 2, 128, 2)  # fmt: skip
    assert host["cpufreq_driver"] == "acpi-cpufreq"
    assert [g["numa_node"] for g in host["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert host["gpus"][0]["link"] == "2.5GT/s x16 (capable of 32GT/s x16)"
    assert [n["address"] for n in host["nics"]] == ["0000:c2:00.0"]
    not_issues = {n["id"]: n for n in report["not_issues"]}
    assert not_issues["pcie-maxpayload"]["observed"].startswith("MaxPayload 256 bytes")
    assert all(n["evidence"] and n["reason"] for n in report["not_issues"])


def test_tuned_host_has_nothing_actionable() -> None:
    code, report = audit_json(TUNED)
    assert code == 0
    assert report["findings"] == []
    assert len(report["good"]) >= 15


def test_markdown_report_reads_like_a_hand_written_audit(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    result = run_tune("audit", "--root", UNTUNED, "--format", "markdown", "-o", target)
    assert result.code == 2
    assert result.out == "", "-o FILE takes the output; where it went is said on stderr"
    assert result.err.startswith(f"{target}: 22 findings: 21 actionable")
    text = target.read_text()
    for line in (
        "# Host audit: gpu-node-07",
        "| CPU | 2 x AMD EPYC 9335 32-Core Processor (128 CPUs, 2 NUMA nodes) |",
        "| Kernel | 6.8.12-9-pve |",
        "| cpufreq | driver acpi-cpufreq, governor schedutil |",
        "| 0000:81:00.0 | NVIDIA 10de:2bb5 | 1 | 2.5GT/s x16 (capable of 32GT/s x16) | 512 |",
        "| 0000:c2:00.0 | Mellanox 15b3:1021 | 1 | 32GT/s x16 | 512 |",
        "## Confirmed good",
        "## Actionable",
        "### P0",
        "#### numa-balancing (memory): kernel.numa_balancing = 1 on a host with 2 NUMA nodes",
        "sysctl -w kernel.numa_balancing=0",
        "setpci -s 0000:e1:00.0 CAP_EXP+8.w=5000:7000",
        "## Needs a reboot",
        "## Needs BIOS, hardware, a kernel or a driver change",
        "## Not an issue",
    ):
        assert line in text, line
    reboot = text.split("## Needs a reboot")[1].split("##")[0]
    assert {"lxc-memlock", "lxc-stale-majors", "cpufreq-driver", "iommu-translated"} == {
        line.split("**")[1] for line in reboot.splitlines() if line.startswith("- ")
    }
    assert text.index("### P0") < text.index("### P1") < text.index("### P2")


def test_text_report_lists_findings_by_priority() -> None:
    result = run_tune("audit", "--root", UNTUNED)
    assert result.code == 2
    assert "! numa-balancing [memory, runtime]: kernel.numa_balancing = 1" in result.out
    assert "- kernel-version [kernel, not fixable by tune]" in result.out
    assert result.out.rstrip().endswith("3 good, 3 not an issue.")
    assert "\x1b[" not in result.out


def test_suggested_profile_is_valid_and_closes_the_loop(tmp_path: Path) -> None:
    suggested = tmp_path / "suggested.yaml"
    result = run_tune("audit", "--root", UNTUNED, "--write-profile", suggested)
    assert result.code == 2
    assert result.err == f"{suggested}: profile fixing 21 findings\n"
    assert run_tune("validate", suggested).code == 0
    text = suggested.read_text()
    assert "# numa-balancing (P0, runtime): kernel.numa_balancing = 1" in text
    assert "# - kernel-version (P1, not fixable by tune)" in text
    assert "vendor: 0x10de" in text
    assert not any(line != line.rstrip() for line in text.splitlines())
    plan = run_tune("plan", suggested, "--root", UNTUNED, "--format", "json", "--no-persist")
    assert plan.code == 2
    planned = {c["id"] for c in json.loads(plan.out)["changes"]}
    report = run_audit(UNTUNED)
    assert planned == {c.id for f in report.actionable for c in f.changes}
    # 21 findings; the stale container's fix changes its allow lines and its mount entries.
    assert len(fold(c for f in report.actionable for c in f.changes)) == 22
    closes_loop(UNTUNED, report, tmp_path)
    persisted = run_tune("plan", suggested, "--root", UNTUNED, "--format", "json")
    files = {c["id"] for c in json.loads(persisted.out)["changes"]} - planned
    assert files == {
        "file:/etc/sysctl.d/90-tune.conf",
        "file:/etc/modules-load.d/tune.conf",
        "file:/etc/tmpfiles.d/tune.conf",
        "file:/etc/udev/rules.d/90-tune-pci.rules",
        "file:/etc/systemd/system/nvidia-persistenced.service.d/90-tune-gpus.conf",
    }


def test_suggested_profile_for_the_tuned_host_changes_no_knob(tmp_path: Path) -> None:
    suggested = tmp_path / "suggested.yaml"
    assert run_tune("audit", "--root", TUNED, "--write-profile", suggested).code == 0
    text = suggested.read_text()
    assert "nothing actionable" in text
    assert "boot-time files from an earlier `tune apply`" in text, "applied alone it would "
    "rewrite the files the Blackwell profile's apply left"
    assert run_tune("plan", suggested, "--root", TUNED, "--no-persist").code == 0
    _, report = audit_json(TUNED)
    assert "/etc/sysctl.d/90-tune.conf" in report["host"]["tune_files"]


def test_the_blackwell_profile_leaves_nothing_actionable_on_the_host_it_tuned() -> None:
    """The loop from the other side: the host the bundled profile produced audits clean."""
    assert run_tune("plan", BLACKWELL, "--root", TUNED).code == 0
    assert run_tune("audit", "--root", TUNED).code == 0


def test_audit_reads_a_snapshot_archive(tmp_path: Path) -> None:
    archive = tmp_path / "host.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(UNTUNED, arcname=".")
    code, from_archive = audit_json(archive)
    _, from_directory = audit_json(UNTUNED)
    assert code == 2
    assert from_archive["findings"] == from_directory["findings"]


def test_unreadable_host_exits_1(tmp_path: Path) -> None:
    missing = run_tune("audit", "--root", tmp_path / "nope")
    assert (missing.code, missing.out) == (1, "")
    assert missing.err.count("\n") == 1 and "nope" in missing.err
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_tune("audit", "--root", empty)
    assert result.code == 1
    assert "none of the files the audit reads exist" in result.err


def test_min_kernel_must_be_a_version() -> None:
    result = run_tune("audit", "--root", TUNED, "--min-kernel", "latest")
    assert result.code == 64
    assert "--min-kernel" in result.err
    assert run_tune("audit", "--root", UNTUNED, "--min-kernel", "6.8", "--format", "json").code == 2
