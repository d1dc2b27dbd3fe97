"""Terminal colour for every renderer: on only when asked (stdout is a terminal, no NO_COLOR)."""

from __future__ import annotations

from collections.abc import Callable

import click


def styler(color: bool) -> Callable[..., str]:
    """`click.style` when `color`, else the text unchanged."""

    def style(text: str, **kw: object) -> str:
        return click.style(text, **kw) if color else text  # type: ignore[arg-type]

    return style
