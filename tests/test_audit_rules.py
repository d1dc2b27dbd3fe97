"""Every audit rule on a snapshot where it fires and on one where it must not.

"Fires" cases start from the tuned example host (no finding at all) and change one thing, so
exactly one rule may fire; each also checks that the suggested profile closes the loop.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from audit_support import (
    add_idle_state,
    closes_loop,
    edit,
    edit_express,
    findings,
    only,
    per_cpu,
    remarks,
    run_audit,
    set_link,
    set_mrrs,
    set_vendor,
    sysctl,
)
from conftest import ACS_CASE, plan_json, write

from reconciler.audit.engine import audit
from reconciler.audit.model import Area, Fix, Problem
from reconciler.audit.rules import RULES, Rule
from reconciler.core.changes import Phase, Priority
from reconciler.core.files import Request
from reconciler.facts import nvidia_smi
from reconciler.hosts import recorded
from reconciler.hosts.directory import SnapshotHost

GPU = "0000:41:00.0"
NIC = "0000:c2:00.0"
CONTAINER = "/etc/pve/lxc/101.conf"
CONTAINERD_UNIT = (
    Path(__file__).resolve().parent / "corpus" / "systemd" / "containerd.service"
).read_text()


def test_tuned_host_has_no_finding_and_every_rule_has_a_verdict(tuned: Path) -> None:
    report = run_audit(tuned)
    assert report.findings == ()
    judged = {r.id for r in report.good} | {r.id for r in report.not_issues}
    assert judged == {r.id for r in RULES}
    assert all(r.evidence for r in report.good + report.not_issues)


def test_rule_ids_are_unique_and_kebab_case() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    assert all(i.replace("-", "").isalnum() and i == i.lower() for i in ids)


def test_a_rule_that_does_not_declare_what_its_fix_reads_fails_loudly(tuned: Path) -> None:
    ksm = Fix("sysfs", ("/sys/kernel/mm/ksm/run",), "0")
    problem = Problem(Priority.P2, "ksm on", ("/sys/kernel/mm/ksm/run: 1",), "r", (ksm,))
    hidden = Rule("hidden-reads", Area.MEMORY, Request(), lambda facts, limits: [problem])
    with pytest.raises(RuntimeError, match="hidden-reads did not declare its reads"):
        audit(SnapshotHost(tuned), rules=[hidden])


# --- PCI Express ------------------------------------------------------------------------------


def test_pcie_mrrs_fires_on_one_gpu_below_4096(tuned: Path, tmp_path: Path) -> None:
    set_mrrs(tuned, GPU, 512)
    report = run_audit(tuned)
    finding = only(report, "pcie-mrrs")
    assert (finding.priority, finding.phase, finding.actionable) == (
        Priority.P0,
        Phase.RUNTIME,
        True,
    )
    assert "512 bytes on 1 of 8 NVIDIA GPUs" in finding.observed
    assert finding.evidence == (f"/sys/bus/pci/devices/{GPU}/config: MaxReadReq 512",)
    assert finding.fix == f"setpci -s {GPU} CAP_EXP+8.w=5000:7000"
    closes_loop(tuned, report, tmp_path)


def test_pcie_mrrs_covers_vga_class_gpus(tuned: Path, tmp_path: Path) -> None:
    set_mrrs(tuned, GPU, 1024)
    write(tuned, f"/sys/bus/pci/devices/{GPU}/class", "0x030000\n")
    report = run_audit(tuned)
    assert only(report, "pcie-mrrs").fixes[0].item == {
        "select": {"vendor": 0x10DE, "class": 0x0300}
    }
    closes_loop(tuned, report, tmp_path)


def test_pcie_mrrs_ignores_devices_that_are_not_nvidia_gpus(tuned: Path) -> None:
    set_vendor(tuned, GPU, 0x1A03)  # an ASPEED display controller
    set_mrrs(tuned, GPU, 512)
    set_mrrs(tuned, NIC, 512)  # the NIC's own choice
    report = run_audit(tuned)
    assert "pcie-mrrs" not in findings(report)
    assert remarks(report, "pcie-mrrs")[0] == ["MaxReadReq 4096 on 7 NVIDIA GPUs"]


def test_pcie_link_width_fires_on_a_gpu_trained_narrow(tuned: Path) -> None:
    set_link(tuned, GPU, width=8)
    finding = only(run_audit(tuned), "pcie-link-width")
    assert (finding.actionable, finding.phase, finding.priority) == (False, None, Priority.P0)
    assert finding.observed == f"GPU {GPU} at x8 of x16"
    assert "reseat" in finding.fix


def test_pcie_link_width_fires_on_a_narrow_rdma_nic_and_ignores_other_nics(tuned: Path) -> None:
    set_link(tuned, NIC, width=4)
    assert only(run_audit(tuned), "pcie-link-width").observed == f"RDMA NIC {NIC} at x4 of x16"
    set_vendor(tuned, NIC, 0x8086)
    assert "pcie-link-width" not in findings(run_audit(tuned))


def test_pcie_link_speed_fires_on_a_slow_nic(tuned: Path) -> None:
    set_link(tuned, NIC, speed="16GT/s")
    finding = only(run_audit(tuned), "pcie-link-speed")
    assert (finding.priority, finding.actionable) == (Priority.P1, False)
    assert finding.observed == f"RDMA NIC {NIC} at 16GT/s of 32GT/s"


def test_pcie_link_speed_fires_on_a_gpu_between_idle_and_full_speed(tuned: Path) -> None:
    set_link(tuned, GPU, speed="16GT/s")
    finding = only(run_audit(tuned), "pcie-link-speed")
    assert finding.priority is Priority.P2
    assert finding.observed == f"GPU {GPU} at 16GT/s of 32GT/s"


def test_pcie_link_speed_idle_gpus_are_not_an_issue(tuned: Path) -> None:
    report = run_audit(tuned)  # every GPU idles at 2.5GT/s in the example
    assert "pcie-link-speed" not in findings(report)
    assert remarks(report, "pcie-link-speed")[1] == [
        "8 NVIDIA GPUs at 2.5GT/s now, capable of 32GT/s"
    ]


def test_pcie_maxpayload_at_the_device_limit_is_not_an_issue(tuned: Path) -> None:
    report = run_audit(tuned)
    (not_issue,) = [r for r in report.not_issues if r.id == "pcie-maxpayload"]
    assert not_issue.observed.startswith("MaxPayload 256 bytes on 9 GPUs and RDMA NICs")
    assert "DevCtl MaxPayload 256, DevCap MaxPayload 256" in not_issue.evidence[0]


def test_pcie_maxpayload_below_the_device_limit_is_not_called_a_limit(tuned: Path) -> None:
    for address in ("0000:01:00.0", "0000:21:00.0"):
        edit_express(tuned, address, 0x08, 0x7 << 5, 0)  # DevCtl payload 128 < DevCap 256
    report = run_audit(tuned)
    (not_issue,) = [r for r in report.not_issues if r.id == "pcie-maxpayload"]
    assert "on 7 GPUs and RDMA NICs" in not_issue.observed
    assert report.findings == ()


# --- sysctl and sysfs -------------------------------------------------------------------------


def test_numa_balancing_fires_with_two_nodes(tuned: Path, tmp_path: Path) -> None:
    sysctl(tuned, "kernel.numa_balancing", "1")
    report = run_audit(tuned)
    finding = only(report, "numa-balancing")
    assert finding.fix == "sysctl -w kernel.numa_balancing=0"
    assert "/sys/devices/system/node/online: 0-1" in finding.evidence
    closes_loop(tuned, report, tmp_path)


def test_numa_balancing_on_one_node_is_not_an_issue(tuned: Path) -> None:
    sysctl(tuned, "kernel.numa_balancing", "1")
    write(tuned, "/sys/devices/system/node/online", "0\n")
    report = run_audit(tuned)
    assert report.findings == ()
    assert remarks(report, "numa-balancing")[1] == [
        "kernel.numa_balancing = 1 on a single NUMA node"
    ]


@pytest.mark.parametrize(
    ("rule_id", "key", "bad", "fine", "fixed"),
    [
        ("swappiness", "vm.swappiness", "60", "10", "10"),
        ("nmi-watchdog", "kernel.nmi_watchdog", "1", "0", "0"),
        ("sched-autogroup", "kernel.sched_autogroup_enabled", "1", "0", "0"),
        ("net-rmem-max", "net.core.rmem_max", "212992", "67108864", "268435456"),
        ("net-wmem-max", "net.core.wmem_max", "4194304", "67108864", "268435456"),
        ("tcp-rmem", "net.ipv4.tcp_rmem", "4096\t131072\t6291456", "4096\t87380\t67108864",
         "4096 131072 268435456"),
        ("tcp-wmem", "net.ipv4.tcp_wmem", "4096\t16384\t4194304", "4096\t65536\t67108864",
         "4096 16384 268435456"),
    ],
)  # fmt: skip
def test_sysctl_rules(
    tuned: Path, tmp_path: Path, rule_id: str, key: str, bad: str, fine: str, fixed: str
) -> None:
    sysctl(tuned, key, fine)
    report = run_audit(tuned)
    assert report.findings == ()
    assert remarks(report, rule_id)[0] == [f"{key} = {' '.join(fine.split())}"]
    sysctl(tuned, key, bad)
    report = run_audit(tuned)
    finding = only(report, rule_id)
    assert finding.phase is Phase.RUNTIME
    assert finding.changes[0].desired == fixed
    assert finding.evidence == (f"/proc/sys/{key.replace('.', '/')}: {' '.join(bad.split())}",)
    closes_loop(tuned, report, tmp_path)


def test_thp_always_fires_and_never_does_not(tuned: Path, tmp_path: Path) -> None:
    thp = "/sys/kernel/mm/transparent_hugepage/enabled"
    write(tuned, thp, "[always] madvise never\n")
    report = run_audit(tuned)
    assert only(report, "thp-always").fix == f"echo madvise > {thp}"
    closes_loop(tuned, report, tmp_path)
    write(tuned, thp, "always madvise [never]\n")
    assert run_audit(tuned).findings == ()


# --- CPU --------------------------------------------------------------------------------------

RUNNING_CMDLINE = "/proc/cmdline"


def test_cstates_deep_fires_without_a_command_line_limit(tuned: Path, tmp_path: Path) -> None:
    add_idle_state(tuned, 2, "C2", 400, disabled=False)
    edit(tuned, RUNNING_CMDLINE, " processor.max_cstate=1", "")
    report = run_audit(tuned)
    finding = only(report, "cstates-deep")
    assert finding.observed.startswith("C2 (exit latency 400 us) enabled on 128 CPUs")
    assert finding.changes[0].desired == "disabled" and len(finding.changes) == 128
    closes_loop(tuned, report, tmp_path)


def test_cstates_deep_does_not_fire_with_a_limit_disabled_or_shallow_states(tuned: Path) -> None:
    add_idle_state(tuned, 2, "C2", 400, disabled=False)
    assert run_audit(tuned).findings == (), "processor.max_cstate=1 is on the command line"
    edit(tuned, RUNNING_CMDLINE, " processor.max_cstate=1", " idle=poll")
    assert run_audit(tuned).findings == ()
    edit(tuned, RUNNING_CMDLINE, " idle=poll", "")
    add_idle_state(tuned, 2, "C2", 400, disabled=True)
    add_idle_state(tuned, 3, "C1E", 10, disabled=False)
    report = run_audit(tuned)
    assert report.findings == ()
    assert remarks(report, "cstates-deep")[0] == [
        "no idle state with exit latency above 50 us is enabled"
    ]


def test_cpufreq_driver_fires_on_acpi_cpufreq_with_cppc(untuned: Path) -> None:
    finding = findings(run_audit(untuned))["cpufreq-driver"]
    assert (finding.actionable, finding.phase) == (True, Phase.REBOOT)
    assert finding.changes[0].desired == "active"
    assert "/proc/cpuinfo: flags include cppc" in finding.evidence


def test_cpufreq_driver_asks_for_intel_pstate_on_hwp(untuned: Path) -> None:
    edit(untuned, "/proc/cpuinfo", " cppc ", " hwp ")
    finding = findings(run_audit(untuned))["cpufreq-driver"]
    assert finding.changes[0].target == "intel_pstate"


def test_cpufreq_driver_configured_but_not_booted_is_pending(untuned: Path) -> None:
    edit(untuned, "/etc/default/grub", 'DEFAULT="quiet"', 'DEFAULT="quiet amd_pstate=active"')
    finding = findings(run_audit(untuned))["cpufreq-driver"]
    assert (finding.actionable, finding.pending, finding.phase) == (False, True, Phase.REBOOT)
    assert finding.fix == "reboot: amd_pstate=active is configured for the next boot"


def test_cpufreq_driver_ignored_parameter_needs_the_bios(tuned: Path) -> None:
    per_cpu(tuned, "cpufreq/scaling_driver", "acpi-cpufreq")
    finding = only(run_audit(tuned), "cpufreq-driver")
    assert (finding.actionable, finding.phase) == (False, None)
    assert "enable CPPC" in finding.fix


def test_cpufreq_driver_without_cppc_or_hwp_is_not_an_issue(untuned: Path) -> None:
    edit(untuned, "/proc/cpuinfo", " cppc ", " ")
    report = run_audit(untuned)
    assert "cpufreq-driver" not in findings(report)
    assert remarks(report, "cpufreq-driver")[1] == ["cpufreq driver acpi-cpufreq"]


def test_cpufreq_governor_fires_on_one_cpu(tuned: Path, tmp_path: Path) -> None:
    write(tuned, "/sys/devices/system/cpu/cpu5/cpufreq/scaling_governor", "powersave\n")
    report = run_audit(tuned)
    finding = only(report, "cpufreq-governor")
    assert finding.observed == "governor powersave on 1 CPU"
    assert [c.subject for c in finding.changes] == ["cpu5"]
    closes_loop(tuned, report, tmp_path)


def test_cpufreq_governor_is_silent_without_cpufreq(tuned: Path) -> None:
    for path in tuned.glob("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"):
        path.unlink()
    report = run_audit(tuned)
    assert report.findings == ()
    assert remarks(report, "cpufreq-governor") == ([], [])


def test_irq_remote_node_fires_on_a_nic_irq_that_may_go_to_the_other_socket(
    tuned: Path, tmp_path: Path
) -> None:
    write(tuned, "/proc/irq/130/smp_affinity_list", "0-127\n")
    write(tuned, "/proc/irq/131/smp_affinity_list", "0-31,64-95\n")
    report = run_audit(tuned)
    finding = only(report, "irq-remote-node")
    assert (finding.priority, finding.phase, finding.actionable) == (
        Priority.P1,
        Phase.RUNTIME,
        True,
    )
    assert finding.observed == (
        f"2 of 64 IRQs of NIC {NIC} (node 1) may go to CPUs of another node"
    )
    node1 = f"{NIC} (node 1, CPUs 32-63,96-127): /proc/irq/N/smp_affinity_list of IRQs"
    assert finding.evidence == (
        f"{node1} 120-129,132-183: 32-63,96-127",
        f"{node1} 130: 0-127",
        f"{node1} 131: 0-31,64-95",
    )
    assert [c.id for c in finding.changes] == [
        f"irq_affinity:{NIC}:irq130",
        f"irq_affinity:{NIC}:irq131",
    ]
    closes_loop(tuned, report, tmp_path)


def test_irq_remote_node_does_not_fire_on_local_irqs_or_an_unknown_node(tuned: Path) -> None:
    write(tuned, "/proc/irq/130/smp_affinity_list", "40-47\n")
    report = run_audit(tuned)
    assert report.findings == ()
    assert remarks(report, "irq-remote-node")[0] == ["IRQs of 1 NICs on their own NUMA node"]
    write(tuned, "/proc/irq/131/smp_affinity_list", "0-127\n")
    write(tuned, f"/sys/bus/pci/devices/{NIC}/numa_node", "-1\n")
    report = run_audit(tuned)
    assert report.findings == ()
    assert remarks(report, "irq-remote-node") == ([], [])


# --- modules, IOMMU, kernel -------------------------------------------------------------------


def test_peermem_missing_fires_with_a_mellanox_nic(tuned: Path, tmp_path: Path) -> None:
    edit(tuned, "/proc/modules", "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n", "")
    report = run_audit(tuned)
    finding = only(report, "peermem-missing")
    assert finding.fix == "modprobe nvidia_peermem"
    assert f"/sys/bus/pci/devices/{NIC}/vendor: 0x15b3" in finding.evidence
    closes_loop(tuned, report, tmp_path)


def test_peermem_missing_without_rdma_nic_is_not_an_issue(tuned: Path) -> None:
    edit(tuned, "/proc/modules", "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n", "")
    set_vendor(tuned, NIC, 0x8086)
    report = run_audit(tuned)
    assert report.findings == ()
    assert remarks(report, "peermem-missing")[1] == ["nvidia_peermem not loaded"]


def test_iommu_translated_fires_and_asks_for_iommu_pt(untuned: Path) -> None:
    finding = findings(run_audit(untuned))["iommu-translated"]
    assert (finding.actionable, finding.phase) == (True, Phase.REBOOT)
    # iommu= options add up over its occurrences: the plan shows them all.
    assert [(c.target, c.desired) for c in finding.changes] == [("iommu", ("pt",))]


def test_iommu_translated_despite_iommu_pt_needs_the_bios(tuned: Path) -> None:
    for path in tuned.glob("sys/kernel/iommu_groups/*/type"):
        path.write_text("DMA\n")
    finding = only(run_audit(tuned), "iommu-translated")
    assert (finding.actionable, finding.phase) == (False, None)
    assert "BIOS" in finding.fix


def test_iommu_pt_among_several_iommu_options_is_seen(tuned: Path) -> None:
    """iommu=pt iommu=soft: the kernel applies both (an early_param called per occurrence);
    the audit reads every occurrence, as plan does, and asks for no second iommu=pt."""
    for path in tuned.glob("sys/kernel/iommu_groups/*/type"):
        path.write_text("DMA\n")
    edit(tuned, "/proc/cmdline", "iommu=pt", "iommu=pt iommu=soft")
    edit(tuned, "/etc/default/grub", "iommu=pt", "iommu=pt iommu=soft")
    finding = only(run_audit(tuned), "iommu-translated")
    assert (finding.actionable, finding.phase) == (False, None)
    assert "BIOS" in finding.fix


def test_iommu_passthrough_or_absent_does_not_fire(tuned: Path) -> None:
    assert remarks(run_audit(tuned), "iommu-translated")[0] == ["IOMMU groups in identity mode"]
    for path in tuned.glob("sys/kernel/iommu_groups/*/type"):
        path.unlink()
    assert "iommu-translated" not in findings(run_audit(tuned))


def test_kernel_version_fires_below_the_minimum(tuned: Path) -> None:
    sysctl(tuned, "kernel.osrelease", "6.8.12-9-pve")
    finding = only(run_audit(tuned), "kernel-version")
    assert (finding.actionable, finding.phase) == (False, None)
    assert finding.fix == "install a kernel 6.14 or newer and reboot into it"


def test_kernel_version_minimum_is_configurable_and_inclusive(tuned: Path) -> None:
    sysctl(tuned, "kernel.osrelease", "6.8.12-9-pve")
    assert run_audit(tuned, min_kernel="6.8").findings == ()
    sysctl(tuned, "kernel.osrelease", "6.14.0-1-pve")
    assert run_audit(tuned).findings == ()


# --- LXC containers ---------------------------------------------------------------------------


def test_lxc_memlock_fires_on_a_gpu_container_without_the_limit(
    tuned: Path, tmp_path: Path
) -> None:
    edit(tuned, CONTAINER, "lxc.prlimit.memlock: unlimited\n", "")
    report = run_audit(tuned)
    finding = only(report, "lxc-memlock")
    assert finding.phase is Phase.REBOOT
    assert finding.evidence == (f"{CONTAINER}: no lxc.prlimit.memlock",)
    closes_loop(tuned, report, tmp_path)


def test_lxc_memlock_fires_on_a_finite_limit_in_a_plain_lxc_container(
    tuned: Path, tmp_path: Path
) -> None:
    config = (tuned / CONTAINER.lstrip("/")).read_text().split("\n[")[0]
    # The same container in plain LXC's own syntax: `key = value`, no Proxmox keys.
    plain = "".join(
        line.replace(": ", " = ", 1) + "\n"
        for line in config.splitlines()
        if line.startswith("lxc.")
    )
    write(tuned, "/var/lib/lxc/infer/config",
          plain.replace("memlock = unlimited", "memlock = 65536:unlimited"))  # fmt: skip
    report = run_audit(tuned)
    finding = only(report, "lxc-memlock")
    assert "container infer mounts NVIDIA devices with memlock 65536:unlimited" in finding.observed
    assert finding.fixes[0].item == {"path": "/var/lib/lxc/infer/config"}
    closes_loop(tuned, report, tmp_path)


def test_lxc_memlock_ignores_containers_without_nvidia_mounts(tuned: Path) -> None:
    write(tuned, "/etc/pve/lxc/200.conf", "arch: amd64\nhostname: web\nmemory: 2048\n")
    report = run_audit(tuned)
    assert report.findings == ()
    assert remarks(report, "lxc-memlock")[0] == ["lxc.prlimit.memlock unlimited in 101"]


@pytest.mark.parametrize("spelling", ["-1", "unlimited : -1", "18446744073709551615"])
def test_lxc_memlock_takes_every_spelling_lxc_reads_as_unlimited(
    tuned: Path, spelling: str
) -> None:
    # LXC's parse_limit_value: strtoull's -1 and 2^64-1 are RLIM_INFINITY (tests/engines/
    # test_lxc_values.py has lxc-info say so).
    edit(tuned, CONTAINER, "lxc.prlimit.memlock: unlimited\n", f"lxc.prlimit.memlock: {spelling}\n")
    assert run_audit(tuned).findings == ()


def test_lxc_stale_majors_fires_after_a_driver_upgrade(tuned: Path, tmp_path: Path) -> None:
    edit(tuned, "/proc/devices", "511 nvidia-uvm", "507 nvidia-uvm")
    report = run_audit(tuned)
    finding = only(report, "lxc-stale-majors")
    assert finding.observed == (
        "container 101 allows major 511, which no device has, and lacks 507 (nvidia-uvm)"
    )
    assert finding.changes[0].desired == ("c 195:* rwm", "c 507:* rwm", "c 508:* rwm")
    closes_loop(tuned, report, tmp_path)


def test_lxc_stale_majors_fires_on_a_node_added_or_gone(tuned: Path, tmp_path: Path) -> None:
    # A ninth GPU appeared and nvidia7 went away (moved to another host).
    write(tuned, "/dev/nvidia8", "")
    (tuned / "dev/nvidia7").unlink()
    report = run_audit(tuned)
    finding = only(report, "lxc-stale-majors")
    assert finding.observed == (
        "container 101 does not mount /dev/nvidia8, and mounts /dev/nvidia7, which does not exist"
    )
    assert [c.id for c in finding.changes] == ["lxc:101:lxc.mount.entry"]
    closes_loop(tuned, report, tmp_path)


def test_lxc_lines_as_lxc_reads_them_agree_with_the_plan(tuned: Path, tmp_path: Path) -> None:
    # An fstab entry with its dump and pass fields and other blanks is the same mount, and LXC
    # reads an allow rule's type, major:minor and access and ignores the rest: no P0, and the
    # plan of the fix audit would offer finds nothing to change either.
    text = (tuned / CONTAINER.lstrip("/")).read_text()
    main, snapshot = text.split("\n[", 1)
    lines = []
    for line in main.splitlines():
        if line.startswith("lxc.mount.entry: /dev/nvidia"):
            key, _, value = line.partition(": ")
            line = f"{key}: " + value.replace(" ", "\t", 1) + " 0 0"
        elif line.startswith("lxc.cgroup2.devices.allow: c"):
            line += " # NVIDIA, see the runbook"
        lines.append(line)
    write(tuned, CONTAINER, "\n".join(lines) + "\n[" + snapshot)
    assert run_audit(tuned).findings == ()
    profile = (
        "name: t\nlxc:\n  - container: '101'\n    memlock: unlimited\n    nvidia_devices: true\n"
    )
    assert plan_json(tmp_path, tuned, profile)["code"] == 0


def test_lxc_stale_majors_does_not_fire_on_allow_all_or_without_mounts(tuned: Path) -> None:
    edit(tuned, "/proc/devices", "511 nvidia-uvm", "507 nvidia-uvm")
    edit(tuned, CONTAINER, "lxc.cgroup2.devices.allow: c 195:* rwm\n",
         "lxc.cgroup2.devices.allow: a\n")  # fmt: skip
    assert run_audit(tuned).findings == ()
    edit(tuned, CONTAINER, "lxc.cgroup2.devices.allow: a\n", "")
    text = (tuned / CONTAINER.lstrip("/")).read_text()
    main, snapshot = text.split("\n[", 1)
    main = "\n".join(line for line in main.splitlines() if "/dev/nvidia" not in line)
    write(tuned, CONTAINER, main + "\n[" + snapshot)
    report = run_audit(tuned)
    assert report.findings == ()
    assert remarks(report, "lxc-stale-majors") == ([], [])


def test_the_documented_table_lists_exactly_the_rules() -> None:
    from conftest import PROJECT

    readme = (PROJECT / "docs/audit.md").read_text()
    table = readme.split("| id | area | fires when | fix |")[1].split("\n\n")[0]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    listed = {(i.strip("` "), area.strip()) for ids, area in rows for i in ids.split(",")}
    assert listed == {(r.id, r.area.value) for r in RULES}


# --- GPU state --------------------------------------------------------------------------------


def gpu_query_record(root: Path) -> Path:
    return root / recorded.where(nvidia_smi.QUERY).lstrip("/")


def test_gpu_persistence_off_fires_on_one_gpu_and_its_fix_closes_the_loop(
    tuned: Path, tmp_path: Path
) -> None:
    stdout = gpu_query_record(tuned) / "stdout"
    lines = stdout.read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace(", Enabled, 600.00 W", ", Disabled, 600.00 W", 1)
    stdout.write_text("".join(lines))
    report = run_audit(tuned)
    finding = only(report, "gpu-persistence-off")
    assert finding.observed == "persistence mode off on 1 of 8 NVIDIA GPUs"
    assert finding.evidence == (
        "nvidia-smi --query-gpu: 00000000:41:00.0 persistence_mode Disabled",
    )
    closes_loop(tuned, report, tmp_path)


@pytest.mark.parametrize("answer", ["absent", "failed"])
def test_gpu_persistence_has_no_verdict_without_an_answer_from_nvidia_smi(
    tuned: Path, answer: str
) -> None:
    record = gpu_query_record(tuned)
    if answer == "absent":
        for path in record.iterdir():
            path.unlink()
    else:
        (record / "status").write_text("9\n")
    report = run_audit(tuned)
    verdicts = [r.id for r in report.good + report.not_issues] + [f.id for f in report.findings]
    assert "gpu-persistence-off" not in verdicts


# --- services -----------------------------------------------------------------------------------


def without_containers(root: Path) -> None:
    for config in (root / "etc/pve/lxc").glob("*.conf"):
        config.unlink()


def test_runtime_memlock_is_no_issue_where_gpus_are_served_from_lxc(tuned: Path) -> None:
    write(tuned, "/usr/lib/systemd/system/containerd.service", CONTAINERD_UNIT)
    report = run_audit(tuned)
    assert report.findings == ()
    assert remarks(report, "runtime-memlock")[1] == ["GPUs are served from LXC containers (101)"]


def test_runtime_memlock_fires_on_containerd_without_the_limit(tuned: Path, tmp_path: Path) -> None:
    without_containers(tuned)
    write(tuned, "/usr/lib/systemd/system/containerd.service", CONTAINERD_UNIT)
    write(tuned, "/lib/systemd/system/docker.service", "[Service]\nLimitMEMLOCK=infinity\n")
    report = run_audit(tuned)
    finding = only(report, "runtime-memlock")
    assert finding.observed == (
        "containerd.service sets no LimitMEMLOCK (systemd's default, 8 MiB since v253)"
    )
    assert remarks(report, "runtime-memlock")[0] == ["LimitMEMLOCK=infinity for docker.service"]
    closes_loop(tuned, report, tmp_path)


def test_runtime_memlock_reads_the_drop_in_that_wins(tuned: Path) -> None:
    without_containers(tuned)
    write(tuned, "/usr/lib/systemd/system/containerd.service", CONTAINERD_UNIT)
    dropins = "/etc/systemd/system/containerd.service.d"
    write(tuned, f"{dropins}/90-tune.conf", "[Service]\nLimitMEMLOCK=infinity\n")
    assert run_audit(tuned).findings == ()
    write(tuned, f"{dropins}/95-site.conf", "[Service]\nLimitMEMLOCK=64M\n")
    finding = only(run_audit(tuned), "runtime-memlock")
    assert finding.observed == "containerd.service starts with memlock 67108864"
    assert finding.evidence == (f"{dropins}/95-site.conf: LimitMEMLOCK=64M",)


# --- ACS, Relaxed Ordering and MaxReadReq of the NICs -------------------------------------------

ACS_HOSTS = ACS_CASE.parent
SAS = "0000:04:00.0"  # behind root port 00:03.0 and an NF200 switch; the GPU is behind 00:07.0


def acs_host(tmp_path: Path, case: str) -> Path:
    """An acs case's host (pciutils' X58 dump laid out as sysfs) with its SAS controller made
    a ConnectX function: a GPU and an RDMA NIC below two root ports with ACS."""
    root = shutil.copytree(ACS_HOSTS / case / "host", tmp_path / case, symlinks=True)
    set_vendor(root, SAS, 0x15B3)
    write(root, f"/sys/bus/pci/devices/{SAS}/class", "0x020000\n")
    return root


def test_pcie_acs_redirect_fires_on_the_root_ports_between_a_gpu_and_an_rdma_nic(
    tmp_path: Path,
) -> None:
    root = acs_host(tmp_path, "redirect-on-above-gpu-and-sas")
    # The old board has more to find (a deep C-state, its other PCIe links): not the point here.
    finding = findings(run_audit(root))["pcie-acs-redirect"]
    assert (finding.priority, finding.actionable) == (Priority.P1, True)
    assert finding.evidence == tuple(
        f"/sys/bus/pci/devices/{port}/config: ACSCtl ReqRedir+ CmpltRedir+ EgressCtrl-"
        for port in ("0000:00:03.0", "0000:00:07.0")
    )
    assert [f.item for f in finding.fixes] == [
        {"select": {"vendor": 0x10DE, "class": 0x0300}},
        {"select": {"vendor": 0x15B3, "class_prefix": 0x02}},
    ]


def test_pcie_acs_redirect_off_is_good(tmp_path: Path) -> None:
    report = run_audit(acs_host(tmp_path, "redirect-already-off"))
    assert "pcie-acs-redirect" not in findings(report)
    assert remarks(report, "pcie-acs-redirect")[0] == [
        "no ACS redirect on 2 bridges above the GPUs and RDMA NICs"
    ]


def test_pcie_acs_redirect_kept_for_vfio_passthrough_is_not_an_issue(tmp_path: Path) -> None:
    report = run_audit(acs_host(tmp_path, "vfio-passthrough-refused"))
    assert "pcie-acs-redirect" not in findings(report)
    assert remarks(report, "pcie-acs-redirect")[1] == [
        "ACS redirect on 2 bridges above the GPUs and RDMA NICs, with 0000:04:00.0 bound to "
        "vfio-pci"
    ]


def test_pcie_relaxed_ordering_fires_on_a_connectx_without_it(tuned: Path, tmp_path: Path) -> None:
    edit_express(tuned, NIC, 0x08, 0x0010, 0)
    report = run_audit(tuned)
    finding = only(report, "pcie-relaxed-ordering")
    assert finding.evidence == (f"/sys/bus/pci/devices/{NIC}/config: DevCtl RlxdOrd-",)
    assert finding.fix == f"setpci -s {NIC} CAP_EXP+8.w=0010:0010"
    closes_loop(tuned, report, tmp_path)


def test_pcie_relaxed_ordering_on_is_good(tuned: Path) -> None:
    report = run_audit(tuned)
    assert remarks(report, "pcie-relaxed-ordering")[0] == [
        "Relaxed Ordering on 1 Mellanox function"
    ]


def test_pcie_mrrs_io_fires_on_a_connectx_below_4096(tuned: Path, tmp_path: Path) -> None:
    set_mrrs(tuned, NIC, 512)
    report = run_audit(tuned)
    finding = only(report, "pcie-mrrs-io")
    assert "MaxReadReq 512 bytes on 1 of 1 RDMA NICs" in finding.observed
    assert finding.fix == f"setpci -s {NIC} CAP_EXP+8.w=5000:7000"
    closes_loop(tuned, report, tmp_path)


def test_pcie_mrrs_io_is_good_at_4096_and_ignores_nics_of_other_vendors(tuned: Path) -> None:
    assert remarks(run_audit(tuned), "pcie-mrrs-io")[0] == ["MaxReadReq 4096 on 1 RDMA NICs"]
    set_vendor(tuned, NIC, 0x8086)
    set_mrrs(tuned, NIC, 512)
    report = run_audit(tuned)
    assert "pcie-mrrs-io" not in findings(report)
