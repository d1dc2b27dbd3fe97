"""What `tune apply` leaves under /var/lib/tune, written into snapshot copies by hand (the run
journal contract), so `tune check` is tested without apply."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from conftest import BLACKWELL, TUNED, UNTUNED, write

from reconciler.apply.work import profile_text
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile

FINISHED = "2025-06-01T12:00:05Z"
RUN_ID = "20250601T120000Z-a1b2c3"


def resolved_yaml(profile: Path = BLACKWELL) -> str:
    """The profile with `extends` applied, exactly as apply stores it."""
    return profile_text(load_profile(profile))


def _plan(root: Path) -> dict[str, dict[str, Any]]:
    loaded = load_profile(BLACKWELL)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile))
    # A knob the host lacks (missing) is never a step: apply leaves it out.
    return {c.id: c.to_json() for c in plan.compared if not c.missing}


@cache
def applied_steps() -> tuple[dict[str, Any], ...]:
    """What apply wrote to turn the untuned example host into the tuned one: each knob the
    untuned plan changes, from its untuned value to the tuned host's. (C2 is gone from the
    tuned host, which boots with processor.max_cstate=1, so its steps are left out.)"""
    before, after = _plan(UNTUNED), _plan(TUNED)
    return tuple(
        {**after[knob], "current": change["current"]}
        for knob, change in before.items()
        if change["current"] != change["desired"] and knob in after
    )


def journal(
    *,
    run_id: str = RUN_ID,
    outcome: str | None = "applied",
    finished: str = FINISHED,
    steps: tuple[dict[str, Any], ...] | None = None,
    profile: str = "blackwell-8x",
) -> str:
    records: list[dict[str, Any]] = [
        {
            "type": "run",
            "run_id": run_id,
            "started": finished.replace(":05Z", ":00Z"),
            "profile": profile,
            "phase": "all",
            "host": "gpu-node-07",
            "boot_id": "4f0c6b3e-1d2a-4e5f-9a8b-7c6d5e4f3a2b",
        }
    ]
    for seq, change in enumerate(applied_steps() if steps is None else steps, 1):
        records.append(
            {
                "type": "step",
                "seq": seq,
                "id": change["id"],
                "kind": change["kind"],
                "target": change["target"],
                "prior": change["current"],
                "desired": change["desired"],
                # How the run would restore it: this contract's readers (check) never look.
                "probe": {"path": "/proc/sys/vm/unused", "read": "words", "arg": ""},
                "expect": None,
                "restored": None,
                "do": [],
                "undo": [],
            }
        )
        records.append({"type": "written", "seq": seq})
    if outcome is not None:
        records.append({"type": "end", "outcome": outcome, "finished": finished})
    return "".join(json.dumps(r) + "\n" for r in records)


def write_applied(root: Path, *, profile_text: str | None = None, **run: Any) -> Path:
    """The stored profile and one run journal, as a successful apply leaves them."""
    write(
        root,
        "/var/lib/tune/profile.yaml",
        resolved_yaml() if profile_text is None else profile_text,
    )
    return write_run(root, **run)


def write_run(root: Path, **run: Any) -> Path:
    run_id = run.get("run_id", RUN_ID)
    path = write(root, f"/var/lib/tune/runs/{run_id}.jsonl", journal(**run))
    path.chmod(0o600)
    return path
