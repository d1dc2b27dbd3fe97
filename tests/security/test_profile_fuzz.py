"""Hostile profiles, generated: whatever YAML a profile holds, tune answers with a sentence and
an exit code (65 with FILE:LINE:COL for a bad profile), never "internal error" (70), never
a traceback and never a wait past a deadline.

The profiles are built from the profile's own keys and from the odd corners of YAML (tags,
anchors, merge keys, duplicate and non-string keys, NUL, BOM, CRLF, bytes that are not UTF-8,
`extends` to odd places), with plausible values at the leaves often enough that some are
valid and get planned. CI runs 10,000 distinct profiles, each made from a fixed seed with
Python's random generator (the grammar's choices cost microseconds, where hypothesis's draws
cost ~10 ms an example): the same profiles every run, a failure naming its profile.
`TUNE_FUZZ_EXAMPLES=N` also runs N fresh ones from the same grammar drawn by hypothesis, which
shrinks what fails (a longer hunt, by hand)."""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
from conftest import deadline, run_tune
from hypothesis import given, settings
from hypothesis import strategies as st
from small_host import SmallHost, build

from reconciler.profile.load import _known_keys, schema

HUNT = int(os.environ.get("TUNE_FUZZ_EXAMPLES", "0"))
EXAMPLES = 10_000
SECONDS = 10  # what one command may take
T = TypeVar("T")

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


class Choices(Protocol):
    """Where the grammar's choices come from: hypothesis (`Drawn`: shrinkable, for a hunt) or a
    seeded random generator (`Seeded`: microseconds an example, for the CI's ten thousand)."""

    def pick(self, options: Sequence[T]) -> T: ...
    def integer(self, low: int, high: int) -> int: ...
    def int_text(self) -> str: ...
    def float_text(self) -> str: ...
    def text(self) -> str: ...


# Characters a profile's strings are made of: plain, controls, bidi, non-Latin, a surrogate.
CHARACTERS = "ab1 _-.:/[]{}#&*!|>'\"%@`,?\0\x1b\t\r\n\u202e\u00e9\u65e5\U0001f600\ud800"
INTEGERS = [0, 1, -1, 7, 60, 255, 4096, 2**31, 2**32, 2**63, 2**64, -(2**63), 10**30]
FLOATS = [0.0, -0.0, 0.5, 1e-7, 1e308, 5e-324, float("inf"), -float("inf"), float("nan")]


def _float_text(value: float) -> str:
    return json.dumps(value, allow_nan=True).replace("NaN", ".nan").replace("Infinity", ".inf")


class Seeded:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def int_text(self) -> str:
        if self.rng.random() < 0.5:
            return str(self.pick(INTEGERS) + self.rng.randint(-1, 1))
        return str(
            self.rng.randint(-(10 ** self.rng.randint(0, 40)), 10 ** self.rng.randint(0, 40))
        )

    def float_text(self) -> str:
        if self.rng.random() < 0.5:
            return _float_text(self.pick(FLOATS))
        return _float_text(self.rng.uniform(-1, 1) * 10 ** self.rng.randint(-30, 30))

    def text(self) -> str:
        return "".join(self.pick(CHARACTERS) for _ in range(self.rng.randint(0, 12)))


class Drawn:
    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw

    def pick(self, options: Sequence[T]) -> T:
        return self.draw(st.sampled_from(options))

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))

    def int_text(self) -> str:
        return str(self.draw(st.integers()))

    def float_text(self) -> str:
        return _float_text(self.draw(st.floats()))

    def text(self) -> str:
        return self.draw(
            st.text(st.characters(codec="utf-8") | st.sampled_from(CHARACTERS), max_size=12)
        )


def scalar(c: Choices) -> str:
    """A YAML scalar as text: the types YAML can name, and the ones it should not."""
    how = c.integer(0, 5)
    if how == 0:
        return c.int_text()
    if how == 1:
        return c.float_text()
    if how == 2:
        return json.dumps(c.text())  # double-quoted, escapes and all
    if how == 3:
        return json.dumps(c.text())[1:-1]  # the same characters, plain
    return c.pick(ODD_SCALARS)


KEY_TEXTS = ["1", "true", "~", "1.5", "[a, b]", "{a: 1}", "<<", '"\\0"', "? x", "! k", "&k x", "*k"]


def key(c: Choices) -> str:
    return c.pick(KEYS) if c.integer(0, 1) else c.pick(KEY_TEXTS)


def node(c: Choices, depth: int) -> str:
    """A YAML flow node as text, nested at most `depth` deep."""
    how = 0 if depth == 0 else c.integer(0, 19)
    if how == 0:
        return scalar(c)
    inner = depth - 1
    if how == 1:
        items = [f"{key(c)}: {node(c, inner)}" for _ in range(c.integer(0, 4))]
        return "{" + ", ".join(items) + "}"
    if how == 2:
        return "[" + ", ".join(node(c, inner) for _ in range(c.integer(0, 4))) + "]"
    if how == 3:
        return f"&{c.pick(['a', 'b'])} {node(c, inner)}"
    if how == 4:
        return (
            "{<<: "
            + c.pick(["*a", "*b", "{x: 1}", "{x: 1}", "{}", "[*a, *b]"])
            + ", k: "
            + node(c, inner)
            + "}"
        )
    if how == 5:
        return "*a"
    return node(c, 0 if how < 12 else inner)


