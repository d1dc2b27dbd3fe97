"""Changes and pending reboots as every command's JSON gives them: the record the plan keeps
(`Change.to_json`) and everything the text and Markdown views show of it, derived here by the
same functions those views call, so that a consumer of the JSON never needs the text (as
Terraform's plan JSON is the data its renderer reads).

Each change also names the line it folds into (`label`): the changes of one line share it, and
the lines stand in the order their first change does. `label` and `shown` are text as the views
show it, host text made printable first (`printable.py`: an ESC as `\\x1b`), so a script may print
them as they are; every other field is the exact value, for a consumer to escape as its medium
needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core.changes import Change, Pending, jsonable
from ..core.printable import printable_data
from .folding import Group, entry_name, fold, line_changes, show, shown, whole_files


def change_json(change: Change, seen: Change, label: str) -> dict[str, Any]:
    """`change` with what the views show of it: `seen` is the change made printable, as the
    views have it, and `label` the line it folds into there."""
    out = change.to_json() | {
        "setting": change.setting,
        "subject": change.subject,
        "entry": entry_name(change),
        "label": label,
        "fix": change.fix,
        "whole_file": whole_files(change),
        "shown": {"current": shown(seen, seen.current), "desired": shown(seen, seen.desired)},
        "takes_effect": change.phase.takes_effect,
        "how": change.phase.how,
    }
    if isinstance(change.current, tuple) or isinstance(change.desired, tuple):
        marked = line_changes(change)
        out["lines"] = {
            "added": [line for mark, line in marked if mark == "+"],
            "removed": [line for mark, line in marked if mark == "-"],
        }
    return out


def _labelled(
    changes: Sequence[Change], lines: Callable[[Sequence[Change]], list[Group]]
) -> list[tuple[Change, Change, str]]:
    """Each of `changes`, made printable, and the label of the line of `lines` it is in."""
    seen = printable_data(tuple(changes))
    labels: dict[str, str] = {}
    for group in lines(seen):
        labels |= dict.fromkeys((c.id for c in group.changes), group.label)
    return [(c, s, labels[s.id]) for c, s in zip(changes, seen, strict=True)]


def changes_json(
    changes: Sequence[Change],
    lines: Callable[[Sequence[Change]], list[Group]] = fold,
) -> list[dict[str, Any]]:
    """`changes` in their order, each labelled by the line it is in: of `lines` (a view that
    folds them its own way) of the changes made printable, by default `fold`."""
    return [change_json(c, s, label) for c, s, label in _labelled(changes, lines)]


def in_sync_json(knobs: Sequence[Change]) -> list[dict[str, Any]]:
    """Knobs already in sync as the views show them ("Confirmed good"): which knob, its value
    and the line it folds into. Not the reason, phase or fix of each: on a tuned host those
    repeat per CPU and per IRQ for knobs that need nothing, and made its plan 50 times larger
    (a fleet's JSON plan spent most of its time writing them)."""
    return [
        {
            "id": c.id,
            "kind": c.kind,
            "target": c.target,
            "entry": entry_name(c),
            "current": jsonable(c.current),
            "label": label,
            "shown": {"current": shown(s, s.current)},
        }
        for c, s, label in _labelled(knobs, fold)
    ]


def pending_json(pending: Pending) -> dict[str, Any]:
    """A pending reboot or restart with what the views show of it."""
    seen = printable_data(pending)
    return pending.to_json() | {
        "kind": pending.kind,
        "target": pending.target,
        "until": pending.until,
        "shown": {"running": show(seen.running), "configured": show(seen.configured)},
    }
