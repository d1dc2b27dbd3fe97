"""Per knob kind (tests/test_apply_kinds.py, tests/test_lxc_editor.py) against both engines:
apply, the plan is then empty and a second apply changes nothing, rollback gives back every
byte; and the LXC editor's edit through a whole apply keeps the config's other lines."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import ACS_CASE, PROJECT, write
from lxc_oracle import lxc_refuses
from small_host import build, tree, whole_tree, write_profile
from test_apply_kinds import HOST, KIND_PROFILES
from test_lxc_editor import CONFIG, DEVICES

from reconciler.core.files import CommandOutput
from reconciler.facts import lxc as fmt
from reconciler.facts import nvidia_smi, pcie
from reconciler.hosts import recorded

from .drive import Engine
from .test_apply import runtime_changes


@pytest.mark.parametrize("kind", sorted(KIND_PROFILES))
@pytest.mark.parametrize("persist", [True, False], ids=["persist", "no-persist"])
def test_apply_then_plan_is_empty_then_rollback_restores(
    engine: Engine, tmp_path: Path, kind: str, persist: bool
) -> None:
    root = build(tmp_path / "h", HOST)
    profile = write_profile(tmp_path / "p.yaml", KIND_PROFILES[kind])
    before = tree(root)
    assert engine.apply(root, profile, with_persistence=persist) is not None
    assert runtime_changes(root, profile, persist) == []
    assert engine.apply(root, profile, with_persistence=persist) is None
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == before


PORTS = ("0000:00:03.0", "0000:00:07.0")


def acs_control(root: Path, address: str) -> int:
    config = (root / "sys/bus/pci/devices" / address / "config").read_bytes()
    found = pcie.acs(config)
    assert found is not None
    return found.control


@pytest.mark.parametrize("persist", [True, False], ids=["persist", "no-persist"])
def test_acs_clears_only_the_redirect_bits_of_the_ports_and_rolls_back(
    engine: Engine, tmp_path: Path, persist: bool
) -> None:
    # Both root ports of a real X58 board (pciutils' dump) with what Linux enables with the
    # IOMMU on (0x001d): the masked write keeps Source Validation and Upstream Forwarding.
    root = shutil.copytree(ACS_CASE / "host", tmp_path / "h", symlinks=True)
    profile = ACS_CASE / "profile.yaml"
    before = whole_tree(root)
    assert [acs_control(root, port) for port in PORTS] == [0x001D, 0x001D]
    assert engine.apply(root, profile, with_persistence=persist) is not None
    assert [acs_control(root, port) for port in PORTS] == [0x0011, 0x0011]
    assert runtime_changes(root, profile, persist) == []
    assert engine.apply(root, profile, with_persistence=persist) is None
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert whole_tree(root) == before


def applied(engine: Engine, tmp_path: Path, config: str, text: str, which: str) -> str:
    """`config` holding `text` on a host with NVIDIA majors and /dev/nvidia-uvm, after an apply
    of memlock and NVIDIA devices for the container `which` (a profile entry's first line);
    the rollback after it must give back every byte."""
    root = tmp_path / "host"
    write(root, fmt.PROC_DEVICES, DEVICES)
    write(root, config, text)
    write(root, "/dev/nvidia-uvm", "")
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"name: c\nlxc:\n  - {which}\n    memlock: unlimited\n    nvidia_devices: true\n"
    )
    before = tree(root)
    assert engine.apply(root, profile, phase="reboot", runtime_only=False, reboot_phase=True)
    after = (root / config.lstrip("/")).read_text()
    engine.rollback(root)
    assert tree(root) == before
    return after


def test_lxc_edit_keeps_order_comments_and_snapshots(engine: Engine, tmp_path: Path) -> None:
    config = (
        "# GPU container\narch: amd64\nlxc.prlimit.memlock: 65536\n"
        "lxc.cgroup2.devices.allow: c 195:* rwm\n# keep me\n"
        "lxc.cgroup2.devices.allow: c 511:* rwm\n"
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
        "\n[before-upgrade]\nlxc.cgroup2.devices.allow: c 511:* rwm\n"
    )
    assert applied(engine, tmp_path, CONFIG, config, "container: '101'") == (
        "# GPU container\narch: amd64\nlxc.prlimit.memlock: unlimited\n"
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "lxc.cgroup2.devices.allow: c 509:* rwm\n"
        "lxc.cgroup2.devices.allow: c 510:* rwm\n# keep me\n"
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
        "\n[before-upgrade]\nlxc.cgroup2.devices.allow: c 511:* rwm\n"
    )


def test_plain_lxc_config_tune_wrote_in_proxmox_syntax_is_repaired(
    engine: Engine, tmp_path: Path
) -> None:
    # What tune wrote into a plain LXC config before it knew its syntax: LXC refuses it whole.
    config = "/var/lib/lxc/infer/config"
    damaged = (
        "lxc.uts.name = infer\nlxc.prlimit.memlock: unlimited\n"
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "lxc.cgroup2.devices.allow: c 509:* rwm\n"
        "lxc.cgroup2.devices.allow: c 510:* rwm\n"
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
    )
    assert lxc_refuses(damaged, tmp_path) is not None
    repaired = applied(engine, tmp_path, config, damaged, f"path: {config}")
    assert repaired == damaged.replace(": ", " = ")
    assert lxc_refuses(repaired, tmp_path) is None


GEFORCE = "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.query-gpu.csv"


def test_gpu_settings_on_a_real_nvidia_smi_capture(engine: Engine, tmp_path: Path) -> None:
    """The query as a GeForce RTX 4080 SUPER printed it (every field, ECC `[N/A]`): both
    engines set, read back and restore it by the header's names; ECC is a note, not a step."""
    root = build(tmp_path / "h", HOST)
    capture = PROJECT / "tests/corpus/nvidia-smi"
    answer = CommandOutput(
        0,
        (
            capture / "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.query-gpu.csv"
        ).read_bytes(),
    )
    for path, data in recorded.record(nvidia_smi.QUERY, answer).items():
        write(root, path, data)
    profile = write_profile(
        tmp_path / "p.yaml",
        {"gpus": {"all": {"persistence": True, "power_limit": 350, "ecc": True}}},
    )
    before = tree(root)
    assert engine.apply(root, profile, with_persistence=False) is not None
    (gpu,) = nvidia_smi.parse(
        (root / recorded.where(nvidia_smi.QUERY).lstrip("/") / "stdout").read_text()
    )
    assert (gpu.get(nvidia_smi.PERSISTENCE), gpu.get(nvidia_smi.POWER_LIMIT)) == (
        "Enabled",
        "350.00",
    )
    assert runtime_changes(root, profile, False) == []
    assert engine.apply(root, profile, with_persistence=False) is None
    engine.rollback(root)
    assert tree(root) == before
