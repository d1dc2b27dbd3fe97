"""modules: loaded or absent from /proc/modules, parameters from /sys/module/M/parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TUNED, UNTUNED, by_id, plan_json, write

PROC_MODULES = """\
nvidia_uvm 1527808 4 - Live 0x0000000000000000 (POE)
nvidia_drm 135168 0 - Live 0x0000000000000000 (POE)
nvidia 11649024 18 nvidia_uvm,nvidia_drm, Live 0x0000000000000000 (POE)
snd_hda_intel 61440 0 - Live 0x0000000000000000
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    write(root, "/proc/modules", PROC_MODULES)
    write(root, "/sys/module/nvidia/parameters/NVreg_EnableGpuFirmware", "18\n")
    write(root, "/sys/module/nvidia_uvm/parameters/uvm_perf_access_counter_mimc", "0\n")
    write(root, "/sys/module/nvidia_drm/parameters/modeset", "N\n")
    write(root, "/sys/module/snd_hda_intel/parameters/power_save", "Y\n")
    return root


@pytest.mark.parametrize("spelling", ["nvidia_uvm", "nvidia-uvm", "snd-hda_intel", "snd_hda-intel"])
def test_dash_and_underscore_are_the_same_name(tmp_path: Path, root: Path, spelling: str) -> None:
    plan = plan_json(tmp_path, root, f"name: t\nmodules:\n  {spelling}: loaded\n")
    assert plan["code"] == 0


def test_loaded_and_absent(tmp_path: Path, root: Path) -> None:
    text = "name: t\nmodules:\n  nvidia-peermem: loaded\n  nouveau: absent\n  nvidia: absent\n"
    plan = plan_json(tmp_path, root, text)
    changes = by_id(plan)
    assert sorted(changes) == ["module:nvidia", "module:nvidia_peermem"]
    assert (
        changes["module:nvidia_peermem"]["current"],
        changes["module:nvidia_peermem"]["desired"],
    ) == (
        "absent",
        "loaded",
    )
    assert (changes["module:nvidia"]["current"], changes["module:nvidia"]["desired"]) == (
        "loaded",
        "absent",
    )


def test_no_proc_modules_is_absent_knowledge_not_absent_module(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/proc/cmdline", "quiet\n")
    plan = plan_json(tmp_path, root, "name: t\nmodules:\n  nouveau: absent\n")
    change = by_id(plan)["module:nouveau"]
    assert change["current"] is None
    assert plan["code"] == 2


def test_parameters_come_from_sys_module(tmp_path: Path, root: Path) -> None:
    text = (
        "name: t\nmodules:\n"
        "  nvidia: {value: loaded, params: {NVreg_EnableGpuFirmware: 0}}\n"
        "  nvidia-uvm: {value: loaded, params: {uvm_perf_access_counter_mimc: '0x0'}}\n"
    )
    plan = plan_json(tmp_path, root, text)
    assert sorted(by_id(plan)) == ["module:nvidia:NVreg_EnableGpuFirmware"]
    change = by_id(plan)["module:nvidia:NVreg_EnableGpuFirmware"]
    assert (change["current"], change["desired"]) == ("18", "0")


def test_parameter_of_a_module_not_loaded_is_absent(tmp_path: Path, root: Path) -> None:
    text = "name: t\nmodules:\n  nvidia_peermem: {value: loaded, params: {peerdirect: 1}}\n"
    plan = plan_json(tmp_path, root, text)
    change = by_id(plan)["module:nvidia_peermem:peerdirect"]
    assert (change["current"], change["desired"]) == (None, "1")


@pytest.mark.parametrize(
    ("module", "param", "value", "in_sync"),
    [
        ("nvidia_drm", "modeset", "0", True),
        ("nvidia_drm", "modeset", "N", True),
        ("nvidia_drm", "modeset", "1", False),
        ("nvidia_drm", "modeset", "y", False),
        ("snd_hda_intel", "power_save", "1", True),
        ("snd_hda_intel", "power_save", "0", False),
    ],
)
def test_boolean_parameters_read_back_as_y_or_n(
    tmp_path: Path, root: Path, module: str, param: str, value: str, in_sync: bool
) -> None:
    # Boolean module parameters print Y or N whatever was written (1, y, on).
    text = f"name: t\nmodules:\n  {module}: {{value: loaded, params: {{{param}: '{value}'}}}}\n"
    plan = plan_json(tmp_path, root, text)
    assert (plan["code"] == 0) is in_sync, plan["changes"]
    if not in_sync:
        change = by_id(plan)[f"module:{module}:{param}"]
        assert change["current"] in ("Y", "N")
        assert change["desired"] in ("Y", "N")
        assert change["current"] != change["desired"]


def test_example_host_lacks_nvidia_peermem(tmp_path: Path) -> None:
    text = "name: t\nmodules:\n  nvidia_peermem: loaded\n  nvidia-uvm: loaded\n"
    assert sorted(by_id(plan_json(tmp_path, UNTUNED, text))) == ["module:nvidia_peermem"]
    assert plan_json(tmp_path, TUNED, text)["code"] == 0
