"""Changes and pending reboots as every command's JSON gives them: the record the plan keeps
(`Change.to_json`) and everything the text and Markdown views show of it, derived here by the
same functions those views call, so that a consumer of the JSON never needs the text (as
Terraform's plan JSON is the data its renderer reads).

Each change also names the line it folds into (`label`): the changes of one line share it, and
the lines stand in the order their first change does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..plan.model import Change, Pending
from .folding import Group, entry_name, fold, line_changes, show, shown, whole_files


def change_json(change: Change, label: str) -> dict[str, Any]:
    """`change` with what the views show of it; `label` is the line it folds into."""
    out = change.to_json() | {
        "setting": change.setting,
        "subject": change.subject,
        "entry": entry_name(change),
        "label": label,
        "fix": change.fix,
        "whole_file": whole_files(change),
        "shown": {
            "current": shown(change, change.current),
            "desired": shown(change, change.desired),
        },
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


def changes_json(
    changes: Sequence[Change], groups: Iterable[Group] | None = None
) -> list[dict[str, Any]]:
    """`changes` in their order, each labelled by the line of `groups` it is in (a view that
    folds them its own way), by default by `fold(changes)`."""
    labels: dict[str, str] = {}
    for group in fold(changes) if groups is None else groups:
        labels |= dict.fromkeys((c.id for c in group.changes), group.label)
    return [change_json(c, labels[c.id]) for c in changes]


def pending_json(pending: Pending) -> dict[str, Any]:
    """A pending reboot or restart with what the views show of it."""
    return pending.to_json() | {
        "kind": pending.kind,
        "target": pending.target,
        "until": pending.until,
        "shown": {"running": show(pending.running), "configured": show(pending.configured)},
    }
