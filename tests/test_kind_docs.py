"""The docs of knob kinds cannot drift from the code: the knob table (docs/kinds/index.md) is the
registry's, and the YAML each kind's docstring shows is a valid profile section."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler.core.schema import validate
from reconciler.kinds import REGISTRY
from reconciler.kinds.base import Kind
from reconciler.profile.load import MODEL

KNOBS = Path(__file__).resolve().parent.parent / "docs/kinds/index.md"
TABLE = "# How each knob is read and compared"
ROW = re.compile(r"\| `([a-z_]+)` \| (.*) \| (.*) \|")
# The kinds a profile drives: its sections, and those derived from one (`nvreg` from `modules`),
# which a row names by their kind; tune's boot-time files have no row.
SECTIONS = [kind for kind in REGISTRY if not kind.persistence]


def row_name(kind: Kind[Any]) -> str:
    return kind.section or kind.kind


def knob_table(readme: str) -> list[tuple[str, str, str]]:
    """The rows of the knob table: section, where it reads, how it compares."""
    after = readme.split(TABLE, 1)[1]
    lines = after.strip().splitlines()
    rows = []
    for line in lines[2:]:  # past the header and its rule
        if not line.startswith("|"):
            break
        match = ROW.fullmatch(line)
        assert match is not None, f"a knob table row tune cannot read: {line}"
        rows.append((match[1], match[2], match[3]))
    return rows


def test_the_documented_knob_table_is_the_registry() -> None:
    """Every kind with a profile section, or derived from one, has its row, in registry order,
    worded as the kind words it (`reads`, `compared`); no row names a kind that does not exist."""
    documented = knob_table(KNOBS.read_text())
    declared = [(row_name(kind), kind.reads, kind.compared) for kind in SECTIONS]
    assert all(reads and compared for _, reads, compared in declared)
    assert documented == declared


def test_the_table_reader_sees_a_missing_and_an_extra_row() -> None:
    rows = (
        "| section | read from | compared as |\n|---|---|---|\n| `a` | x | y |\n| `b` | z | w |\n"
    )
    assert knob_table(f"{TABLE}\n\n{rows}\nText.\n") == [("a", "x", "y"), ("b", "z", "w")]


def docstring_yaml(kind: Kind[Any]) -> Any:
    doc = sys.modules[type(kind).__module__].__doc__ or ""
    match = re.search(r"```yaml\n(.*?)```", doc, re.S)
    assert match is not None, f"{kind.section}: its docstring shows no YAML"
    return YAML(typ="safe").load(match[1])


@pytest.mark.parametrize("kind", SECTIONS, ids=row_name)
def test_the_yaml_of_each_kinds_docstring_is_a_valid_section(kind: Kind[Any]) -> None:
    data = docstring_yaml(kind)
    assert list(data) == [kind.section or kind.parent_section]  # nvreg: modules
    profile = validate(MODEL, {"name": "docs", **data})
    assert profile.spec(kind)
