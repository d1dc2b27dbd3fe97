"""Host-derived text in Markdown: shown as the host has it, never read as Markdown.

A host name, a sysctl value or a file name is the host's, and a host can be hostile (see
printable.py). Put into Markdown as it is, `[run this fix](https://...)` becomes a link and
`![](https://...)` an image that loads when the report is viewed (GitHub, a wiki), a `|` splits
a table row, and a backtick ends the code span a value sits in, so the rest of the value is read
as Markdown. The renderers pass every value they did not write themselves through one of these:
`text` where it sits among tune's sentences, `code` where it is shown as a value. Both come after
`printable_data`, which has already shown controls and newlines as escapes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# ASCII punctuation that can start inline syntax in CommonMark (code spans, emphasis, links,
# images, autolinks, raw HTML, entities, hard breaks) or in GitHub's extensions (tables,
# strikethrough, math), and `#`, which closes an ATX heading. CommonMark lets any ASCII
# punctuation be escaped with a backslash, and shows the escaped character alone. An `_`
# between two letters or digits can neither open nor close emphasis, and stays as it is:
# `kernel.numa_balancing` reads better than `kernel.numa\_balancing` in the Markdown source.
# Block syntax (`>`, `-`, `1.`) acts only at the start of a line, and host text never starts
# one: the renderers put it after their own words, and `printable` has shown its newlines.
SPECIAL = re.compile(r"[\\`*\[\]<!|#~&$]|_(?![^\W_])|(?<![^\W_])_")
TICKS = re.compile(r"`+")


def text(value: object) -> str:
    """`value` for plain context (a sentence, a list item, a table cell, a heading): each
    character that Markdown could act on escaped; it renders as the value itself."""
    return SPECIAL.sub(lambda m: "\\" + m.group(), str(value))


def code(value: object, cell: bool = False) -> str:
    """`value` as a code span that shows it exactly. Backslashes are literal in a code span, so
    nothing is escaped: the fence is one backtick longer than any run of backticks in the value,
    with a space inside it where the value starts or ends with a backtick (or with a space at
    both ends), which CommonMark strips again. In a table `cell`, GitHub splits the row at a `|`
    even inside a code span unless it is written `\\|`, and takes the backslash out again."""
    content = str(value)
    if not content:
        return "` `"  # CommonMark has no empty code span; a space is the nearest
    fence = "`" * (max((len(run) for run in TICKS.findall(content)), default=0) + 1)
    padded = content.startswith("`") or content.endswith("`")
    padded |= content.startswith(" ") and content.endswith(" ") and content.strip(" ") != ""
    pad = " " if padded else ""
    if cell:
        content = content.replace("|", "\\|")
    return f"{fence}{pad}{content}{pad}{fence}"


def fence(lines: Iterable[str], info: str = "", indent: str = "") -> list[str]:
    """A fenced code block of `lines`: its fence longer than any run of backticks in them, so
    no line of host text can close it early."""
    lines = list(lines)
    longest = max((len(run) for line in lines for run in TICKS.findall(line)), default=0)
    mark = "`" * max(3, longest + 1)
    return [f"{indent}{mark}{info}", *(f"{indent}{line}" for line in lines), f"{indent}{mark}"]
