"""Parsers and normalisers under hypothesis: PCI capability chains, multi-value sysctls, the
GRUB shell-assignment evaluator against the real /bin/sh, the kernel command line."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from reconciler.facts import cmdline, pcie
from reconciler.facts.shell_values import Script, Unknown, evaluate
from reconciler.kinds.base import normalize_words

# ---------------------------------------------------------------------------------------------
# PCI configuration space: capability chains

ALIGNED = st.integers(0x40 // 4, 0xFC // 4).map(lambda n: n * 4)  # where capabilities live
CAP_IDS = st.sampled_from([0x01, 0x05, 0x09, 0x11, 0x12, 0x13])  # PM, MSI, vendor, MSI-X, ...


@st.composite
def chains(draw: st.DrawFn) -> tuple[bytes, int | None]:
    """Config space with a chain of distinct capabilities, the PCI Express one somewhere in it
    or absent, ending in 0, in a loop back, or in a pointer into the header; then truncated.
    Returns the bytes and the offset of the Express capability a correct walk finds."""
    offsets = draw(st.lists(ALIGNED, min_size=0, max_size=12, unique=True))
    express_at = draw(st.none() | st.integers(0, max(len(offsets) - 1, 0)))
    ending = draw(st.sampled_from(["zero", "loop", "header", "garbage"]))
    cfg = bytearray(draw(st.binary(min_size=256, max_size=256)))
    struct.pack_into("<H", cfg, pcie.STATUS, draw(st.integers(0, 0xFFFF)) | pcie.STATUS_CAP_LIST)
    cfg[pcie.CAP_POINTER] = offsets[0] if offsets else 0
    ids = [draw(CAP_IDS) for _ in offsets]
    if express_at is not None and offsets:
        ids[express_at] = pcie.CAP_ID_EXP
    for index, (offset, cap_id) in enumerate(zip(offsets, ids, strict=True)):
        if index + 1 < len(offsets):
            nxt = offsets[index + 1]
        elif ending == "loop":
            nxt = offsets[draw(st.integers(0, index))]
        elif ending == "header":
            nxt = draw(st.integers(0, 0x3F))
        elif ending == "garbage":
            nxt = draw(st.integers(0, 0xFF))
        else:
            nxt = 0
        cfg[offset], cfg[offset + 1] = cap_id, nxt
    size = draw(st.sampled_from([0, 16, 63, 64, 100, 200, 256, 4096]))
    data = bytes(cfg) + bytes(4096 - 256)
    data = data[:size]
    found = None
    if express_at is not None and offsets and size >= 64:
        # Reachable when every capability before it is inside what was read.
        walk = offsets[: express_at + 1]
        if all(o + 2 <= size for o in walk) and pcie.CAP_ID_EXP not in ids[:express_at]:
            found = offsets[express_at]
    return data, found


@given(chains())
def test_capability_walk_finds_express_when_reachable(case: tuple[bytes, int | None]) -> None:
    data, found = case
    assert pcie.capabilities(data).get(pcie.CAP_ID_EXP) == found
    cap = pcie.express(data)
    if cap is not None:
        assert cap.offset == found
        # Encodings 6 and 7 are reserved; a device that reports one shows it as 8192 or 16384.
        assert cap.max_read_request in {128 << n for n in range(8)}


@given(st.binary(min_size=0, max_size=4096))
def test_any_bytes_parse_without_crashing_or_looping(data: bytes) -> None:
    caps = pcie.capabilities(data)
    assert len(caps) <= 48  # at most one per aligned offset in 0x40..0xFC
    assert all(pcie.HEADER_BYTES <= offset < 256 for offset in caps.values())
    pcie.express(data)


@given(st.binary(min_size=256, max_size=256), ALIGNED)
def test_a_chain_that_points_to_itself_ends(prefix: bytes, offset: int) -> None:
    cfg = bytearray(prefix)
    struct.pack_into("<H", cfg, pcie.STATUS, pcie.STATUS_CAP_LIST)
    cfg[pcie.CAP_POINTER] = offset
    cfg[offset], cfg[offset + 1] = pcie.CAP_ID_EXP, offset
    assert pcie.capabilities(bytes(cfg)) == {pcie.CAP_ID_EXP: offset}


@given(st.sampled_from([128, 256, 512, 1024, 2048, 4096]), st.sampled_from([128, 512, 4096]))
def test_mrrs_write_then_read(before: int, after: int) -> None:
    from conftest import config_space

    data = pcie.with_max_read_request(config_space(mrrs=before), after)
    cap = pcie.express(data)
    assert cap is not None
    assert cap.max_read_request == after


# The extended capability list, from 0x100: `id (16) | version (4) | next (12)` headers.
EXT_ALIGNED = st.integers(0x100 // 4, 0xFFC // 4).map(lambda n: n * 4)
EXT_IDS = st.sampled_from([0x0001, 0x0002, 0x000B, 0x0010, 0x0019, 0xFFFF])  # AER, VC, ...


@st.composite
def extended_chains(draw: st.DrawFn) -> tuple[bytes, int | None]:
    """A PCI Express function's 4096 bytes with an extended chain: AER at 0x100 (where every
    list starts), then distinct offsets, the ACS capability somewhere among them or absent,
    ending in 0, a loop back, a pointer into the conventional space, or anything; then
    truncated. The bytes and the ACS offset a correct walk finds."""
    from conftest import config_space

    offsets = [0x100, *draw(st.lists(EXT_ALIGNED.filter(lambda o: o > 0x100), unique=True))]
    offsets = offsets[:17]
    acs_at = draw(st.none() | st.integers(1, max(len(offsets) - 1, 1)))
    ending = draw(st.sampled_from(["zero", "loop", "conventional", "garbage"]))
    cfg = bytearray(config_space())
    cfg[0x100:] = draw(st.binary(min_size=0xF00, max_size=0xF00))
    for offset in range(0x100, 0x1000, 4):  # no ACS header by chance where a garbage pointer lands
        if pcie.u16(cfg, offset) == pcie.ECAP_ID_ACS:
            cfg[offset] += 1
    ids = [0x0001, *(draw(EXT_IDS) for _ in offsets[1:])]
    if acs_at is not None and acs_at < len(offsets):
        ids[acs_at] = pcie.ECAP_ID_ACS
    else:
        acs_at = None
    for index, (offset, cap_id) in enumerate(zip(offsets, ids, strict=True)):
        if index + 1 < len(offsets):
            nxt = offsets[index + 1]
        elif ending == "loop":
            nxt = offsets[draw(st.integers(0, index))]
        elif ending == "conventional":
            nxt = draw(st.integers(0, 0xFF))
        elif ending == "garbage":
            nxt = draw(st.integers(0, 0xFFF))
        else:
            nxt = 0
        version = draw(st.integers(1, 0xF))  # a version of 0 keeps an all-zero header apart
        struct.pack_into("<I", cfg, offset, cap_id | version << 16 | nxt << 20)
    size = draw(st.sampled_from([64, 256, 0x104, 0x800, 4096]))
    found = None
    if acs_at is not None:
        walk = offsets[: acs_at + 1]
        if all(o + 4 <= size for o in walk) and walk[-1] + pcie.ACS_CONTROL + 2 <= size:
            found = walk[-1]
    return bytes(cfg[:size]), found


@given(extended_chains())
def test_extended_walk_finds_acs_when_reachable(case: tuple[bytes, int | None]) -> None:
    data, found = case
    cap = pcie.acs(data)
    assert (cap.offset if cap else None) == found


@given(st.binary(min_size=0xF00, max_size=0xF00), st.sampled_from([64, 256, 0x102, 4096]))
def test_any_extended_bytes_parse_without_crashing_or_looping(tail: bytes, size: int) -> None:
    from conftest import config_space

    data = (config_space()[:0x100] + tail)[:size]
    found = pcie.extended_capabilities(data)
    assert len(found) <= (0x1000 - 0x100) // 4
    assert all(0x100 <= offset <= 0xFFC for offset in found.values())
    pcie.acs(data)


@given(EXT_ALIGNED)
def test_an_extended_chain_that_points_to_itself_ends(offset: int) -> None:
    from conftest import config_space

    cfg = bytearray(config_space())
    struct.pack_into("<I", cfg, 0x100, 0x0001 | 1 << 16 | offset << 20)
    if offset != 0x100:
        struct.pack_into("<I", cfg, offset, pcie.ECAP_ID_ACS | 1 << 16 | offset << 20)
    found = pcie.extended_capabilities(bytes(cfg))
    assert found == ({0x0001: 0x100} | ({pcie.ECAP_ID_ACS: offset} if offset != 0x100 else {}))


def test_a_conventional_function_has_no_extended_space() -> None:
    from conftest import config_space

    # Without a PCI Express capability the bytes past 0x100 alias the header (broken-ecaps).
    cfg = bytearray(config_space(express_at=None))
    struct.pack_into("<I", cfg, 0x100, pcie.ECAP_ID_ACS | 1 << 16)
    assert pcie.extended_capabilities(bytes(cfg)) == {}


# ---------------------------------------------------------------------------------------------
# Multi-value sysctls

BLANKS = st.text(alphabet=" \t\n", min_size=1, max_size=4)


@given(
    st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=6),
    st.lists(BLANKS, min_size=8, max_size=8),
    st.lists(st.sampled_from(["dec", "hex", "oct", "plus"]), min_size=6, max_size=6),
    st.booleans(),
)
def test_whitespace_and_notation_normalise_equal(
    numbers: list[int], blanks: list[str], notations: list[str], edges: bool
) -> None:
    def notation(n: int, how: str) -> str:
        sign = "-" if n < 0 else ("+" if how == "plus" else "")
        return sign + {"hex": f"0x{abs(n):x}", "oct": f"0{abs(n):o}"}.get(how, str(abs(n)))

    words = [notation(n, how) for n, how in zip(numbers, notations, strict=False)]
    spaced = "".join(w + blanks[i] for i, w in enumerate(words)).rstrip(" \t\n")
    if edges:
        spaced = blanks[-1] + spaced + blanks[-2]
    assert normalize_words(spaced) == " ".join(str(n) for n in numbers)


@given(st.text(alphabet="abc019xX_ \t-+.", max_size=30))
def test_normalising_is_idempotent_and_never_fails(text: str) -> None:
    once = normalize_words(text)
    assert once is not None
    assert normalize_words(once) == once


# ---------------------------------------------------------------------------------------------
# GRUB's shell assignments against /bin/sh

SH = shutil.which("sh")
VARS = ["GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT", "A", "B"]
PLAIN = st.text(alphabet="abcXYZ019_.,:=/+-@%#{}", min_size=1, max_size=6)
VAR = st.sampled_from(VARS)


def _after_name(part: str) -> bool:
    return part[:1].isalnum() or part[:1] == "_"


@st.composite
def words(draw: st.DrawFn) -> str:
    """One shell word of the kinds GRUB files use: plain text, 'single', "double" with $VAR,
    ${VAR} and backslash escapes, unquoted $VAR and escapes."""
    parts: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["plain", "single", "double", "var", "braced", "escape"]))
        if kind == "plain":
            part = draw(PLAIN)
            if parts and parts[-1].startswith("$") and not parts[-1].startswith("${"):
                assume(not _after_name(part))  # `$A` then `x` would be `$Ax`
        elif kind == "single":
            part = "'" + draw(st.text(alphabet='ab "$\\`;&|()<>*?~\t', max_size=8)) + "'"
        elif kind == "double":
            inner = draw(
                st.lists(
                    st.sampled_from(
                        [
                            "a",
                            " ",
                            "\t",
                            "'",
                            ";",
                            "|",
                            "*",
                            "~",
                            "\\$",
                            '\\"',
                            "\\\\",
                            "\\`",
                            "\\a",
                            "$A",
                            "${B}",
                            "${GRUB_CMDLINE_LINUX} ",
                            "$GRUB_CMDLINE_LINUX_DEFAULT ",
                        ]
                    ),
                    max_size=8,
                )
            )
            part = '"' + "".join(inner) + '"'
        elif kind == "var":
            part = "$" + draw(VAR)
        elif kind == "braced":
            part = "${" + draw(VAR) + "}"
        else:
            part = "\\" + draw(st.sampled_from(list("a $\"';|&\\`()<>*")))
        if parts and parts[-1].startswith("$") and not parts[-1].startswith("${"):
            assume(not _after_name(part))
        parts.append(part)
    return "".join(parts)


@st.composite
def grub_files(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["assign", "assign", "assign", "export", "comment", "blank"]))
        if kind == "comment":
            lines.append("# " + draw(PLAIN))
        elif kind == "blank":
            lines.append("")
        else:
            prefix = "export " if kind == "export" else draw(st.sampled_from(["", "  ", "\t"]))
            trailer = draw(st.sampled_from(["", " # note", "  "]))
            lines.append(f"{prefix}{draw(VAR)}={draw(words())}{trailer}")
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(SH is None, reason="no /bin/sh")
@settings(max_examples=100, suppress_health_check=[HealthCheck.filter_too_much])
@given(grub_files())
def test_grub_evaluator_agrees_with_sh(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    path = tmp_path_factory.mktemp("grub") / "grub"
    path.write_text(text)
    script = '. "$1"; printf "%s\\0" ' + " ".join(f'"${name}"' for name in VARS)
    shell = subprocess.run(
        [SH, "-c", script, "sh", str(path)],
        capture_output=True,
        env={"PATH": os.defpath},
        check=True,
    )
    expected = dict(zip(VARS, shell.stdout.decode().split("\0")[:-1], strict=True))
    found = evaluate([Script(str(path), text)])
    for name in VARS:
        ours = found.get(name)
        if not isinstance(ours, Unknown):  # Unknown is allowed, a wrong value never
            assert (ours or "") == expected[name], name


@pytest.mark.parametrize(
    "value",
    [
        '"$(date) x"',
        '"`date` x"',
        "$((1+1))",
        '"unterminated',
        "'unterminated",
        '"$1 x"',
        "$@",
        '"pid $$"',
    ],
)
def test_shell_the_evaluator_does_not_run_is_unknown(value: str) -> None:
    found = evaluate([Script("grub", f"GRUB_CMDLINE_LINUX=before\nGRUB_CMDLINE_LINUX={value}\n")])
    assert isinstance(found.get("GRUB_CMDLINE_LINUX"), Unknown)


# ---------------------------------------------------------------------------------------------
# The kernel command line

NAMES = st.sampled_from(["quiet", "amd_pstate", "amd-pstate", "iommu", "processor.max_cstate"])
VALUES = st.none() | st.text(alphabet="abc01=,.:/ ", max_size=8)


@given(
    st.lists(st.tuples(NAMES, VALUES, st.booleans()), max_size=10),
    st.lists(BLANKS, min_size=11, max_size=11),
)
def test_cmdline_quoting_keeps_every_occurrence_in_order(
    params: list[tuple[str, str | None, bool]], blanks: list[str]
) -> None:
    words = []
    expected: dict[str, list[str]] = {}
    for name, value, quote_whole in params:
        if value is None:
            word = name
        elif " " in value or value == "" or not quote_whole:
            word = f'{name}="{value}"' if " " in value else f"{name}={value}"
        else:
            word = f'"{name}={value}"'
        words.append(word)
        expected.setdefault(name.replace("-", "_"), []).append(value or "")
    line = "".join(w + blanks[i] for i, w in enumerate(words))
    found = cmdline.parameters(line)
    assert found is not None
    assert {k: list(v) for k, v in found.occurrences.items()} == expected
    for name, values in expected.items():  # none of these names keeps its first
        assert found.get(name) == values[-1]


def test_grub_example_file_matches_sh(tmp_path: Path) -> None:
    """The example host's GRUB files, sourced by sh and evaluated by tune, give one line."""
    if SH is None:
        pytest.skip("no /bin/sh")
    from conftest import TUNED

    sources = [TUNED / "etc/default/grub", *sorted((TUNED / "etc/default/grub.d").glob("*.cfg"))]
    script = "".join(f'. "{p}"; ' for p in sources)
    script += 'printf "%s %s" "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"'
    shell = subprocess.run(
        [SH, "-c", script], capture_output=True, env={"PATH": os.defpath}, check=True
    )
    found = evaluate(Script(str(p), p.read_text()) for p in sources)
    ours = (
        f"{found.get('GRUB_CMDLINE_LINUX') or ''} {found.get('GRUB_CMDLINE_LINUX_DEFAULT') or ''}"
    )
    assert ours == shell.stdout.decode()
    assert "amd_pstate=active" in ours


