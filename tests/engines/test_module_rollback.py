"""A module the profile makes absent comes back, on rollback, as it was before: with the
parameters it had then, not the ones the profile names (which say how it should be loaded, not
how it was). The reload's argv is journaled with the step, so a rollback from the journal alone
(`tune rollback`, either engine) has them."""

from __future__ import annotations

from pathlib import Path

from conftest import write
from small_host import SmallHost, build, write_profile

from reconciler.apply.journal import read_run
from reconciler.hosts.directory import SnapshotHost
from reconciler.steps.ops import Command

from .drive import Engine

MODESET = "/sys/module/nouveau/parameters/modeset"


def test_a_module_made_absent_is_reloaded_with_the_parameters_it_had(
    engine: Engine, scratch: Path
) -> None:
    root = build(scratch / "host", SmallHost(modules=["nouveau"]))
    write(root, MODESET, "-1\n")
    (root / "var/lib/tune/runs").mkdir(parents=True, exist_ok=True)
    profile = write_profile(
        scratch / "p.yaml", {"modules": {"nouveau": {"value": "absent", "params": {"modeset": 0}}}}
    )
    run_id = engine.apply(root, profile)
    assert run_id is not None and not (root / MODESET.lstrip("/")).exists()
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None
    (step,) = [s for _, s in run.steps if s.kind == "module"]
    assert step.undo == (Command(("modprobe", "nouveau", "modeset=-1")),)
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert (root / MODESET.lstrip("/")).read_text() == "-1\n"
