"""Renderers: consumers of the plan's data. None of them decides anything."""

from __future__ import annotations

import json
from collections.abc import Callable

from ..model import Plan
from . import markdown, text


def as_json(plan: Plan, color: bool = False) -> str:
    return json.dumps(plan.to_json(), indent=2) + "\n"


RENDERERS: dict[str, Callable[[Plan, bool], str]] = {
    "text": text.render,
    "json": as_json,
    "markdown": lambda plan, color=False: markdown.render(plan),
}
