"""The services kind through both engines: drop-ins and logind's settings written with a
`systemctl daemon-reload`, units enabled, disabled, masked and unmasked (`systemctl`
emulated alike in both), the plan then empty with the restart pending, a second apply with
nothing to do, and a rollback that gives back every byte; a host without `systemctl` is
refused before anything is written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from small_host import tree

from reconciler.core.errors import HostError
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile

from .drive import Engine

CASES = Path(__file__).resolve().parent.parent / "kinds" / "services"


def host(scratch: Path, case: str) -> tuple[Path, Path]:
    root = shutil.copytree(CASES / case / "host", scratch / "host", symlinks=True)
    return root, CASES / case / "profile.yaml"


@pytest.mark.parametrize(
    "case",
    [
        "memlock-drop-in-for-containerd",
        "logind-remove-ipc",
        "enable-disable-and-mask",
        "unmask-and-enable",
    ],
)
def test_apply_then_plan_is_empty_then_rollback_restores(
    engine: Engine, scratch: Path, case: str
) -> None:
    root, profile = host(scratch, case)
    before = tree(root)
    assert engine.apply(root, profile, with_persistence=False) is not None
    loaded = load_profile(profile)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, False), False)
    assert plan.changes == ()
    if case.startswith("memlock"):
        # containerd runs with the limits it started with until it restarts.
        assert {p.id for p in plan.pending} == {
            "service:containerd.service:LimitMEMLOCK",
            "service:containerd.service:LimitSTACK",
            "service:containerd.service:LimitNPROC",
        }
    assert engine.apply(root, profile, with_persistence=False) is None
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == before


def test_a_host_without_systemctl_is_refused_before_any_write(
    engine: Engine, scratch: Path
) -> None:
    root, profile = host(scratch, "memlock-drop-in-for-containerd")
    listed = root / ".tune-emulate" / "commands"
    listed.parent.mkdir()
    listed.write_text("modprobe\n")
    before = tree(root)
    with pytest.raises(HostError, match="systemctl"):
        engine.apply(root, profile, with_persistence=False)
    assert tree(root) == before
