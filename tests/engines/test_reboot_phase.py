"""The reboot phase (tests/test_reboot_phase.py's scenarios) against both engines: the kernel
command line through every boot-loader layout on a snapshot, where a boot tool is journaled
(`deferred`), not run, and grubby is emulated; and the LXC configuration of the example host."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import BLACKWELL, profile, write
from small_host import tree
from test_reboot_phase import LAYOUTS, PROFILE, RUNNING

from reconciler.apply.journal import read_run
from reconciler.core.errors import HostError
from reconciler.facts import cmdline as fmt
from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.emulate import COMMANDS, LISTED
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile
from reconciler.steps.records import Deferred

from .drive import Engine

REBOOT = {"runtime_only": False, "reboot_phase": True}


def layout(tmp_path: Path, name: str) -> Path:
    root = tmp_path / "host"
    write(root, fmt.PROC_CMDLINE, RUNNING)
    write(root, fmt.OSRELEASE, "6.14.8-2-pve\n")
    LAYOUTS[name][0](root)
    return root


def configured(root: Path) -> dict[str, str]:
    boot = fmt.boot_config(SnapshotHost(root).fetch(fmt.request()))
    assert boot is not None
    return fmt.parameters(boot.cmdline) or {}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_boot_layout_applies_and_rolls_back(
    engine: Engine, tmp_path: Path, name: str
) -> None:
    root = layout(tmp_path, name)
    before = tree(root)
    text = profile(tmp_path, PROFILE)
    run_id = engine.apply(root, text, phase="reboot", **REBOOT)
    assert run_id is not None
    params = configured(root)
    assert params["amd_pstate"] == "active" and params["processor.max_cstate"] == "1"
    assert "nomodeset" not in params and "quiet" in params
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None and run.outcome == "applied"
    deferred = [list(r.argv) for r in run.records if isinstance(r, Deferred)]
    tool = LAYOUTS[name][1]
    assert deferred == ([] if tool is None else [list(tool)] * 3)
    loaded = load_profile(text)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, True), True)
    assert [c.id for c in plan.changes if c.kind == "cmdline"] == []
    engine.rollback(root)
    assert tree(root) == before


def test_a_missing_grubby_names_its_package(engine: Engine, tmp_path: Path) -> None:
    root = layout(tmp_path, "grubby")
    write(root, LISTED, "".join(f"{c}\n" for c in COMMANDS if c != "grubby"))
    before = tree(root)
    with pytest.raises(HostError) as caught:
        engine.apply(root, profile(tmp_path, PROFILE), phase="reboot", **REBOOT)
    assert str(caught.value).splitlines() == [
        f"grubby is not installed on this host (package grubby); cmdline:{name} needs it."
        for name in ("processor.max_cstate",)
    ]
    assert tree(root) == before


def test_snapshot_journals_boot_tools_and_never_writes_runtime(
    engine: Engine, untuned: Path
) -> None:
    before = tree(untuned)
    run_id = engine.apply(untuned, BLACKWELL, phase="reboot", **REBOOT)
    assert run_id is not None
    run = read_run(SnapshotHost(untuned), run_id)
    assert run is not None and run.header is not None and run.header.phase == "reboot"
    assert {step.kind for _, step in run.steps} == {"cmdline", "lxc"}
    deferred = [list(r.argv) for r in run.records if isinstance(r, Deferred)]
    assert deferred and all(argv == ["update-grub"] for argv in deferred)
    changed = {p for p, data in tree(untuned).items() if before.get(p) != data}
    assert not any(p.startswith(("proc/", "sys/")) for p in changed)
    assert {"etc/default/grub.d/90-tune.cfg", "etc/pve/lxc/101.conf"} <= changed
    engine.rollback(untuned)
    assert tree(untuned) == before


def test_runtime_then_reboot_in_one_run(engine: Engine, tmp_path: Path) -> None:
    root = layout(tmp_path, "grubby")
    write(root, "/proc/sys/vm/swappiness", "60\n")
    before = tree(root)
    text = profile(tmp_path, PROFILE + "sysctl:\n  vm.swappiness: 10\n")
    run_id = engine.apply(root, text, runtime_only=False)
    assert run_id is not None
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None
    assert [step.kind for _, step in run.steps] == [
        "sysctl",
        "file",
        "cmdline",
        "cmdline",
        "cmdline",
    ]
    engine.rollback(root)
    assert tree(root) == before