PARAM_NAMES = st.sampled_from(
    ["console", "pci", "acpi_osi", "isolcpus", "amd_pstate", "amd-pstate", "quiet", "rd.lvm.lv"]
)
PARAM_VALUES = st.text(alphabet="ab1,.:=/", max_size=6)


@st.composite
def command_words(draw: st.DrawFn) -> list[str]:
    """Words of a command line as people write them: bare flags, name=value, a value or the
    whole word quoted (with blanks inside), and sometimes init's part after `--`."""
    words = []
    for _ in range(draw(st.integers(0, 10))):
        name = draw(PARAM_NAMES)
        value = draw(st.none() | PARAM_VALUES | st.text(alphabet="ab ", min_size=1, max_size=5))
        if value is None:
            words.append(name)
        elif " " in value:
            words.append(draw(st.sampled_from([f'{name}="{value}"', f'"{name}={value}"'])))
        else:
            words.append(f"{name}={value}")
    if draw(st.booleans()):
        words.insert(draw(st.integers(0, len(words))), "--")
    return words


def _one_form(edit: cmdline.Edit) -> cmdline.Edit:
    """Values as each mode takes them: `exactly` a list, an option one `key=value` with no
    comma (the separator between options; `;` separates devices in one), the others one
    value."""
    if edit.mode is cmdline.Mode.EXACTLY:
        return edit
    if edit.mode is cmdline.Mode.OPTION:
        return cmdline.Edit(edit.name, edit.mode, ("a=" + edit.values[0].replace(",", ";"),))
    return cmdline.Edit(edit.name, edit.mode, edit.values[:1])


