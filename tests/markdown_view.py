"""Markdown as a reader sees it once rendered: parsed by a CommonMark parser with GitHub's
tables and strikethrough, so a test asserts on links, images and cells, not on the source."""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.token import Token

PARSER = MarkdownIt("commonmark").enable(["table", "strikethrough"])
# What host text must never become: a link or an image (a tracking pixel loads when the report
# is viewed), raw HTML, struck-out text.
ACTING = {"link_open", "image", "html_inline", "html_block", "s_open"}


def tokens(markdown: str) -> list[Token]:
    """Every token, block and inline."""
    out: list[Token] = []
    for token in PARSER.parse(markdown):
        out.append(token)
        out += token.children or []
    return out


def acting(markdown: str) -> list[str]:
    """The links, images and HTML in `markdown`, as `type: what it points at`."""
    return [
        f"{t.type}: {t.attrGet('href') or t.attrGet('src') or t.content}"
        for t in tokens(markdown)
        if t.type in ACTING
    ]


def codes(markdown: str) -> list[str]:
    """The contents of its code spans, as they render."""
    return [t.content for t in tokens(markdown) if t.type == "code_inline"]


def shown(markdown: str) -> str:
    """The text of each inline (a paragraph, a heading, a table cell), one a line, as it
    renders: escapes resolved, code spans by their content."""
    lines = []
    for token in PARSER.parse(markdown):
        if token.type == "inline":
            lines.append("".join(c.content for c in token.children or []))
    return "\n".join(lines)


def cells(markdown: str, label: str) -> list[str]:
    """The cells of the table row whose first cell renders as `label`."""
    rows: list[list[str]] = []
    row: list[str] | None = None
    for token in PARSER.parse(markdown):
        if token.type == "tr_open":
            row = []
        elif token.type == "tr_close" and row is not None:
            rows.append(row)
            row = None
        elif token.type == "inline" and row is not None:
            row.append("".join(c.content for c in token.children or []))
    return next(row for row in rows if row and row[0] == label)
