"""A changed file as a unified diff, as `diff -u` and `ansible --diff` show it: the lines that
change, with three lines of context, rather than the whole new file or a count of lines."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from .style import styler

SHADES = {"+": "green", "-": "red", "@": "cyan"}


def unified(
    path: str, before: Sequence[str] | None, after: Sequence[str] | None, color: bool = False
) -> list[str]:
    """The diff from `before` to `after` (None: the file is absent), one line a list item.
    The lines must already be printable: colour is added here, after escaping."""
    style = styler(color)
    lines = difflib.unified_diff(
        list(before or ()),
        list(after or ()),
        fromfile="/dev/null" if before is None else f"a{path}",
        tofile="/dev/null" if after is None else f"b{path}",
        lineterm="",
    )
    out = []
    for line in lines:
        if line.startswith(("---", "+++")):
            out.append(style(line, bold=True))
        else:
            shade = SHADES.get(line[:1])
            out.append(style(line, fg=shade) if shade else line)
    return out