EDITS = st.builds(
    cmdline.Edit,
    PARAM_NAMES,
    st.sampled_from(list(cmdline.Mode)),
    st.lists(PARAM_VALUES, min_size=1, max_size=3).map(tuple),
).map(_one_form)


@given(command_words(), EDITS | PARAM_NAMES.map(cmdline.remove))
def test_an_edit_keeps_every_word_it_does_not_name_in_order(
    words: list[str], edit: cmdline.Edit
) -> None:
    def others(line: list[str]) -> list[str]:
        named = cmdline.canonical(edit.name)
        return [w for w in line if cmdline.canonical(cmdline.name_value(w)[0]) != named]

    assert cmdline.split(" ".join(words)) == words  # quoted blanks stay inside their word
    edited = cmdline.edit(words, [edit])
    assert others(edited) == others(words)
    if "--" in words:  # init's part is never touched
        assert edited[edited.index("--") :] == words[words.index("--") :]
    before = (cmdline.parameters(" ".join(words)) or cmdline.NONE).every(edit.name)
    after = (cmdline.parameters(" ".join(edited)) or cmdline.NONE).every(edit.name)
    if edit.mode is cmdline.Mode.CONTAINS:  # the occurrences there stay, in order
        assert after == (before if edit.values[0] in before else before + edit.values)
    elif edit.mode is cmdline.Mode.OPTION:  # joins an occurrence there: never a second word
        assert len(after) == max(1, len(before))
    elif edited != words and before:  # in the place of the first occurrence
        first = next(i for i, w in enumerate(words) if w not in others(words))
        assert edited[first : first + len(edit.values)] == edit.words
    assert edit.satisfied(cmdline.parameters(" ".join(edited)) or cmdline.NONE)
    assert cmdline.edit(edited, [edit]) == edited
    extra = cmdline.appended(words, [edit])
    if extra is not None:
        assert edit.satisfied(cmdline.parameters(" ".join(words + extra)) or cmdline.NONE)


