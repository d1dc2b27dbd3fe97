"""`core.jsontext.indented` is `json.dumps(value, indent=2)`, byte for byte, on any value the
standard library encodes: JSON data of every shape, and the values it leaves to `json` (a str
enum, a float that is not finite, a key that is not a string, a dict subclass)."""

from __future__ import annotations

import enum
import json
import math
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.core.jsontext import indented


class Colour(enum.StrEnum):
    RED = "red"


SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.just(Colour.RED)
KEYS = st.text() | st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(st.text(), inner, max_size=4)
        | st.dictionaries(KEYS, inner, max_size=3)
    ),
    max_leaves=30,
)


@given(VALUES)
def test_the_text_is_the_standard_librarys(value: Any) -> None:
    assert indented(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, -0.0, True, None, "é\n\x1b\u202e"], "b": {}, "c": [], "d": ()},
        {"nan": math.nan, "inf": [math.inf]},
        OrderedDict(b=1, a=[OrderedDict(x=2)]),
        {1: "one", None: [Colour.RED]},
        [[[[]]], [{}], {"": ""}],
    ],
)
def test_edges(value: Any) -> None:
    assert indented(value) == json.dumps(value, indent=2)


def test_what_json_refuses_is_refused_alike() -> None:
    with pytest.raises(TypeError):
        json.dumps({"x": {1, 2}}, indent=2)
    with pytest.raises(TypeError):
        indented({"x": {1, 2}})
