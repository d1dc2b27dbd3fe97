"""checks: audit-only expectations (kernel, cpufreq driver, IOMMU mode, PCIe links)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TUNED, UNTUNED, by_id, config_space, notes, pci_device, plan_json, write

from reconciler.facts.kernel import kernel_ok

GPU, GPU2 = "0000:01:00.0", "0000:02:00.0"


@pytest.mark.parametrize(
    ("release", "constraint", "ok"),
    [
        ("6.14.8-2-pve", ">=6.14", True),
        ("6.14.0", ">=6.14", True),
        ("6.8.12-9-pve", ">=6.14", False),  # 8 < 14: numbers, not strings
        ("6.8.12-9-pve", "6.8", True),  # no operator means >=
        ("6.14.8-2-pve", ">= 6.14.9", False),
        ("6.14.8-2-pve", "<=6.14", True),  # 6.14 is the whole 6.14 series
        ("6.15.1", "<=6.14", False),
        ("6.14.8-2-pve", "==6.14", True),
        ("6.14.8-2-pve", "==6.14.8", True),
        ("6.14.8-2-pve", "==6.14.7", False),
        ("6.14.8-2-pve", ">6.14", False),
        ("6.15.0", ">6.14", True),
        ("6.13.12", "<6.14", True),
        ("6.14.1", "<6.14", False),
        ("10.0.0", ">=9", True),
        ("not-a-version", ">=6", False),
    ],
)
def test_kernel_constraint(release: str, constraint: str, ok: bool) -> None:
    assert kernel_ok(release, constraint) is ok


def test_kernel_check_in_a_plan(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/proc/sys/kernel/osrelease", "6.8.12-9-pve\n")
    plan = plan_json(tmp_path, root, "name: t\nchecks:\n  kernel: '>=6.14'\n")
    assert plan["code"] == 2, "a failed check alone is not in sync"
    assert plan["changes"] == []
    assert plan["checks"] == [
        {
            "id": "check:kernel",
            "name": "kernel",
            "ok": False,
            "observed": "6.8.12-9-pve",
            "expected": ">=6.14",
            "remedy": "install a kernel >=6.14 and reboot into it",
            "subject": "",
        }
    ]
    write(root, "/proc/sys/kernel/osrelease", "6.14.8-2-pve\n")
    assert plan_json(tmp_path, root, "name: t\nchecks:\n  kernel: '>=6.14'\n")["code"] == 0


def test_unknown_kernel_release_fails(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/proc/cmdline", "quiet\n")
    [check] = plan_json(tmp_path, root, "name: t\nchecks:\n  kernel: '>=6.14'\n")["checks"]
    assert (check["ok"], check["observed"]) == (False, None)


@pytest.mark.parametrize(
    ("drivers", "ok", "observed"),
    [
        (["amd-pstate-epp", "amd-pstate-epp"], True, "amd-pstate-epp"),
        (["acpi-cpufreq", "acpi-cpufreq"], False, "acpi-cpufreq"),
        (["amd-pstate-epp", "acpi-cpufreq"], False, "acpi-cpufreq,amd-pstate-epp"),
        ([], False, None),
    ],
)
def test_cpufreq_driver(tmp_path: Path, drivers: list[str], ok: bool, observed: str | None) -> None:
    root = tmp_path / "host"
    write(root, "/proc/cmdline", "quiet\n")
    for n, driver in enumerate(drivers):
        write(root, f"/sys/devices/system/cpu/cpu{n}/cpufreq/scaling_driver", driver + "\n")
    plan = plan_json(tmp_path, root, "name: t\nchecks:\n  cpufreq_driver: amd-pstate-epp\n")
    [check] = plan["checks"]
    assert (check["ok"], check["observed"]) == (ok, observed)
    assert "amd_pstate=active" in check["remedy"]


@pytest.mark.parametrize(
    ("types", "mode", "ok"),
    [
        (["identity", "identity"], "passthrough", True),
        (["identity", "DMA-FQ"], "passthrough", False),
        (["DMA-FQ", "DMA-FQ"], "passthrough", False),
        (["DMA-FQ", "DMA"], "translated", True),
        (["identity"], "translated", False),
        ([], "passthrough", False),  # no IOMMU groups: IOMMU off, nothing passes through
    ],
)
def test_iommu(tmp_path: Path, types: list[str], mode: str, ok: bool) -> None:
    root = tmp_path / "host"
    write(root, "/proc/cmdline", "quiet\n")
    for group, kind in enumerate(types):
        write(root, f"/sys/kernel/iommu_groups/{group}/type", kind + "\n")
    [check] = plan_json(tmp_path, root, f"name: t\nchecks:\n  iommu: {mode}\n")["checks"]
    assert check["ok"] is ok


LINK = "name: t\nchecks:\n  pci_link: {select: {vendor: 0x10de}, speed: 32GT/s, width: 16}\n"


def test_pci_link_width_below_expected_fails(tmp_path: Path) -> None:
    root = tmp_path / "host"
    pci_device(root, GPU, 0x10DE, 0x2BB5, 0x030200, config_space(width=16))
    pci_device(root, GPU2, 0x10DE, 0x2BB5, 0x030200, config_space(width=8))
    plan = plan_json(tmp_path, root, LINK)
    checks = by_id(plan, "checks")
    assert checks[f"check:pci_link:{GPU}"]["ok"] is True
    failed = checks[f"check:pci_link:{GPU2}"]
    assert failed["ok"] is False
    assert failed["observed"] == "32GT/s x8 (now 32GT/s)"
    assert failed["expected"] == "32GT/s x16"
    assert plan["code"] == 2


def test_pci_link_capable_of_gen5_but_idle_at_gen1_is_a_note(tmp_path: Path) -> None:
    root = tmp_path / "host"
    pci_device(root, GPU, 0x10DE, 0x2BB5, 0x030200, config_space(speed_max=5, speed=1))
    plan = plan_json(tmp_path, root, LINK)
    assert plan["code"] == 0
    [check] = plan["checks"]
    assert check["observed"] == "32GT/s x16 (now 2.5GT/s)"
    assert notes(plan) == [
        f"1 devices run below 32GT/s now: {GPU} (2.5GT/s). GPUs lower their link speed when "
        "idle; not a failure."
    ]


def test_pci_link_capable_of_gen4_only_fails(tmp_path: Path) -> None:
    root = tmp_path / "host"
    pci_device(root, GPU, 0x10DE, 0x2BB5, 0x030200, config_space(speed_max=4, speed=4))
    [check] = plan_json(tmp_path, root, LINK)["checks"]
    assert check["ok"] is False


def test_pci_link_unreadable_config_fails_needing_root(tmp_path: Path) -> None:
    root = tmp_path / "host"
    pci_device(root, GPU, 0x10DE, 0x2BB5, 0x030200, config_space(size=64))
    [check] = plan_json(tmp_path, root, LINK)["checks"]
    assert (check["ok"], check["observed"]) == (False, None)
    assert "needs root" in check["remedy"]


def test_pci_link_selector_matching_nothing_fails(tmp_path: Path) -> None:
    root = tmp_path / "host"
    pci_device(root, GPU, 0x15B3, 0x1021, 0x020000, config_space())
    [check] = plan_json(tmp_path, root, LINK)["checks"]
    assert check["id"] == "check:pci_link:vendor=0x10de"
    assert check["ok"] is False


def test_pci_link_list_of_checks(tmp_path: Path) -> None:
    root = tmp_path / "host"
    pci_device(root, GPU, 0x10DE, 0x2BB5, 0x030200, config_space(width=16))
    pci_device(root, GPU2, 0x15B3, 0x1021, 0x020000, config_space(width=8, speed_max=4))
    text = (
        "name: t\nchecks:\n  pci_link:\n"
        "    - {select: {vendor: 0x10de}, width: 16}\n"
        "    - {select: {vendor: 0x15b3}, speed: 16GT/s}\n"
    )
    plan = plan_json(tmp_path, root, text)
    assert plan["code"] == 0
    assert len(plan["checks"]) == 2


def test_example_hosts(tmp_path: Path) -> None:
    text = (
        "name: t\nchecks:\n  kernel: '>=6.14'\n  cpufreq_driver: amd-pstate-epp\n"
        "  iommu: passthrough\n"
        "  pci_link: {select: {vendor: 0x10de, class: 0x0302}, speed: 32GT/s, width: 16}\n"
    )
    failed = {c["id"] for c in plan_json(tmp_path, UNTUNED, text)["checks"] if not c["ok"]}
    assert failed == {"check:kernel", "check:cpufreq_driver", "check:iommu"}
    assert plan_json(tmp_path, TUNED, text)["code"] == 0
