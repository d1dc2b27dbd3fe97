"""Profile data from fixes: where each `Fix` goes in the contract's profile format.

The audit validates each finding's fixes as a profile of their own (to learn what `tune plan`
will say about them), and `--write-profile` merges all of them; both build the data here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .model import Fix

Anchor = tuple[str | int, ...]  # where in the profile data an entry starts


def meta(priority: str, reason: str) -> dict[str, str]:
    return {"priority": priority, "reason": reason}


def place(data: dict[str, Any], fix: Fix, entry_meta: dict[str, str]) -> Anchor:
    """Put one fix into `data` (merging with what is there); return its anchor."""
    if fix.item is None:
        node = data.setdefault(fix.section, {})
        for key in fix.path[:-1]:
            node = node.setdefault(key, {})
        node[fix.path[-1]] = _entry(fix.value, entry_meta)
        return (fix.section, *fix.path)
    items: list[dict[str, Any]] = data.setdefault(fix.section, [])
    index = next(
        (i for i, it in enumerate(items) if all(it.get(k) == v for k, v in fix.item.items())),
        None,
    )
    if index is None:
        items.append(dict(fix.item))
        index = len(items) - 1
    node = items[index]
    if not fix.path:
        node.update(_entry(fix.value, entry_meta))
        return (fix.section, index)
    for key in fix.path[:-1]:
        node = node.setdefault(key, {})
    node[fix.path[-1]] = _entry(fix.value, entry_meta)
    return (fix.section, index, *fix.path)


def profile_data(fixes: Iterable[tuple[Fix, dict[str, str]]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for fix, entry_meta in fixes:
        place(data, fix, entry_meta)
    return data


def _entry(value: Any, entry_meta: dict[str, str]) -> dict[str, Any]:
    """Scalars take the long form; mappings (idle_states, a pci item) take meta beside keys."""
    return {**value, **entry_meta} if isinstance(value, dict) else {"value": value, **entry_meta}
