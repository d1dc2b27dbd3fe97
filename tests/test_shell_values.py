"""The sh subset evaluator against /bin/sh itself: generated GRUB default files and drop-ins,
sourced by the real shell the way grub-mkconfig sources them (`set -e`, /etc/default/grub, then
grub.d/*.cfg in order). The evaluator may say Unknown; a value /bin/sh does not give, never."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reconciler.facts.shell_values import Script, Unknown, Value, evaluate

NAMES = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
VARIABLES = (*NAMES, "GRUB_X")
# What grub-mkconfig does (util/grub-mkconfig.in), with the output of the sourced files thrown
# away and the values written to fd 3: "unset", or "set:" and the value, NUL-terminated.
SOURCE = """\
set -e
exec 3>&1 >/dev/null 2>&1
. ./default
for f in ./grub.d/*.cfg; do
  if [ -e "$f" ]; then . "$f"; fi
done
for v in GRUB_CMDLINE_LINUX GRUB_CMDLINE_LINUX_DEFAULT; do
  eval "s=\\${$v+set} x=\\${$v-}"
  if [ "$s" = set ]; then printf 'set:%s\\0' "$x" >&3; else printf 'unset\\0' >&3; fi
done
"""


def sh_values(root: Path, default: str, dropins: list[str]) -> dict[str, str | None] | None:
    """What /bin/sh holds after sourcing the files; None when the shell stopped (an error)."""
    (root / "grub.d").mkdir(parents=True, exist_ok=True)
    (root / "default").write_text(default)
    for index, text in enumerate(dropins):
        (root / "grub.d" / f"{index:02d}-x.cfg").write_text(text)
    done = subprocess.run(
        ["/bin/sh", "-c", SOURCE], cwd=root, capture_output=True, env={}, timeout=10, check=False
    )
    values = done.stdout.decode().split("\0")[:-1]
    if done.returncode != 0 or len(values) != 2:
        return None
    return {
        name: (value[4:] if value.startswith("set:") else None)
        for name, value in zip(NAMES, values, strict=True)
    }


def evaluated(default: str, dropins: list[str]) -> dict[str, Value]:
    scripts = [Script("/etc/default/grub", default)] + [
        Script(f"/etc/default/grub.d/{i:02d}-x.cfg", t) for i, t in enumerate(dropins)
    ]
    found = evaluate(scripts)
    return {name: found.get(name) for name in NAMES}


# --- generated files ---------------------------------------------------------------------------

PARAMETERS = st.sampled_from(
    ["quiet", "a=b", "console=ttyS0", "x.y=1,2", "pci=realloc", "systemd.unit=rescue.target"]
)
ODD = st.sampled_from(["*", "?", "[a]", "~", "$", "\\", "#", "'", '"', "`", "=", "-", "{", "}"])
NAME = st.sampled_from(VARIABLES)
OPERATOR = st.sampled_from(["", ":-", "-", ":+", "+", ":=", "=", ":?", "?", "#", "##", "%", "%%"])
PATTERN = st.sampled_from(
    ["*", "* ", "*=*", "?", "quiet", '"quiet "', "'a=b'", "[a-z]*", "[!q]*", "\\*", "*$N", '"$N"']
)


@st.composite
def expansion(draw: st.DrawFn) -> str:
    name, op = draw(NAME), draw(OPERATOR)
    if not op:
        return draw(st.sampled_from([f"${name}", f"${{{name}}}", f"${{#{name}}}"]))
    if op.startswith(("#", "%")):
        pattern = "".join(draw(st.lists(PATTERN, min_size=1, max_size=2)))
        return f"${{{name}{op}{pattern.replace('N', draw(NAME))}}}"
    word = " ".join(draw(st.lists(PARAMETERS, max_size=2)))
    inner = draw(st.sampled_from(["", f"${name} ", f"${{{name}}} "]))
    return f"${{{name}{op}{inner}{word}}}"


@st.composite
def double_quoted(draw: st.DrawFn) -> str:
    pieces = draw(
        st.lists(
            st.one_of(
                PARAMETERS,
                expansion(),
                st.just(" "),
                st.just(" \\\n"),  # continued on the next line
                st.just("\n"),
                st.just("\\$"),
                st.just('\\"'),
                st.just("\\\\"),
                st.just("$(echo x)"),
                st.just("`echo x`"),
                ODD.filter(lambda c: c not in '"\\`$'),
            ),
            max_size=6,
        )
    )
    return '"' + "".join(pieces) + '"'


@st.composite
def value(draw: st.DrawFn) -> str:
    pieces = draw(
        st.lists(
            st.one_of(
                double_quoted(),
                PARAMETERS.map(lambda p: f"'{p} '"),
                st.just("'a\\\nb'"),
                PARAMETERS,
                expansion(),
                ODD.map(lambda c: "\\" + c),
                st.sampled_from(["*", "?", "~", "x\\\ny", "$1"]),
            ),
            max_size=3,
        )
    )
    return "".join(pieces)


@st.composite
def assignment(draw: st.DrawFn) -> str:
    text = f"{draw(NAME)}={draw(value())}"
    prefix = draw(st.sampled_from(["", "", "export ", "  "]))
    suffix = draw(st.sampled_from(["", " # a comment", ";", f" {draw(NAME)}={draw(value())}"]))
    return prefix + text + suffix


@st.composite
def condition(draw: st.DrawFn) -> str:
    operand = draw(st.sampled_from(['"$N"', '"${N:-}"', "x$N", '"$N"x']))
    operand = operand.replace("N", draw(NAME))
    literal = draw(st.sampled_from(['""', "quiet", '"a=b"', "x", "xquiet"]))
    return draw(
        st.sampled_from(
            [
                f"[ {operand} = {literal} ]",
                f"[ {operand} != {literal} ]",
                f"[ -n {operand} ]",
                f"[ -z {operand} ]",
                f"test {operand} = {literal}",
                f"[ ! -z {operand} ]",
                "[ -e /etc/hostname ]",
                "true",
                ":",
                "false",
            ]
        )
    )


@st.composite
def statement(draw: st.DrawFn, depth: int = 0) -> str:
    simple = st.one_of(
        assignment(),
        st.sampled_from(["# GRUB_CMDLINE_LINUX=x", "", "echo Sourcing", f"unset {draw(NAME)}"]),
        st.just("true"),
    )
    if depth >= 2:
        return draw(simple)
    body = st.lists(statement(depth + 1), min_size=0, max_size=2).map(
        lambda lines: "\n".join(lines) or ":"
    )
    kind = draw(st.sampled_from(["simple", "simple", "if", "and", "case"]))
    if kind == "if":
        otherwise = draw(st.sampled_from(["", "else\n" + draw(body) + "\n"]))
        return f"if {draw(condition())}; then\n{draw(body)}\n{otherwise}fi"
    if kind == "and":
        return f"{draw(condition())} {draw(st.sampled_from(['&&', '||']))} {draw(assignment())}"
    if kind == "case":
        subject = draw(st.sampled_from(['"$N"', "$N", "x${N}"])).replace("N", draw(NAME))
        pattern = draw(st.sampled_from(["*quiet*", "x", '""', "a=b|quiet", "*", "?*", "[q]*"]))
        return f"case {subject} in\n  {pattern}) {draw(body)} ;;\n  *) {draw(body)} ;;\nesac"
    return draw(simple)


FILE = st.lists(statement(), max_size=5).map(lambda lines: "\n".join(lines) + "\n")


@settings(max_examples=300)
@given(default=FILE, dropins=st.lists(FILE, max_size=3))
@example(
    default='GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n',
    dropins=[
        'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT:+$GRUB_CMDLINE_LINUX_DEFAULT }'
        'pcie_aspm=off \\\n  pci=realloc"\n'
    ],
)
# Found by this property (CI, 2026-12-07): `${X:?}` of a variable only a branch set may stop.
@example(
    default='GRUB_CMDLINE_LINUX=\ncase "$GRUB_CMDLINE_LINUX" in\n  [q]*) : ;;\n  *) if [ '
    '"$GRUB_CMDLINE_LINUX" = "" ]; then\nGRUB_CMDLINE_LINUX= GRUB_X=\nfi ;;\nesac\n'
    "GRUB_CMDLINE_LINUX= GRUB_CMDLINE_LINUX=${GRUB_X:?}\n",
    dropins=[],
)
@pytest.mark.slow
def test_the_evaluator_never_gives_a_value_sh_does_not(
    tmp_path_factory: pytest.TempPathFactory, default: str, dropins: list[str]
) -> None:
    root = tmp_path_factory.mktemp("grub")
    truth = sh_values(root, default, dropins)
    ours = evaluated(default, dropins)
    for name in NAMES:
        if isinstance(ours[name], Unknown):
            continue
        assert truth is not None, f"sh stopped, but the evaluator knows {name}={ours[name]!r}"
        assert ours[name] == truth[name], name


# --- behaviour ---------------------------------------------------------------------------------


def values(*texts: str) -> dict[str, Value]:
    return evaluated(texts[0], list(texts[1:]))


def test_continued_lines_and_appending_to_the_default() -> None:
    got = values(
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n',
        'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT intel_iommu=on \\\n'
        'iommu=pt hugepages=16384"\n',
    )
    assert got["GRUB_CMDLINE_LINUX_DEFAULT"] == "quiet intel_iommu=on iommu=pt hugepages=16384"
    assert got["GRUB_CMDLINE_LINUX"] is None


def test_a_question_mark_expansion_of_a_variable_not_known_may_stop_the_shell() -> None:
    """dash exits at `${X:?}` when X is unset or empty: where X is not known, neither is
    anything after it (even a variable that line leaves alone)."""
    got = values(
        "if [ -e /etc/tune-test ]; then GRUB_X=1; fi\n"
        "GRUB_CMDLINE_LINUX=${GRUB_X:?}\nGRUB_CMDLINE_LINUX_DEFAULT=quiet\n"
    )
    assert isinstance(got["GRUB_CMDLINE_LINUX_DEFAULT"], Unknown)
    assert isinstance(got["GRUB_CMDLINE_LINUX"], Unknown)


def test_a_command_substitution_makes_only_its_variable_unknown() -> None:
    got = values(
        "GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`\n"
        'GRUB_CMDLINE_LINUX="$(cat /etc/extra) ro"\nGRUB_CMDLINE_LINUX_DEFAULT=quiet\n'
    )
    linux = got["GRUB_CMDLINE_LINUX"]
    assert isinstance(linux, Unknown)
    assert str(linux) == "/etc/default/grub:2: a command substitution $(...) is not evaluated"
    assert got["GRUB_CMDLINE_LINUX_DEFAULT"] == "quiet"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (". /etc/default/extra\n", "the command '.' is not evaluated"),
        ("source /etc/default/extra\n", "the command 'source' is not evaluated"),
        ("add() { :; }\n", "a function definition is not evaluated"),
        ("for w in a b; do :; done\n", "`for` is not evaluated"),
        ("eval X=1\n", "the command 'eval' is not evaluated"),
        ("cat x > y\n", "the operator '>' is not evaluated"),
    ],
)
def test_a_construct_it_cannot_follow_makes_every_variable_unknown(text: str, why: str) -> None:
    got = values('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n' + text)
    default = got["GRUB_CMDLINE_LINUX_DEFAULT"]
    assert isinstance(default, Unknown) and default.reason == why and default.line == 2


def test_an_undecidable_condition_leaves_known_what_every_branch_agrees_on() -> None:
    got = values(
        "if [ -e /sys/firmware/efi ]; then\n"
        "  GRUB_CMDLINE_LINUX=efi\n  GRUB_CMDLINE_LINUX_DEFAULT=quiet\n"
        "else\n  GRUB_CMDLINE_LINUX_DEFAULT=quiet\nfi\n"
    )
    assert got["GRUB_CMDLINE_LINUX_DEFAULT"] == "quiet"
    linux = got["GRUB_CMDLINE_LINUX"]
    assert isinstance(linux, Unknown) and "[ -e /sys/firmware/efi ]" in linux.reason


def test_case_on_a_known_value() -> None:
    got = values(
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n'
        'case "$GRUB_CMDLINE_LINUX_DEFAULT" in\n'
        "  *splash*) GRUB_CMDLINE_LINUX=vt.handoff=7 ;;\n  *) GRUB_CMDLINE_LINUX= ;;\nesac\n"
    )
    assert got["GRUB_CMDLINE_LINUX"] == "vt.handoff=7"


def test_a_file_sh_cannot_parse_makes_everything_unknown() -> None:
    got = values("GRUB_CMDLINE_LINUX_DEFAULT=quiet\n", 'GRUB_CMDLINE_LINUX="ro\n')
    for name in NAMES:
        found = got[name]
        assert isinstance(found, Unknown)
        assert found.file == "/etc/default/grub.d/00-x.cfg"
        assert "never closed" in found.reason


# --- POSIX parameter expansions (issue 34, item 6): deterministic, so known, as dash gives them

EXPANSIONS = [
    'X="a=1 b=2 c=3"\nGRUB_CMDLINE_LINUX="${X#* }"\n',  # shortest prefix
    'X="a=1 b=2 c=3"\nGRUB_CMDLINE_LINUX="${X##* }"\n',  # longest prefix
    'X="a=1 b=2 c=3"\nGRUB_CMDLINE_LINUX="${X% *}"\n',  # shortest suffix
    'X="a=1 b=2 c=3"\nGRUB_CMDLINE_LINUX="${X%% *}"\n',  # longest suffix
    'X="quiet splash"\nGRUB_CMDLINE_LINUX="${X%splash}"\n',
    'X="quiet splash"\nGRUB_CMDLINE_LINUX="${X#"quiet "}"\n',  # a quoted pattern
    "X='a*b'\nGRUB_CMDLINE_LINUX=\"${X#a\\*}\"\n",  # an escaped * is literal
    'X="ab1cd"\nGRUB_CMDLINE_LINUX="${X#[a-b]}" GRUB_CMDLINE_LINUX_DEFAULT="${X%[!x]}"\n',
    'X="a?b"\nGRUB_CMDLINE_LINUX="${X#?}"\n',
    'P=quiet\nX="quiet splash"\nGRUB_CMDLINE_LINUX="${X#$P}"\n',  # a pattern from a variable
    'P="*"\nX="quiet splash"\nGRUB_CMDLINE_LINUX="${X#"$P"}${X%$P}"\n',
    'GRUB_CMDLINE_LINUX="${X#a}"\n',  # unset: empty
    'X=abc\nGRUB_CMDLINE_LINUX="${#X} ${#Y}"\n',  # the length
    'GRUB_CMDLINE_LINUX="${X:=quiet}"\nGRUB_CMDLINE_LINUX_DEFAULT="$X"\n',
    'X=\nGRUB_CMDLINE_LINUX="${X=quiet}"\nGRUB_CMDLINE_LINUX_DEFAULT="${X:=splash} $X"\n',
    ": ${GRUB_CMDLINE_LINUX:=quiet}\n",  # the idiom of a default
    ': "${GRUB_CMDLINE_LINUX_DEFAULT=quiet splash}"\n',
    'X=1\nGRUB_CMDLINE_LINUX="${X:?unset} ${X?unset}"\n',
    'GRUB_CMDLINE_LINUX="${X:-"a b"} ${X:-a\\ b} ${X-\'c\'}"\n',
    "GRUB_CMDLINE_LINUX=${X:-'a b'}\n",
    'X=1\nGRUB_CMDLINE_LINUX="${X:+"$X  x"}"\n',
    'X="a=1 a=2"\nGRUB_CMDLINE_LINUX="${X%${X#* }} b"\n',  # nested
    'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n'
    'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT%splash}nosplash"\n',
]


@pytest.mark.parametrize("text", EXPANSIONS)
def test_posix_parameter_expansions_are_evaluated_as_dash_evaluates_them(
    tmp_path: Path, text: str
) -> None:
    truth = sh_values(tmp_path, text, [])
    assert truth is not None, "dash refuses the file"
    ours = evaluated(text, [])
    assert ours == truth


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('GRUB_CMDLINE_LINUX="${X:?is not set}"\n', "${X:?...} finds X unset or empty"),
        ('X=\nGRUB_CMDLINE_LINUX="${X?}"\n', None),  # set, though empty: no error
        ('GRUB_CMDLINE_LINUX="${X?}"\n', "${X?...} finds X unset"),
    ],
)
def test_an_expansion_that_stops_dash_stops_the_evaluation(
    tmp_path: Path, text: str, why: str | None
) -> None:
    truth = sh_values(tmp_path, text, [])
    ours = evaluated(text, [])["GRUB_CMDLINE_LINUX"]
    if why is None:
        assert truth is not None and ours == truth["GRUB_CMDLINE_LINUX"] == ""
        return
    assert truth is None  # dash stops: grub-mkconfig writes no menu
    assert isinstance(ours, Unknown) and why in ours.reason and ours.line == 1


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('GRUB_CMDLINE_LINUX="$(echo quiet)"\n', "a command substitution $(...)"),
        ("GRUB_CMDLINE_LINUX=`echo quiet`\n", "a command substitution (`...`)"),
        ('GRUB_CMDLINE_LINUX="${X:-$(echo quiet)}"\n', "a command substitution $(...)"),
        ('GRUB_CMDLINE_LINUX=quiet\nGRUB_CMDLINE_LINUX+=" splash"\n', "dash"),
        ("GRUB_CMDLINE_LINUX=(quiet splash)\n", "dash"),
        ('GRUB_CMDLINE_LINUX=quiet\n[[ -n "$X" ]] && GRUB_CMDLINE_LINUX=\n', "dash"),
    ],
)
def test_what_needs_a_program_or_what_dash_rejects_stays_unknown_with_its_line(
    tmp_path: Path, text: str, why: str
) -> None:
    ours = evaluated(text, [])["GRUB_CMDLINE_LINUX"]
    assert isinstance(ours, Unknown), ours
    assert why in ours.reason
    assert ours.line == text.count("\n")


def test_arithmetic_that_assigns_nothing_leaves_the_other_variables_known(tmp_path: Path) -> None:
    text = "GRUB_CMDLINE_LINUX=quiet\nGRUB_TIMEOUT=$((5+1))\n"
    assert evaluated(text, [])["GRUB_CMDLINE_LINUX"] == "quiet"
    assigning = "GRUB_CMDLINE_LINUX=quiet\nGRUB_TIMEOUT=$((X=5))\n"
    assert isinstance(evaluated(assigning, [])["GRUB_CMDLINE_LINUX"], Unknown)


def test_a_bash_only_expansion_stops_as_dash_stops(tmp_path: Path) -> None:
    text = 'X=a\nGRUB_CMDLINE_LINUX="${X/a/b}"\nGRUB_CMDLINE_LINUX_DEFAULT=quiet\n'
    assert sh_values(tmp_path, text, []) is None  # "Bad substitution"
    got = evaluated(text, [])["GRUB_CMDLINE_LINUX_DEFAULT"]
    assert isinstance(got, Unknown) and "Bad substitution" in got.reason and got.line == 2