SCHEMA = schema()
PATTERN_KEYS = ["vm.swappiness", "/sys/kernel/mm/x", "nvidia", "iommu", "0000:01:00.0", "a.b"]
# Values a profile's fields take, for the leaves of a shaped node to be valid now and then and
# reach the kinds' own validators and the plan.
PLAUSIBLE = [
    "10",
    "0",
    "1",
    "4096",
    "true",
    "false",
    "performance",
    "madvise",
    "none",
    "unlimited",
    '"101"',
    "local",
    "0-7",
    "P1",
    "active",
    "infinity",
    "enabled",
    "masked",
    "no",
    "loaded",
    "0x10de",
    "C2",
    '">=6.14"',
    "passthrough",
    "2048kB",
    "600",
    "DEFAULT",
    "udev",
    "8",
]


def shaped(c: Choices, spec: dict[str, Any], depth: int = 0) -> str:
    """A YAML flow node with the shape the profile's JSON schema describes at `spec`, odd or
    plausible scalars at its leaves, and now and then any node at all."""
    if "$ref" in spec:
        spec = SCHEMA["$defs"][spec["$ref"].rsplit("/", 1)[1]]
    if depth > 4 or c.integer(0, 19) == 0:
        return node(c, 1)
    if "anyOf" in spec:
        return shaped(c, c.pick(spec["anyOf"]), depth + 1)
    if "enum" in spec:
        return json.dumps(c.pick(spec["enum"]))
    kind = spec.get("type")
    if kind == "object":
        fields = list(spec.get("properties", {}).items())
        fields += [(k, v) for v in spec.get("patternProperties", {}).values() for k in PATTERN_KEYS]
        if isinstance(spec.get("additionalProperties"), dict):
            fields += [(k, spec["additionalProperties"]) for k in PATTERN_KEYS]
        chosen = [c.pick(fields) for _ in range(c.integer(0, 4))] if fields else []
        return "{" + ", ".join(f"{k}: {shaped(c, v, depth + 1)}" for k, v in chosen) + "}"
    if kind == "array":
        items = [shaped(c, spec.get("items", {}), depth + 1) for _ in range(c.integer(0, 3))]
        return "[" + ", ".join(items) + "]"
    return c.pick(PLAUSIBLE) if c.integer(0, 3) else scalar(c)


MANGLES = ["bom", "crlf", "tab", "nul", "latin1", "lead", "doc"]


def profile_bytes(c: Choices) -> bytes:
    """A profile's bytes: a mapping of sections (mostly), in block style, then mangled."""
    lines = []
    if c.integer(0, 7):
        name = c.pick(["x;y", "", "1", "a b"]) if c.integer(0, 7) == 0 else "fuzz"
        lines.append(f"name: {name if c.integer(0, 7) else scalar(c)}")
    if c.integer(0, 3) == 0:
        lines.append(f"extends: {json.dumps(c.pick(EXTENDS))}")
    for _ in range(c.integer(0, 5)):
        if c.integer(0, 3):
            section = c.pick(SECTIONS)
            value = shaped(c, SCHEMA["properties"][section])
        else:
            section, value = c.pick(SECTIONS) if c.integer(0, 1) else key(c), node(c, 3)
        lines.append(f"{section}: {value}")
    text = "\n".join(lines) + c.pick(["\n", "", "\n\n", "\n..."])
    mangle = c.pick(MANGLES) if c.integer(0, 3) == 0 else "none"
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


def answers_in_a_sentence(host: Path, data: bytes) -> None:
    """`tune validate` of the profile `data`, then `tune plan` of it where it is valid (the
    plan loads it as validate does): no internal error, no traceback, no wait, and a bad
    profile's every line placed at FILE:LINE:COL."""
    folder = host.parent
    (folder / "parent.yaml").write_bytes(PARENT)
    (folder / "dir").mkdir(exist_ok=True)
    path = folder / "p.yaml"
    path.write_bytes(data)
    for args in (("validate", path), ("plan", path, "--root", host, "-o", folder / "plan.json")):
        started = time.monotonic()
        with deadline(30):
            result = run_tune(*args)
        assert time.monotonic() - started < SECONDS, (args[0], data)
        assert result.code != 70, (args[0], data, result.err)
        assert "Traceback" not in result.out + result.err
        if result.code == 65:
            for line in result.err.splitlines():
                assert PLACE.match(line), result.err
        if result.code != 0:
            return


@pytest.mark.slow
def test_no_profile_makes_tune_fail_internally(host: Path) -> None:
    """EXAMPLES distinct profiles, each from its own seed (the same ones every run): a
    failure names the seed and shows the profile."""
    seen: set[bytes] = set()
    for seed in range(EXAMPLES * 2):
        data = profile_bytes(Seeded(random.Random(f"tune-profile-fuzz-{seed}")))
        if data in seen:
            continue
        seen.add(data)
        answers_in_a_sentence(host, data)
        if len(seen) == EXAMPLES:
            break
    assert len(seen) == EXAMPLES


@pytest.mark.skipif(not HUNT, reason="a hunt by hand: TUNE_FUZZ_EXAMPLES=N")
@settings(max_examples=HUNT or 1, deadline=None, database=None)
@given(st.composite(lambda draw: profile_bytes(Drawn(draw)))())
def test_no_profile_found_by_a_hunt_makes_tune_fail_internally(host: Path, data: bytes) -> None:
    """TUNE_FUZZ_EXAMPLES=N fresh profiles from the same grammar, drawn by hypothesis, which
    shrinks a failing one to its smallest."""
    answers_in_a_sentence(host, data)
