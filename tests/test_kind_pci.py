"""pci: selectors over vendor, device and class; MaxReadReq from the binary config space."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TUNED, UNTUNED, by_id, config_space, notes, pci_device, plan_json

from reconciler.facts import pcie

GPU, GPU2, NIC, AUDIO, BRIDGE = (
    "0000:01:00.0",
    "0000:02:00.0",
    "0000:03:00.0",
    "0000:01:00.1",
    "0000:00:00.0",
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    pci_device(root, GPU, 0x10DE, 0x2BB5, 0x030200, config_space(mrrs=512))
    pci_device(root, GPU2, 0x10DE, 0x2330, 0x030000, config_space(mrrs=512))  # VGA class
    pci_device(root, AUDIO, 0x10DE, 0x22E8, 0x040300, config_space(mrrs=512))
    pci_device(root, NIC, 0x15B3, 0x1021, 0x020000, config_space(mrrs=512))
    pci_device(root, BRIDGE, 0x1022, 0x14A4, 0x060000, config_space(express_at=None))
    return root


def mrrs(select: str, size: int = 4096) -> str:
    return f"name: t\npci:\n  - select: {select}\n    max_read_request: {size}\n"


@pytest.mark.parametrize(
    ("select", "matched"),
    [
        ("{vendor: 0x10de}", [GPU, AUDIO, GPU2]),
        ("{vendor: 0x10de, class: 0x0302}", [GPU]),
        ("{class: 0x0300}", [GPU2]),
        ("{class_prefix: 0x03}", [GPU, GPU2]),  # any display controller
        ("{vendor: 0x10de, class_prefix: 0x03}", [GPU, GPU2]),
        ("{vendor: 0x10de, device: 0x2bb5}", [GPU]),
        ("{device: 0x1021}", [NIC]),
        ('{vendor: "0x15b3"}', [NIC]),  # ids as strings, hex
        ("{vendor: 4318, class: 770}", [GPU]),  # and as decimal integers
    ],
)
def test_selectors(tmp_path: Path, root: Path, select: str, matched: list[str]) -> None:
    plan = plan_json(tmp_path, root, mrrs(select))
    assert sorted(by_id(plan)) == sorted(f"pci:{a}:max_read_request" for a in matched)
    assert {c["current"] for c in plan["changes"]} == {"512"}
    assert {c["desired"] for c in plan["changes"]} == {"4096"}


def test_class_is_not_a_prefix_of_the_subclass(tmp_path: Path, root: Path) -> None:
    # class 0x0302 is base class 03 subclass 02, never "class codes starting with 0x0302..."
    plan = plan_json(tmp_path, root, mrrs("{class: 0x03}"))
    assert plan["changes"][0]["current"] is None
    assert plan["changes"][0]["target"] == "class=0x0003:max_read_request"


def test_in_sync_device_is_not_a_change(tmp_path: Path, root: Path) -> None:
    plan = plan_json(tmp_path, root, mrrs("{vendor: 0x15b3}", 512))
    assert plan["code"] == 0


def test_selector_matching_nothing_is_one_change_from_none(tmp_path: Path, root: Path) -> None:
    plan = plan_json(tmp_path, root, mrrs("{vendor: 0x8086, class: 0x0200}"))
    assert plan["code"] == 2
    [change] = plan["changes"]
    assert change["id"] == "pci:vendor=0x8086,class=0x0200:max_read_request"
    assert (change["current"], change["desired"]) == (None, "4096")
    assert notes(plan) == ["No PCI device matches vendor=0x8086,class=0x0200."]


def test_header_only_read_is_absent_and_needs_root(tmp_path: Path, root: Path) -> None:
    # Without CAP_SYS_ADMIN, sysfs `config` returns only the 64-byte header.
    pci_device(root, GPU, 0x10DE, 0x2BB5, 0x030200, config_space(mrrs=4096, size=64))
    plan = plan_json(tmp_path, root, mrrs("{class: 0x0302}"))
    [change] = plan["changes"]
    assert (change["current"], change["desired"]) == (None, "4096")
    assert notes(plan) == [
        f"{GPU}: only the 64-byte config header is readable; reading PCI Express registers "
        "needs root."
    ]


def test_conventional_pci_function_has_no_express_capability(tmp_path: Path, root: Path) -> None:
    plan = plan_json(tmp_path, root, mrrs("{class: 0x0600}"))
    [change] = plan["changes"]
    assert change["current"] is None
    assert notes(plan) == [f"{BRIDGE} has no PCI Express capability."]


def test_unparsable_ids_skip_the_device(tmp_path: Path, root: Path) -> None:
    (root / f"sys/bus/pci/devices/{GPU}/class").write_text("garbage\n")
    plan = plan_json(tmp_path, root, mrrs("{vendor: 0x10de}"))
    assert sorted(by_id(plan)) == [f"pci:{a}:max_read_request" for a in (AUDIO, GPU2)]


@pytest.mark.parametrize("size", [128, 256, 512, 1024, 2048, 4096])
def test_every_size_reads_back(tmp_path: Path, root: Path, size: int) -> None:
    pci_device(root, GPU, 0x10DE, 0x2BB5, 0x030200, config_space(mrrs=size))
    plan = plan_json(tmp_path, root, mrrs("{class: 0x0302}", size))
    assert plan["code"] == 0


def test_setpci_fix_writes_only_the_mrrs_bits() -> None:
    before = config_space(mrrs=512)
    after = pcie.with_max_read_request(before, 4096)
    cap_before, cap_after = pcie.express(before), pcie.express(after)
    assert cap_before is not None and cap_after is not None
    assert cap_after.max_read_request == 4096
    assert cap_after.device_control & ~pcie.MRRS_MASK == cap_before.device_control & ~pcie.MRRS_MASK
    assert sum(a != b for a, b in zip(before, after, strict=True)) == 1


def test_example_host_gpus_and_not_the_nic(tmp_path: Path) -> None:
    text = mrrs("{vendor: 0x10de, class: 0x0302}")
    changes = by_id(plan_json(tmp_path, UNTUNED, text))
    assert len(changes) == 8
    assert "pci:0000:c2:00.0:max_read_request" not in changes
    assert plan_json(tmp_path, TUNED, text)["code"] == 0
