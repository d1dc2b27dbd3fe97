"""Host-derived text as a terminal or a Markdown reader may see it: one line, what it says.

File names, file contents and command output on a host are the host's, and a host can be
hostile (a snapshot from a support ticket, a container's config). A newline in a sysctl value
or a file name would start a line that looks like tune's own (`    ~ sysctl vm.x: 1 -> 2`);
ESC starts a terminal control sequence (clear the screen, move the cursor over a line, set the
window title); a bidi override (U+202E) shows text in an order other than the bytes it is.
Text output shows each of these as an escape instead (`\\x1b`, `\\n`, `\\u202e`), once, where
the renderer starts; JSON carries the exact value, escaped by JSON itself.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar, cast

T = TypeVar("T")

# C0 and C1 controls, DEL; the bidi embeddings, overrides and isolates and the Unicode line and
# paragraph separators, which terminals and browsers act on though they print nothing; and
# lone surrogates, which is how Python holds a file name's bytes that are not UTF-8 and which
# no terminal encoding can write.
_UNSAFE = "\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
# A backslash is doubled only where it could be read as the start of an escape: text with a
# real ESC and text with the four characters `\x1b` must not look the same (a plan would show
# a change as in sync), while `C:\path` or `\d` read as they are.
UNSAFE = re.compile(f"[{_UNSAFE}]|\\\\(?=[\\\\nrtxu{_UNSAFE}]|$)")
SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in SHORT:
        return SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every character that could act on a terminal or reorder a line escaped, as
    Python writes it in a string literal; different texts stay different."""
    # Most text has nothing to escape: every character `UNSAFE` matches is one that
    # `isprintable` refuses (a control, a separator, a format character, a surrogate), or a
    # backslash. A plan shows thousands of strings, and this test costs less than the search.
    if text.isprintable() and "\\" not in text:
        return text
    return UNSAFE.sub(_escape, text)


def printable_lines(text: str) -> str:
    """Each line of a multi-line message (several problems, one a line) made printable."""
    return "\n".join(printable(line) for line in text.split("\n"))


def printable_data(value: T, lines: frozenset[str] = frozenset()) -> T:
    """`value` (a plan, a report, plain data) with every string in it made printable, for a
    text renderer to format: one call where the renderer starts, not one per field it shows.
    The fields or keys named in `lines` hold several lines by design (an audit's fix commands,
    a step's operations); each of their lines is made printable, the newlines kept."""
    return _walk(value, lines, printable)  # type: ignore[no-any-return]


# What holds no text: most fields of a plan's entries, returned before any other test.
_LEAVES = frozenset({int, bool, float})


def _walk(value: Any, lines: frozenset[str], escape: Callable[[str], str]) -> Any:
    # What holds nothing to escape is returned as it is (a tuple, a frozen plan's dataclass):
    # a plan of a thousand entries is mostly clean text, and copying it all cost a plan's
    # render more than its formatting.
    kind = type(value)
    if kind is str:
        return escape(value)
    if value is None or kind in _LEAVES:
        return value
    if isinstance(value, Enum):  # Phase.RUNTIME is a str too, and stays the member it is
        return value
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, tuple):
        items = [_walk(item, lines, escape) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return type(value)(items)
    if isinstance(value, list):
        return [_walk(item, lines, escape) for item in value]
    if isinstance(value, dict):
        return {
            printable(k) if isinstance(k, str) else k: _walk(
                v, lines, printable_lines if k in lines else escape
            )
            for k, v in value.items()
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _walk_fields(value, lines, escape)
    return value


def _walk_fields(value: Any, lines: frozenset[str], escape: Callable[[str], str]) -> Any:
    """A dataclass with its fields walked: the same one where nothing changed and it is frozen
    (a plan's entries are, and their fields mostly clean strings and enums, tested here without
    a call each: a fleet's JSON plan walks hundreds of in-sync knobs per host)."""
    shape: type = type(value)
    names, frozen = _shape(shape)
    made: dict[str, Any] = {}
    for name in names:
        old = getattr(value, name)
        kind = type(old)
        if old is None or kind in _LEAVES or isinstance(old, Enum):
            continue
        how = printable_lines if name in lines else escape
        new = how(old) if kind is str else _walk(old, lines, how)
        if new is not old:
            made[name] = new
    if frozen and not made:
        return value
    return dataclasses.replace(value, **made)


@functools.cache
def _shape(kind: type) -> tuple[tuple[str, ...], bool]:
    """A dataclass's fields that `replace` takes, and whether it is frozen (one that is not is
    copied, as a list is: whoever renders it may change it)."""
    names = tuple(f.name for f in dataclasses.fields(kind) if f.init)
    return names, bool(cast(Any, kind).__dataclass_params__.frozen)
