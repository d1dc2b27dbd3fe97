"""`tune plan` on the bundled example hosts: the contract operators and later issues rely on."""

from __future__ import annotations

import json

from conftest import BLACKWELL, SAVED, TUNED, UNTUNED, run_tune


def plan_json(root: object) -> dict:
    result = run_tune("plan", BLACKWELL, "--root", root, "--format", "json")
    assert result.err.startswith(SAVED) and result.err.count("\n") == 1
    return {"code": result.code, **json.loads(result.out)}


def test_untuned_host_has_every_audit_finding() -> None:
    plan = plan_json(UNTUNED)
    assert plan["code"] == 2
    changes = {c["id"]: c for c in plan["changes"]}
    assert changes["sysctl:kernel.numa_balancing"] == {
        "id": "sysctl:kernel.numa_balancing",
        "kind": "sysctl",
        "target": "kernel.numa_balancing",
        "current": "1",
        "desired": "0",
        "phase": "runtime",
        "priority": "P0",
        "reason": changes["sysctl:kernel.numa_balancing"]["reason"],
        # What the text and Markdown views show of it: no consumer needs the text.
        "setting": "kernel.numa_balancing",
        "subject": "",
        "entry": "kernel.numa_balancing",
        "label": "sysctl kernel.numa_balancing",
        "fix": "sysctl -w kernel.numa_balancing=0",
        "whole_file": False,
        "shown": {"current": "1", "desired": "0"},
        "takes_effect": "live (runtime)",
        "how": "live: tune apply --runtime-only",
    }
    assert changes["sysctl:net.ipv4.tcp_rmem"]["current"] == "4096 131072 6291456"
    assert changes["module:nvidia_peermem"]["current"] == "absent"
    assert changes["module:nvidia_peermem"]["desired"] == "loaded"
    nic = "pci:0000:c2:00.0:max_read_request"
    gpus = [c for c in changes if c.startswith("pci:") and c != nic]
    assert len(gpus) == 8, "eight GPUs by their selector, the Mellanox NIC by its own"
    assert {changes[g]["current"] for g in [*gpus, nic]} == {"512"}
    # The ConnectX-7 already has Relaxed Ordering on: only its MaxReadReq changes.
    assert "pci:0000:c2:00.0:relaxed_ordering" not in changes
    assert changes["cpu:cpu127:idle:C2"]["current"] == "enabled"
    assert changes["cpu:cpu127:governor"]["current"] == "schedutil"
    assert sum(c.startswith("cpu:") and c.endswith(":idle:C2") for c in changes) == 128
    assert changes["cmdline:amd_pstate"] == {
        **changes["cmdline:amd_pstate"],
        "current": None,
        "desired": "active",
        "phase": "reboot",
    }
    allow = changes["lxc:101:lxc.cgroup2.devices.allow"]
    assert allow["current"] == ["c 195:* rwm", "c 510:* rwm", "c 511:* rwm"]
    assert allow["desired"] == ["c 195:* rwm", "c 509:* rwm", "c 510:* rwm"]
    assert changes["lxc:101:lxc.prlimit.memlock"]["current"] is None
    failed = {c["id"] for c in plan["checks"] if not c["ok"]}
    assert failed == {"check:kernel", "check:cpufreq_driver", "check:iommu"}
    assert plan["host"]["kernel"] == "6.8.12-9-pve"


def test_tuned_host_is_in_sync() -> None:
    plan = plan_json(TUNED)
    assert plan["code"] == 0
    assert plan["changes"] == []
    assert all(c["ok"] for c in plan["checks"])
    assert len([c for c in plan["checks"] if c["id"].startswith("check:pci_link:")]) == 8


def test_text_plan_folds_cpus_and_devices() -> None:
    result = run_tune("plan", BLACKWELL, "--root", UNTUNED)
    assert result.code == 2
    assert "cpu idle:C2 on 128 CPUs (cpu0-127): enabled -> disabled" in result.out
    assert "pci max_read_request on 8 devices" in result.out
    assert "512 -> 4096" in result.out
    assert "\x1b[" not in result.out, "no colour when stdout is not a terminal"
    runtime, reboot = result.out.index("Runtime phase"), result.out.index("Reboot phase")
    assert runtime < result.out.index("kernel.numa_balancing") < reboot
    assert reboot < result.out.index("cmdline amd_pstate")
    assert "file /etc/sysctl.d/90-tune.conf: (absent) -> 12 lines" in result.out
    # Counted as the plan shows them: profile entries, then the writes they expand to.
    assert result.out.rstrip().splitlines()[-1] == (
        "Plan: 29 to change (24 runtime, 5 reboot; 368 writes), 1 in sync; 8 of 11 checks pass; "
        "0 pending reboot."
    )


def test_markdown_report_has_audit_sections() -> None:
    result = run_tune("plan", BLACKWELL, "--root", UNTUNED, "--format", "markdown")
    assert result.code == 2
    text = result.out
    for heading in (
        "# Plan: gpu-node-07",
        "## Confirmed good",
        "## Actionable",
        "### P0",
        "## Needs a reboot",
        "## Needs BIOS, a kernel or a driver change",
    ):
        assert heading in text
    assert "setpci -s 0000:41:00.0 CAP_EXP+8.w=5000:7000" in text
    assert "sysctl -w kernel.numa_balancing=0" in text
    assert "sysctl -w 'net.ipv4.tcp_rmem=4096 87380 268435456'" in text
    assert "check pci_link:0000:41:00.0" in text  # a passing check is confirmed good


def test_snapshot_archive_round_trip(tmp_path) -> None:
    archive = tmp_path / "host.tar.gz"
    assert run_tune("snapshot", BLACKWELL, "--root", UNTUNED, "-o", archive).code == 0
    from_dir = plan_json(UNTUNED)
    from_archive = plan_json(archive)
    from_dir["host"].pop("source")
    from_archive["host"].pop("source")
    assert from_archive == from_dir


def test_snapshot_captures_only_what_the_profile_reads(tmp_path) -> None:
    import tarfile

    archive = tmp_path / "host.tar.gz"
    run_tune("snapshot", BLACKWELL, "--root", UNTUNED, "-o", archive)
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert "proc/sys/kernel/numa_balancing" in names
    assert "sys/bus/pci/devices/0000:41:00.0/config" in names
    assert "proc/sys/vm/max_map_count" not in names  # not in the profile
    assert "proc/cpuinfo" not in names
