"""Per-kind cases as data, as pyinfra tests its facts and operations: a host's files in, the
plan and the steps out; and for every case that changes something, the same idempotency and
rollback check, whatever the kind.

A case is a directory `tests/kinds/<kind>/<case>/` holding:
- `host/`: the host's files, laid out like its root (`host/sys/devices/...`);
- `profile.yaml`: the profile planned against it;
- `expected.json`: what `tune plan` finds (`changes`, `pending`, `checks`, `notes`, each as the
  plan's JSON has it; a note's position names `profile.yaml`), and what `tune apply` would do
  (`steps`: each step's id, the operations of `do` and `undo` as `--dry-run` prints them, and
  what its probe must read after each), or why it cannot (`refused`: the message; alone, when
  the plan itself refuses). `"persist": true` plans tune's boot-time files too (`--no-persist`
  otherwise); `"apply_check": "why"` leaves the case out of the idempotency and rollback check,
  saying why.

`TUNE_REGENERATE=1 pytest tests/test_kinds_data.py` writes `expected.json` from what tune does
now: read the diff before committing it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from small_host import whole_tree

from reconciler.apply.python_engine import execute, rollback
from reconciler.apply.work import prepare
from reconciler.core.errors import HostError
from reconciler.hosts.directory import SnapshotHost
from reconciler.kinds import REGISTRY
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import LoadedProfile, load_profile
from reconciler.steps.ops import Step

CASES = Path(__file__).resolve().parent / "kinds"
ALL = sorted(CASES.glob("*/*/expected.json"))
# The cases that change something: a plan with no change (or one apply refuses) has nothing
# to apply and roll back.
APPLIED = [e for e in ALL if json.loads(e.read_text()).get("steps")]
REGENERATE = os.environ.get("TUNE_REGENERATE") == "1"
SETTINGS = ("persist", "apply_check")  # how the case runs, not what it finds


def case_id(expected: Path) -> str:
    return f"{expected.parent.parent.name}/{expected.parent.name}"


def _step(step: Step) -> dict[str, Any]:
    return {
        "id": step.id,
        "do": [op.describe() for op in step.do],
        "undo": [op.describe() for op in step.undo],
        "expect": step.expect,
        "restored": step.restored,
    }


def outcome(case: Path, host_root: Path, persist: bool) -> dict[str, Any]:
    """What tune makes of the case: the plan's parts and the steps (or the refusal)."""
    loaded = load_profile(case / "profile.yaml")
    host = SnapshotHost(host_root)
    try:
        plan = make_plan(loaded, observe(host, loaded.profile, persist), persist).to_json()
    except HostError as exc:  # a plan that refuses (a command line nobody can know)
        return {"refused": str(exc)}
    for note in plan["notes"]:
        note["message"] = note["message"].replace(f"{case}/", "")
    found: dict[str, Any] = {k: plan[k] for k in ("changes", "pending", "checks", "notes")}
    try:
        work = prepare(
            host, loaded, runtime_only=False, with_persistence=persist, preflight_here=False
        )
        found["steps"] = [_step(step) for step in work.steps]
    except HostError as exc:
        found["refused"] = str(exc)
    return found


@pytest.mark.parametrize("expected", ALL, ids=case_id)
def test_case(expected: Path) -> None:
    case = expected.parent
    wanted = json.loads(expected.read_text())
    persist = bool(wanted.get("persist", False))
    found = outcome(case, case / "host", persist)
    settings = {k: wanted[k] for k in SETTINGS if k in wanted}
    if REGENERATE:
        expected.write_text(json.dumps({**settings, **found}, indent=2) + "\n")
    assert {k: v for k, v in wanted.items() if k not in SETTINGS} == found


@pytest.mark.parametrize("expected", APPLIED, ids=case_id)
def test_apply_then_plan_is_empty_then_rollback_restores(tmp_path: Path, expected: Path) -> None:
    """Every kind's every case that changes something: apply on a copy of its host, the plan
    is empty after, a second apply has nothing to do, and rollback leaves the tree (files,
    directories, modes) exactly as it was."""
    case = expected.parent
    wanted = json.loads(expected.read_text())
    if "apply_check" in wanted:
        pytest.skip(wanted["apply_check"])
    persist = bool(wanted.get("persist", False))
    root = shutil.copytree(case / "host", tmp_path / "host", symlinks=True)
    before = settled(root)
    loaded = load_profile(case / "profile.yaml")
    apply(SnapshotHost(root), loaded, persist)
    again = SnapshotHost(root)
    plan = make_plan(loaded, observe(again, loaded.profile, persist), persist)
    assert plan.changes == ()
    assert prepare(again, loaded, runtime_only=False, with_persistence=persist).steps == ()
    result = rollback(SnapshotHost(root))
    assert result.result.failures == []
    assert settled(root) == before


def settled(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """The host's whole tree but tune's own state; /proc/modules as its set of lines: the
    kernel lists modules newest first, so one unloaded and loaded again moves to the top."""
    tree = whole_tree(root)
    if "proc/modules" in tree:
        mode, data = tree["proc/modules"]
        tree["proc/modules"] = (mode, b"".join(sorted((data or b"").splitlines(keepends=True))))
    return tree


def apply(host: SnapshotHost, loaded: LoadedProfile, persist: bool) -> None:
    work = prepare(host, loaded, runtime_only=False, with_persistence=persist)
    execute(host, work, loaded, sync=False)


def test_every_kind_has_cases_and_every_changing_kind_applies() -> None:
    """The registry is the list: a profile section without cases fails here, and so does a kind
    whose cases plan changes but never one that applies (a kind that only reports, as checks,
    plans none)."""
    cases = [(e.parent.parent.name, json.loads(e.read_text())) for e in ALL]
    sections = {kind.section for kind in REGISTRY if kind.section}
    assert sections <= {kind for kind, _ in cases}
    changing = {kind for kind, data in cases if data.get("changes")}
    checked = {kind for kind, data in cases if data.get("steps") and "apply_check" not in data}
    assert changing <= checked
