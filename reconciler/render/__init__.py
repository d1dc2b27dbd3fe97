"""Renderers: consumers of the plan's data. None of them decides anything.

Each renderer's module is imported when it is used: a JSON plan need not load the text and
Markdown code (start-up time is most of a `tune plan`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.changes import Plan
from ..core.jsontext import indented


def as_json(plan: Plan, color: bool = False) -> str:
    from .documents import plan_document

    return indented(plan_document(plan)) + "\n"


def as_text(plan: Plan, color: bool = False) -> str:
    from . import text

    return text.render(plan, color)


def as_markdown(plan: Plan, color: bool = False) -> str:
    from . import markdown

    return markdown.render(plan)


RENDERERS: dict[str, Callable[[Plan, bool], str]] = {
    "text": as_text,
    "json": as_json,
    "markdown": as_markdown,
}
