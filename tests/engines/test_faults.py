"""The fault-injection property (tests/test_apply_faults.py) against both engines at once: the
same random host, profile and fault (the N-th write fails, is silently ignored, or the process
dies before it) given to each engine by the marker the sh library honours on a snapshot
(`/.tune-emulate/fault`), which the Python engine's host in these tests honours as well
(`drive.MarkedFault`). Whatever fails, the host ends as it was, and both engines leave the same
files and the same journals."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, event, given, settings
from hypothesis import strategies as st
from small_host import SmallHost, build, tree, write_profile
from test_apply_faults import SCRATCH, scenarios

from reconciler.apply.journal import read_run, run_ids
from reconciler.core.errors import ApplyFailed, HostError
from reconciler.hosts.directory import SnapshotHost

from .drive import FAULT, Engine, Killed, PythonEngine, ShEngine, differences, left_behind


def outcome(engine: Engine, root: Path, profile: Path, persist: bool, fault: str) -> str:
    """Apply with the fault in place, then recover as a user would; what happened."""
    before = tree(root)
    marker = root / FAULT.lstrip("/")
    marker.parent.mkdir()
    marker.write_text(f"{fault}\n")
    try:
        run_id = engine.apply(root, profile, with_persistence=persist)
    except HostError:
        assert run_ids(SnapshotHost(root)) == []
        happened = "refused before any write"
    except ApplyFailed:
        (run_id,) = run_ids(SnapshotHost(root))
        run = read_run(SnapshotHost(root), run_id)
        assert run is not None and run.outcome == "rolled-back"
        happened = "rolled back"
    except Killed:
        happened = "killed, then tune rollback"
    else:
        happened = "applied, then tune rollback" if run_id else "nothing to change"
    marker.unlink()
    marker.parent.rmdir()
    if happened.endswith("tune rollback"):
        assert all(done.result.failures == [] for done in engine.rollback(root))
    assert tree(root) == before, happened
    return happened


# As many examples as the Python engine's own property (tests/test_apply_faults.py: 200) in
# the whole suite; the quick loop runs a few (an sh apply is a process and a poll). No explain
# phase, which reruns a failure hundreds of times.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink]
FAULTS = (scenarios(), st.integers(0, 12), st.sampled_from(["fail", "ignore", "crash"]))


@settings(max_examples=12, phases=PHASES)
@given(*FAULTS)
def test_any_fault_anywhere_leaves_the_host_as_it_was_whichever_engine(
    scenario: tuple[SmallHost, dict[str, Any], bool], fault_at: int, fault: str
) -> None:
    both_engines(scenario, fault_at, fault)


@pytest.mark.slow
@settings(max_examples=200, phases=PHASES)
@given(*FAULTS)
def test_any_fault_anywhere_whichever_engine_as_often_as_the_python_property(
    scenario: tuple[SmallHost, dict[str, Any], bool], fault_at: int, fault: str
) -> None:
    both_engines(scenario, fault_at, fault)


def both_engines(
    scenario: tuple[SmallHost, dict[str, Any], bool], fault_at: int, fault: str
) -> None:
    """One host, profile and fault given to each engine: the same outcome, the same remains."""
    spec, data, persist = scenario
    scratch = Path(tempfile.mkdtemp(dir=SCRATCH))
    try:
        profile = write_profile(scratch / "p.yaml", data)
        python, sh = PythonEngine(), ShEngine(timeout=1)
        happened = []
        for engine in (python, sh):
            root = build(scratch / engine.name, spec)
            happened.append(outcome(engine, root, profile, persist, f"{fault_at} {fault}"))
        assert happened[0] == happened[1]
        event(happened[0])
        assert differences(left_behind(sh), left_behind(python)) == []
    finally:
        shutil.rmtree(scratch)
