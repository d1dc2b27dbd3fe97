"""Integers in host text (kernel files, /proc, a tool's output), read with a bound.

Every number the kernel or a driver prints fits in 64 bits. A run of thousands of digits in a
snapshot or on a hostile host is not one: Python refuses to convert more than 4,300 decimal
digits (ValueError, CVE-2020-10735) and arithmetic on a huge one is slow, so such text reads as
no number at all, as does a digit outside ASCII (`str.isdigit` accepts `²`, which `int` refuses).
Every parser of host text reads its integers here.
"""

from __future__ import annotations

import re

# Magnitudes the kernel can print: u64, and s64 with its sign.
LIMIT = 1 << 64
_DIGITS = {
    2: re.compile(r"[01]+"),
    8: re.compile(r"[0-7]+"),
    10: re.compile(r"[0-9]+"),
    16: re.compile(r"[0-9a-fA-F]+"),
}
# Significant digits past which no base's number fits in 64 bits (64 binary digits is the most).
_WIDEST = 64
# kstrtoul and proc_dointvec's base 0: 0x hex, a leading 0 octal, otherwise decimal; a sign.
_BASE_ZERO = re.compile(r"([+-]?)(?:0[xX]([0-9a-fA-F]+)|0([0-7]+)|([1-9][0-9]*|0))")


def unsigned(text: str, base: int = 10) -> int | None:
    """`text`, ASCII digits of `base` and nothing else (no sign, no space, no prefix), as a
    number below 2**64; None for anything else."""
    if not _DIGITS[base].fullmatch(text):
        return None
    significant = text.lstrip("0")
    if len(significant) > _WIDEST:
        return None
    number = int(significant or "0", base)
    return number if number < LIMIT else None


def signed(text: str) -> int | None:
    """`text` as a decimal integer with an optional sign (`-1`, `+12`), magnitude below 2**64;
    None for anything else."""
    sign = text[:1] if text[:1] in ("-", "+") else ""
    number = unsigned(text[len(sign) :])
    return None if number is None else -number if sign == "-" else number


def kernel_integer(word: str) -> int | None:
    """`word` as the kernel parses an integer with base 0: `0x1f` hex, `017` octal, otherwise
    decimal, an optional sign; None for anything else or a magnitude past 64 bits."""
    match = _BASE_ZERO.fullmatch(word)
    if match is None:
        return None
    sign, hexa, octal, decimal = match.groups()
    number = unsigned(hexa, 16) if hexa else unsigned(octal, 8) if octal else unsigned(decimal)
    return None if number is None else -number if sign == "-" else number
