"""A list of things in a message a terminal shows: a count, the first few, each cut short.

An operator of one host and one of a thousand read the same messages; a verdict that names 358
per-CPU knobs in one line is unreadable anywhere. Messages name the first few and how many
more; the whole list is in `--format json`.
"""

from __future__ import annotations

from collections.abc import Sequence

SHOWN = 3  # items a message names
ITEM = 90  # characters of one item a message shows
LINE = 300  # the longest line a message may be


def cut(text: str, limit: int = ITEM) -> str:
    """`text`, shortened to `limit` characters with `...` where it was cut."""
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def first_few(
    items: Sequence[str], shown: int = SHOWN, width: int = ITEM * SHOWN, more: str = "more"
) -> str:
    """`a; b; c; and 12 more`: the first `shown` items, cut so that they take about `width`
    characters together (one alone may take all of it)."""
    named = items[:shown]
    each = max(40, width // max(1, len(named)))
    left = len(items) - shown
    return "; ".join(cut(item, each) for item in named) + (
        f"; and {left} {more}" if left > 0 else ""
    )
