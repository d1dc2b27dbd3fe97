"""pci: selectors over vendor, device and class; MaxReadReq from the binary config space.

Cases of a host's files in and a plan out are data, in tests/kinds/pci/ (`test_kinds_data`);
what stays here are tables of values, the example hosts and behaviour.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TUNED, UNTUNED, by_id, config_space, pci_device, plan_json, run_tune

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


def test_in_sync_device_is_not_a_change(tmp_path: Path, root: Path) -> None:
    plan = plan_json(tmp_path, root, mrrs("{vendor: 0x15b3}", 512))
    assert plan["code"] == 0


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


@pytest.mark.parametrize("value", ["1", '"yes"', "on"])
def test_relaxed_ordering_is_true_or_false_and_nothing_else(tmp_path: Path, value: str) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"name: t\npci:\n  - select: {{vendor: 0x15b3}}\n    relaxed_ordering: {value}\n"
    )
    result = run_tune("plan", profile, "--root", tmp_path)
    assert result.code == 65, result.err  # a bad profile
    assert "relaxed_ordering" in result.err
    assert "Traceback" not in result.err


def test_relaxed_ordering_is_written_with_max_read_request_in_one_masked_write() -> None:
    from reconciler.kinds.pci import BY_NAME, masked_write

    wanted = [(BY_NAME["max_read_request"], "4096"), (BY_NAME["relaxed_ordering"], "on")]
    assert masked_write(wanted) == "CAP_EXP+8.w=5010:7010"
    assert masked_write([(BY_NAME["relaxed_ordering"], "off")]) == "CAP_EXP+8.w=0000:0010"
