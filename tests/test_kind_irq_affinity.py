"""IRQ affinity: cpulists compared as the kernel parses and prints them, the profile's
`cpus:` field, and how a plan folds a NIC's 64 IRQs into one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_tune
from hypothesis import given
from hypothesis import strategies as st
from irq_host import IrqHost, build
from small_host import write_profile

from reconciler.facts.irq import CpuOutOfRange, kernel_cpulist
from reconciler.facts.numa import format_list, parse_list

CPUS = 256


def bitmap_parselist(text: str, nbits: int) -> set[int]:
    """The kernel's lib/bitmap-str.c bitmap_parselist for the forms tune writes, `N` and `A-B`
    separated by commas, written from its rules rather than from tune's parser: leading and
    trailing whitespace skipped, a region that runs backwards is -EINVAL, a bit at or past
    `nbits` -ERANGE (ValueError here, either way)."""
    bits: set[int] = set()
    for region in text.strip().split(","):
        region = region.strip()
        start, dash, end = region.partition("-")
        if not start.isdigit() or (dash and not end.isdigit()):
            raise ValueError("EINVAL")
        first, last = int(start), int(end) if dash else int(start)
        if last < first:
            raise ValueError("EINVAL")
        if last >= nbits:
            raise ValueError("ERANGE")
        bits.update(range(first, last + 1))
    return bits


def kernel_print(bits: set[int]) -> str:
    """`%*pbl`: ascending, consecutive runs as `A-B`, from the set's bits one by one."""
    out, run = [], []
    for bit in range(CPUS):
        if bit in bits:
            run.append(bit)
        elif run:
            out.append(f"{run[0]}" if len(run) == 1 else f"{run[0]}-{run[-1]}")
            run = []
    if run:
        out.append(f"{run[0]}" if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


regions = st.tuples(st.integers(0, CPUS - 1), st.integers(0, 8)).map(
    lambda r: f"{r[0]}" if r[1] == 0 else f"{r[0]}-{min(r[0] + r[1], CPUS - 1)}"
)
blanks = st.sampled_from(["", " ", "\t"])
cpulists = st.lists(st.tuples(blanks, regions, blanks), min_size=1, max_size=6).map(
    lambda parts: ",".join(f"{a}{r}{b}" for a, r, b in parts)
)


@given(cpulists)
def test_a_cpulist_means_the_cpus_the_kernel_parses(text: str) -> None:
    bits = bitmap_parselist(text, CPUS)
    assert set(parse_list(text)) == bits
    assert kernel_cpulist(text, CPUS) == kernel_print(bits)


@given(st.sets(st.integers(0, CPUS - 1), min_size=1))
def test_what_the_kernel_prints_reads_back_as_the_same_cpus(bits: set[int]) -> None:
    printed = kernel_print(bits)
    assert format_list(bits) == printed
    assert set(parse_list(printed)) == bits


@given(st.integers(0, CPUS - 1), st.integers(1, 8))
def test_a_backwards_range_is_refused_as_the_kernel_refuses_it(first: int, less: int) -> None:
    text = f"0,{first + less}-{first}"
    with pytest.raises(ValueError, match="EINVAL"):
        bitmap_parselist(text, CPUS + 8)
    assert parse_list(text) == ()
    with pytest.raises(ValueError):
        kernel_cpulist(text, CPUS + 8)


def test_a_cpu_past_the_possible_ones_is_refused() -> None:
    with pytest.raises(ValueError):
        kernel_cpulist("0-3,128", 128)
    assert kernel_cpulist("0-3,127", 128) == "0-3,127"


def test_only_a_cpu_past_the_possible_ones_is_out_of_range() -> None:
    with pytest.raises(CpuOutOfRange):
        kernel_cpulist("0-3,128", 128)
    for malformed in ("", "3-1", "0,x"):
        with pytest.raises(ValueError) as refused:
            kernel_cpulist(malformed, 128)
        assert not isinstance(refused.value, CpuOutOfRange)


@pytest.mark.parametrize(
    ("cpus", "said"),
    [
        ("3-0", "range that runs backwards"),
        ("0-3:1/2", "is not a valid CPU list"),
        ("all", "is not a valid CPU list"),
        ("", "is not a valid CPU list"),
        ("0-3; reboot", "is not a valid CPU list"),
    ],
)
def test_a_cpus_field_the_kernel_would_not_take_is_refused_in_the_profile(
    tmp_path: Path, cpus: str, said: str
) -> None:
    profile = write_profile(
        tmp_path / "p.yaml", {"irq_affinity": [{"select": {"vendor": 0x10DE}, "cpus": cpus}]}
    )
    result = run_tune("plan", profile, "--root", build(tmp_path / "h", IrqHost()))
    assert result.code == 65, result.out + result.err
    assert said in result.err
    assert "Traceback" not in result.err


def test_a_single_cpu_may_be_a_yaml_number(tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path / "p.yaml", {"irq_affinity": [{"select": {"vendor": 0x10DE}, "cpus": 0}]}
    )
    result = run_tune("plan", profile, "--root", build(tmp_path / "h", IrqHost()))
    assert result.code == 2, result.err  # changes to make
    assert "irq_affinity 0000:01:00.0:irq90" in result.out


def test_a_nics_irqs_fold_into_one_line(tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path / "p.yaml",
        {"irq_affinity": [{"select": {"vendor": 0x15B3, "class": 0x0200}, "cpus": "local"}]},
    )
    result = run_tune("plan", profile, "--root", build(tmp_path / "h", IrqHost()))
    assert (
        "irq_affinity IRQs of vendor=0x15b3,class=0x0200 on 64 IRQs (irq120-183)" in result.out
    ), result.out


def mask_cpus(mask: str) -> set[int]:
    bits = int(mask.strip().replace(",", ""), 16)
    return {n for n in range(bits.bit_length()) if bits >> n & 1}


def test_this_machines_own_irqs_read_as_its_kernel_prints_them() -> None:
    """The kernel of the machine running the tests as the oracle (read only): each IRQ's list
    reads back as the CPUs of its `smp_affinity` hex mask, and prints as tune prints it."""
    read = []
    for directory in sorted(Path("/proc/irq").glob("[0-9]*")):
        try:
            listed = (directory / "smp_affinity_list").read_text()
            mask = (directory / "smp_affinity").read_text()
        except OSError:
            continue
        read.append(directory.name)
        assert set(parse_list(listed)) == mask_cpus(mask), directory
        assert format_list(parse_list(listed)) == listed.strip(), directory
    if not read:
        pytest.skip("no readable /proc/irq on this machine")