@pytest.mark.skipif(SH is None, reason="no /bin/sh")
@settings(max_examples=200)
@given(
    command_words(),
    command_words(),
    st.lists(
        EDITS | PARAM_NAMES.map(cmdline.remove),
        max_size=3,
        unique_by=lambda e: cmdline.canonical(e.name),
    ),
)
def test_the_grub_dropin_sourced_by_sh_makes_the_edits_and_keeps_the_rest(
    linux: list[str], default: list[str], edits: list[cmdline.Edit]
) -> None:
    """tune's drop-in, sourced after the base variables as grub-mkconfig does, gives a line
    where every edit holds and every word no edit names is where it was."""
    from reconciler.kinds.cmdline import dropin

    data = dropin(" ".join(linux), " ".join(default), edits)
    base = "".join(
        f"{name}='{' '.join(words)}'\n"
        for name, words in zip(cmdline.GRUB_VARS, (linux, default), strict=True)
    )
    script = (
        base
        + (data or b"").decode()
        + 'printf "%s %s" "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"'
    )
    shell = subprocess.run(
        [SH, "-c", script], capture_output=True, env={"PATH": os.defpath}, check=True
    )
    line = shell.stdout.decode()
    found = cmdline.parameters(line) or cmdline.NONE
    for edit in edits:
        assert edit.satisfied(found), (line, edit)
    named = {cmdline.canonical(e.name) for e in edits}

    def others(words: list[str]) -> list[str]:
        return [w for w in words if cmdline.canonical(cmdline.name_value(w)[0]) not in named]

    assert others(cmdline.split(line)) == others(linux + default)
