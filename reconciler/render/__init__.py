"""Renderers: consumers of the plan's data. None of them decides anything."""

from __future__ import annotations

import json
from collections.abc import Callable

from ..model import Plan
from . import markdown, text


def as_json(plan: Plan, color: bool = False) -> str:
    return json.dumps(plan.to_json(), indent=2) + "\n"


def as_markdown(plan: Plan, color: bool = False) -> str:
    return markdown.render(plan)


RENDERERS: dict[str, Callable[[Plan, bool], str]] = {
    "text": text.render,
    "json": as_json,
    "markdown": as_markdown,
}
