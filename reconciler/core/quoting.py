"""Text as sh words: how every value tune puts into a script is quoted, and how a path pattern
becomes a word the target's shell expands. Plain functions of text, shared by the host that reads
over sh, the executor that writes over sh and the parsers that render a shell assignment."""

from __future__ import annotations

import re
from typing import NamedTuple

from .errors import HostError
from .paths import bracket_end, checked

# What a bracket expression in a read pattern may hold to be sent bare to the target's shell.
_BRACKET_BODY = re.compile(r"!?\]?[A-Za-z0-9_.:*?\[-]*")


def quote_pattern(pattern: str) -> str:
    """A glob pattern as an sh word: literal text single-quoted, `*`, `?` and bracket
    expressions left bare so the shell expands them, relative to `$TUNE_ROOT`."""
    if not pattern.startswith("/"):
        raise HostError(f"{pattern!r}: only absolute paths can be read from a host.")
    checked(pattern)
    words = ["."]
    literal: list[str] = []

    def flush() -> None:
        if literal:
            words.append(quoted("".join(literal)))
            literal.clear()

    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c in "*?":
            flush()
            words.append(c)
        elif c == "[" and (end := bracket_end(pattern, i)) is not None:
            body = pattern[i + 1 : end]
            if not _BRACKET_BODY.fullmatch(body):
                raise HostError(f"{pattern!r}: the bracket expression cannot be sent to a shell.")
            flush()
            words.append(pattern[i : end + 1])
            i = end
        else:
            literal.append(c)
        i += 1
    flush()
    return "".join(words)


def quoted(text: str) -> str:
    """One literal sh word, always quoted, even when shlex would leave the text bare: every
    value tune puts in a script reads the same way."""
    return "'" + text.replace("'", "'\\''") + "'"


class Expand(NamedTuple):
    """sh text that the target expands where it stands in an `sh_word` (`$(shown_3)`, `${ERR%.}`):
    written by tune, never taken from a profile or a host."""

    text: str


def sh_word(*parts: str | Expand) -> str:
    """One sh word of literal text and expansions: the text single-quoted as `quoted` does,
    each expansion in double quotes, so that no text a profile or a host gave (a file name
    with `$(...)`, a backquote, a quote or a newline in it) is ever parsed by the shell."""
    return "".join(f'"{p.text}"' if isinstance(p, Expand) else quoted(p) for p in parts) or "''"


_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 ._,:;=/+-@#()")


def printf_format(data: bytes) -> str:
    """`data` as a single-quoted printf format that prints exactly these bytes (octal escapes
    for everything but plain characters: binary, %, backslash and quotes survive)."""
    # A leading `-` would be read as an option by some printf implementations (dash's).
    chars = [
        chr(b) if b in _SAFE and not (i == 0 and b == 0x2D) else f"\\{b:03o}"
        for i, b in enumerate(data)
    ]
    return "'" + "".join(chars) + "'"
