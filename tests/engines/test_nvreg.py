"""The NVIDIA driver's parameters (kind `nvreg`) through both engines: the reboot phase writes
tune's modprobe.d file and rebuilds the initramfs (journaled, `deferred`, on a snapshot, as every
boot tool), the plan is then pending a reboot, a second apply changes nothing, and rollback gives
the file back byte for byte and rebuilds the initramfs again."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import profile, write
from small_host import tree

from reconciler.apply.journal import read_run
from reconciler.facts.modules import MODULES
from reconciler.facts.nvidia_params import PARAMS
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile
from reconciler.steps.persist import NVREG
from reconciler.steps.records import Deferred

from .drive import Engine

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "nvidia-params" / "params"
REBOOT = {"runtime_only": False, "reboot_phase": True}
PROFILE = """name: gpudirect
modules:
  nvidia:
    value: loaded
    priority: P0
    params:
      NVreg_EnableStreamMemOPs: 1
      NVreg_RegistryDwords: "PeerMappingOverride=1;"
      NVreg_RestrictProfilingToAdminUsers: 0
"""
# What the driver package left (Ubuntu's nvidia-kernel-common ships such a file).
PACKAGE_CONF = "options nvidia NVreg_PreserveVideoMemoryAllocations=1\n"
TOOLS = {
    "update-initramfs": ("/usr/sbin/update-initramfs", ["update-initramfs", "-u"]),
    "dracut": ("/usr/bin/dracut", ["dracut", "-f"]),
}


def gpu_host(root: Path, tool: str, ours: str | None = None) -> Path:
    """A host with nvidia loaded (a real params file, the string lines as nv-procfs.c prints
    them), the driver package's modprobe.d file, the initramfs tool and perhaps tune's file."""
    write(root, PARAMS, CORPUS.read_text() + 'RegistryDwords: ""\nRmMsg: ""\n')
    write(root, MODULES, "nvidia 11649024 0 - Live 0x0000000000000000 (POE)\n")
    write(root, "/etc/modprobe.d/nvidia-graphics-drivers.conf", PACKAGE_CONF)
    write(root, TOOLS[tool][0], "")
    if ours is not None:
        write(root, NVREG, ours)
    return root


def deferred(root: Path, run_id: str) -> list[list[str]]:
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None
    return [list(r.argv) for r in run.records if isinstance(r, Deferred)]


@pytest.mark.parametrize("tool", sorted(TOOLS))
@pytest.mark.parametrize("ours", [None, "# hand-written\noptions nvidia NVreg_EnableMSI=1\n"])
def test_reboot_phase_writes_the_file_rebuilds_and_rolls_back(
    engine: Engine, tmp_path: Path, tool: str, ours: str | None
) -> None:
    root = gpu_host(tmp_path / "host", tool, ours)
    before = tree(root)
    text = profile(tmp_path, PROFILE)
    run_id = engine.apply(root, text, phase="reboot", **REBOOT)
    assert run_id is not None
    assert (root / NVREG.lstrip("/")).read_text().splitlines()[-1] == (
        "options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords=PeerMappingOverride=1; "
        "NVreg_RestrictProfilingToAdminUsers=0"
    )
    rebuild = TOOLS[tool][1]
    # tune owns the file: what it held that the profile does not give is taken out (one step).
    steps = 3 if ours is None else 4
    assert deferred(root, run_id) == [rebuild] * steps
    loaded = load_profile(text)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, True), True)
    assert [c.id for c in plan.changes if c.kind == "nvreg"] == []
    assert [p.id for p in plan.pending] == [
        "nvreg:NVreg_EnableStreamMemOPs",
        "nvreg:NVreg_RegistryDwords",
        "nvreg:NVreg_RestrictProfilingToAdminUsers",
    ]
    assert engine.apply(root, text, phase="reboot", **REBOOT) is None
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == before
    # The rollback rebuilt the initramfs after each undo too, so it holds the old options.
    assert deferred(root, run_id) == [rebuild] * 2 * steps


def test_a_parameter_the_profile_drops_is_taken_out_and_rollback_puts_it_back(
    engine: Engine, tmp_path: Path
) -> None:
    root = gpu_host(tmp_path / "host", "update-initramfs")
    assert engine.apply(root, profile(tmp_path, PROFILE), phase="reboot", **REBOOT)
    applied = tree(root)
    fewer = PROFILE.replace('      NVreg_RegistryDwords: "PeerMappingOverride=1;"\n', "")
    run_id = engine.apply(root, profile(tmp_path, fewer, "fewer.yaml"), phase="reboot", **REBOOT)
    assert run_id is not None
    assert (root / NVREG.lstrip("/")).read_text().splitlines()[-1] == (
        "options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RestrictProfilingToAdminUsers=0"
    )
    assert deferred(root, run_id) == [["update-initramfs", "-u"]]
    (done,) = engine.rollback(root, run_id)
    assert done.result.failures == []
    assert tree(root) == applied
