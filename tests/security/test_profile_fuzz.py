"""Hostile profiles, generated: whatever YAML a profile holds, tune answers with a sentence and
an exit code (65 with FILE:LINE:COL for a bad profile), never "internal error" (70), never
a traceback and never a wait past a deadline.

The profiles are built from the profile's own keys and from the odd corners of YAML (tags,
anchors, merge keys, duplicate and non-string keys, NUL, BOM, CRLF, bytes that are not UTF-8,
`extends` to odd places). The budget is fixed and derandomized so CI sees the same profiles
every run; `TUNE_FUZZ_EXAMPLES=N` runs N fresh ones instead (a longer hunt, by hand)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import deadline, run_tune
from hypothesis import given, settings
from hypothesis import strategies as st
from small_host import SmallHost, build

from reconciler.profile.load import _known_keys, schema

HUNT = int(os.environ.get("TUNE_FUZZ_EXAMPLES", "0"))
BUDGET = settings(max_examples=HUNT or 300, deadline=None, derandomize=not HUNT)

SECTIONS = ["sysctl", "sysfs", "cpu", "modules", "pci", "cmdline", "lxc", "checks", "probes"]
KEYS = [*_known_keys(), "vm.swappiness", "/sys/kernel/mm/transparent_hugepage/enabled", "nvme"]

# Scalars as YAML text: the types YAML can name, and the ones it should not.
ODD_SCALARS = [
    "~",
    "null",
    "true",
    "no",
    "on",
    "yes",
    ".nan",
    ".inf",
    "-.inf",
    "0x1F",
    "0o17",
    "017",
    "1_000",
    "1e400",
    "-0",
    "+12",
    "2001-12-14",
    "2001-12-14t21:59:43.10-05:00",
    "12:30:45",
    "!!binary aGVsbG8=",
    "!!python/object:os.system {}",
    "!!python/name:os.system ''",
    "!!set {a, b}",
    "!!omap [a: 1]",
    "!!pairs [a: 1]",
    "!!timestamp 2001-12-14",
    "!!str 1",
    "!!int '12'",
    "!!float '1.5'",
    "!!bool 'yes'",
    "!!null ''",
    "!custom x",
    "!<tag:yaml.org,2002:str> x",
    '"\\0"',
    '"\\u202e"',
    '"\\x1b[2J"',
    '"a\\nb"',
    "''",
    '""',
    "9" * 400,
    "-" + "9" * 40,
    "1.5",
    "0.0000001",
    "P0",
    "performance",
    "madvise",
    "unlimited",
    '"101"',
    "/etc/pve/lxc/101.conf",
    "/sys/kernel/mm",
    "é",
    "日本",
    "'" + "x" * 3000 + "'",
    "*undefined",
    "{}",
    "[]",
    "[[[[[[[]]]]]]]",
    "- a",
]
EXTENDS = [
    "",
    ".",
    "..",
    "/",
    "/nonexistent.yaml",
    "p.yaml",
    "parent.yaml",
    "./parent.yaml",
    "../",
    "/etc/hostname",
    "/proc/self/cmdline",
    "dir/",
    "%s",
    "~",
    "parent.yaml\0",
]

scalars = (
    st.sampled_from(ODD_SCALARS)
    | st.integers().map(str)
    | st.floats().map(lambda f: json.dumps(f, allow_nan=True).replace("NaN", ".nan"))
    | st.text(max_size=12).map(json.dumps)
    | st.text(st.characters(codec="utf-8"), max_size=12).map(lambda s: json.dumps(s)[1:-1])
)
keys = st.sampled_from(KEYS) | st.sampled_from(
    ["1", "true", "~", "1.5", "[a, b]", "{a: 1}", "<<", '"\\0"', "? x", "! k", "&k x", "*k"]
)


def nodes(depth: int) -> st.SearchStrategy[str]:
    """A YAML flow node as text, nested at most `depth` deep."""
    if depth == 0:
        return scalars
    inner = nodes(depth - 1)
    mapping = st.lists(st.tuples(keys, inner), max_size=4).map(
        lambda items: "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    )
    sequence = st.lists(inner, max_size=4).map(lambda items: "[" + ", ".join(items) + "]")
    anchored = st.tuples(st.sampled_from(["a", "b"]), inner).map(lambda t: f"&{t[0]} {t[1]}")
    merged = st.tuples(inner, st.sampled_from(["*a", "*b", "{x: 1}", "[*a, *b]"])).map(
        lambda t: "{<<: " + t[1] + ", k: " + t[0] + "}"
    )
    return inner | mapping | sequence | anchored | merged | st.just("*a")


SCHEMA = schema()
PATTERN_KEYS = ["vm.swappiness", "/sys/kernel/mm/x", "nvidia", "iommu", "0000:01:00.0", "a.b"]


@st.composite
def shaped(draw: st.DrawFn, node: dict[str, Any], depth: int = 0) -> str:
    """A YAML flow node with the shape the profile's JSON schema describes at `node`, odd
    scalars at its leaves, and now and then any node at all: the kinds' own validators run."""
    if "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
    if depth > 4 or draw(st.integers(0, 9)) == 0:
        return draw(nodes(1))
    if "anyOf" in node:
        return draw(shaped(draw(st.sampled_from(node["anyOf"])), depth + 1))
    if "enum" in node:
        return json.dumps(draw(st.sampled_from(node["enum"])))
    kind = node.get("type")
    if kind == "object":
        fields = list(node.get("properties", {}).items())
        fields += [
            (k, v) for _, v in node.get("patternProperties", {}).items() for k in PATTERN_KEYS
        ]
        if "additionalProperties" in node and isinstance(node["additionalProperties"], dict):
            fields += [(k, node["additionalProperties"]) for k in PATTERN_KEYS]
        chosen = draw(st.lists(st.sampled_from(fields), max_size=4)) if fields else []
        return "{" + ", ".join(f"{k}: {draw(shaped(v, depth + 1))}" for k, v in chosen) + "}"
    if kind == "array":
        items = draw(st.lists(st.just(node.get("items", {})), max_size=3))
        return "[" + ", ".join(draw(shaped(i, depth + 1)) for i in items) + "]"
    return draw(scalars)


