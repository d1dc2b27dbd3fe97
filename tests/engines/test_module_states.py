"""A module is loaded when the kernel says it is live (or it is compiled in): one listed in
/proc/modules as `Loading` or `Unloading` (the kernel's MODULE_STATE_COMING and _GOING, which
/sys/module/NAME/initstate says as `coming` and `going`) is not, as kmod's module_is_inkernel
decides (libkmod-module.c at kmod-project/kmod 84fa569b: LIVE or BUILTIN only). modprobe then
loads it: the kernel waits for the one in flight to finish, and it is listed once, live."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write
from small_host import SmallHost, build, write_profile

from reconciler.facts.modules import loaded_modules
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile
from reconciler.steps.ops import Probe, Read

from .drive import Engine

TRANSIENT = ["Loading", "Unloading"]


def line(state: str) -> str:
    return f"nvidia_peermem 16384 0 - {state} 0x0000000000000000 (POE)\n"


def module_change(root: Path, profile: Path) -> tuple[object, object]:
    loaded = load_profile(profile)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, False), False)
    (change,) = [c for c in plan.compared if c.kind == "module"]
    return change.current, change.desired


@pytest.mark.parametrize("state", TRANSIENT)
def test_a_module_in_flight_is_not_loaded(state: str) -> None:
    assert loaded_modules(line(state)) == set()
    assert loaded_modules(line("Live")) == {"nvidia_peermem"}
    probe = Probe("/proc/modules", Read.MODULE, "nvidia_peermem")
    assert probe.value(line(state).encode()) == "absent"
    assert probe.value(line("Live").encode()) == "loaded"


@pytest.mark.parametrize("state", TRANSIENT)
def test_loading_it_leaves_it_listed_once_live(engine: Engine, scratch: Path, state: str) -> None:
    root = build(scratch / "host", SmallHost(modules=["nvidia"]))
    text = (root / "proc/modules").read_text()
    write(root, "/proc/modules", line(state) + text)
    profile = write_profile(scratch / "p.yaml", {"modules": {"nvidia_peermem": "loaded"}})
    assert module_change(root, profile) == (state.lower(), "loaded")
    assert engine.apply(root, profile) is not None
    listed = [
        x
        for x in (root / "proc/modules").read_text().splitlines()
        if x.split()[0] == "nvidia_peermem"
    ]
    assert len(listed) == 1 and listed[0].split()[4] == "Live", listed
    assert module_change(root, profile) == ("loaded", "loaded")


@pytest.mark.parametrize("state", TRANSIENT)
def test_a_module_in_flight_is_not_absent_either(scratch: Path, state: str) -> None:
    root = build(scratch / "host", SmallHost(modules=["nvidia"]))
    write(root, "/proc/modules", line(state))
    profile = write_profile(scratch / "p.yaml", {"modules": {"nvidia_peermem": "absent"}})
    assert module_change(root, profile) == (state.lower(), "absent")
