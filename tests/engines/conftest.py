"""`engine`: each scenario of this folder runs once per apply engine, and the second run's
teardown compares what it left behind with the first's (`drive.left_behind`): the engines
are one specification, so files and journals must be the same, not merely both plausible."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .drive import ENGINES, Engine, LeftBehind, differences, left_behind

_SEEN: dict[tuple[Any, ...], tuple[str, LeftBehind]] = {}


def _scenario(request: pytest.FixtureRequest) -> tuple[Any, ...]:
    """The test and its parameters but the engine: what both engines' runs share."""
    callspec = getattr(request.node, "callspec", None)
    params = {} if callspec is None else dict(callspec.params)
    params.pop("engine", None)
    return (request.node.module.__name__, request.node.originalname, repr(sorted(params.items())))


@pytest.fixture(params=sorted(ENGINES), ids=sorted(ENGINES))
def engine(request: pytest.FixtureRequest, scratch: Path) -> Iterator[Engine]:
    chosen = ENGINES[request.param]()
    yield chosen
    if not chosen.roots:
        return
    now = left_behind(chosen)
    key = _scenario(request)
    if key not in _SEEN:
        _SEEN[key] = (chosen.name, now)
        return
    other, then = _SEEN.pop(key)
    assert differences(now, then) == [], f"{chosen.name} left otherwise than {other}"