@st.composite
def profiles(draw: st.DrawFn) -> bytes:
    """A profile's bytes: a mapping of sections (mostly), in block style, then mangled."""
    lines = []
    if draw(st.booleans()):
        lines.append(f"name: {draw(st.sampled_from(['fuzz', 'x;y', '', '1', 'a b']) | scalars)}")
    if draw(st.booleans()):
        lines.append(f"extends: {json.dumps(draw(st.sampled_from(EXTENDS)))}")
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            section = draw(st.sampled_from(SECTIONS))
            value = draw(shaped(SCHEMA["properties"][section]))
        else:
            section, value = draw(st.sampled_from(SECTIONS) | keys), draw(nodes(3))
        lines.append(f"{section}: {value}")
    text = "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n", "\n..."]))
    mangle = draw(st.sampled_from(["none", "bom", "crlf", "tab", "nul", "latin1", "lead", "doc"]))
    data = text.encode("utf-8", "surrogatepass")
    if mangle == "bom":
        data = b"\xef\xbb\xbf" + data
    elif mangle == "crlf":
        data = data.replace(b"\n", b"\r\n")
    elif mangle == "tab":
        data = data.replace(b": ", b":\t", 1)
    elif mangle == "nul":
        data = data + b"\0"
    elif mangle == "latin1":
        data = data.replace(b"x", b"\xe9", 1) + b"\xff"
    elif mangle == "lead":
        data = b"  " + data
    elif mangle == "doc":
        data = b"---\n" + data + b"\n---\nname: second\n"
    return data


PARENT = b"name: parent\nsysctl:\n  vm.swappiness: 10\n"
PLACE = re.compile(r".+:\d+:\d+: \S")


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("fuzz") / "host", SmallHost({"vm.swappiness": "60"}))


@BUDGET
@given(profiles())
def test_no_profile_makes_tune_fail_internally(host: Path, data: bytes) -> None:
    folder = host.parent
    (folder / "parent.yaml").write_bytes(PARENT)
    (folder / "dir").mkdir(exist_ok=True)
    path = folder / "p.yaml"
    path.write_bytes(data)
    for args in (("validate", path), ("plan", path, "--root", host, "-o", folder / "plan.json")):
        with deadline(30):
            result = run_tune(*args)
        assert result.code != 70, result.err
        assert "Traceback" not in result.out + result.err
        if result.code == 65:
            for line in result.err.splitlines():
                assert PLACE.match(line), result.err
