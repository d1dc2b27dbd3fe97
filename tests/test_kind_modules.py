"""modules: loaded or absent from /proc/modules, parameters from /sys/module/M/parameters.

Cases of a host's files in and a plan out are data, in tests/kinds/modules/ (`test_kinds_data`);
what stays here are tables of values, the example hosts and behaviour.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TUNED, UNTUNED, by_id, notes, plan_json, write

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


CORPUS = Path(__file__).resolve().parent / "corpus" / "kmod" / "modules.builtin"
DEBIAN_RELEASE = "6.1.0-50-cloud-amd64"


def debian_cloud_host(root: Path) -> list[str]:
    """A host running Debian 12's cloud kernel, its real modules.builtin; the module names."""
    write(root, "/proc/sys/kernel/osrelease", DEBIAN_RELEASE + "\n")
    write(root, "/proc/modules", PROC_MODULES)
    write(root, f"/lib/modules/{DEBIAN_RELEASE}/modules.builtin", CORPUS.read_text())
    lines = CORPUS.read_text().splitlines()
    return [line.rsplit("/", 1)[1].split(".ko")[0] for line in lines]


def test_every_module_a_debian_kernel_compiles_in_is_loaded(tmp_path: Path) -> None:
    # Never in /proc/modules, yet `modprobe NAME` succeeds: before, each read `absent`.
    names = debian_cloud_host(tmp_path / "host")
    assert len(names) == 141 and "nvme-core" in names and "unix" in names
    body = "".join(f"  {name}: loaded\n" for name in names)
    plan = plan_json(tmp_path, tmp_path / "host", f"name: t\nmodules:\n{body}")
    assert plan["code"] == 0, plan["changes"][:3]


def test_a_module_compiled_in_cannot_be_absent(tmp_path: Path) -> None:
    debian_cloud_host(tmp_path / "host")
    plan = plan_json(tmp_path, tmp_path / "host", "name: t\nmodules:\n  ipv6: absent\n")
    assert by_id(plan)["module:ipv6"]["current"] == "builtin"
    assert "ipv6 is compiled into the running kernel" in " ".join(notes(plan))
