"""Host text in Markdown renders as the host has it: escaped among tune's words, exact in a code
span; tune's own Markdown reads as before."""

from __future__ import annotations

from conftest import BLACKWELL, UNTUNED, run_tune
from hypothesis import given
from hypothesis import strategies as st
from markdown_view import PARSER, acting, cells, codes, shown

from reconciler.render import md

# What `printable` leaves: no controls, no newlines; ASCII punctuation most of all.
HOST_TEXT = st.text(
    st.one_of(
        st.sampled_from("\\`*_[]()<>!|#~&$:;-+=. "),
        st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")),
    ),
    min_size=1,
)


def inline(markdown: str) -> list[tuple[str, str]]:
    (token,) = (t for t in PARSER.parse(markdown) if t.type == "inline")
    return [(c.type, c.content) for c in token.children or []]


@given(HOST_TEXT)
def test_escaped_text_renders_as_itself(value: str) -> None:
    rendered = f"x {md.text(value)} y"
    assert shown(rendered) == f"x {value} y".strip(), rendered
    assert acting(rendered) == []


@given(HOST_TEXT)
def test_a_code_span_holds_the_value_exactly(value: str) -> None:
    assert inline(f"x {md.code(value)} y") == [
        ("text", "x "),
        ("code_inline", value),
        ("text", " y"),
    ]


@given(HOST_TEXT)
def test_a_table_cell_holds_the_value_exactly(value: str) -> None:
    """GitHub splits a row at a `|`, even one inside a code span, unless it is escaped. (A
    cell drops the whitespace around its text; a code span keeps them.)"""
    table = f"| | | |\n|---|---|---|\n| row | {md.code(value, cell=True)} | {md.text(value)} |\n"
    assert cells(table, "row") == ["row", value, value.strip()], table


def test_a_value_with_backticks_gets_a_longer_fence() -> None:
    assert md.code("always [madvise] never") == "`always [madvise] never`"
    assert md.code("a `b` c") == "``a `b` c``"
    assert md.code("a ``b` c`") == "``` a ``b` c` ```"
    assert md.code(" padded ") == "`  padded  `"
    assert md.fence(["echo ```"], "sh") == ["````sh", "echo ```", "````"]


def test_tunes_own_words_and_common_values_read_as_before() -> None:
    """Kernel choice files show in their code spans as the kernel writes them, with no
    backslashes; sysctl names keep their underscores."""
    plan = run_tune("plan", BLACKWELL, "--root", UNTUNED, "--format", "markdown").out
    assert "#### sysfs /sys/kernel/mm/transparent_hugepage/enabled: `always` -> `madvise`" in plan
    assert "#### sysctl kernel.numa_balancing: `1` -> `0`" in plan
    audit = run_tune("audit", "--root", UNTUNED, "--format", "markdown").out
    assert "- `/sys/kernel/mm/transparent_hugepage/enabled: [always] madvise never`" in audit
    assert "/sys/kernel/mm/transparent_hugepage/enabled: [always] madvise never" in codes(audit)
    assert "| Host | gpu-node-07 |" in audit
    for out in (plan, audit):
        assert acting(out) == []
