"""Counts in tune's sentences: `1 host`, `2 hosts`."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and `noun`, in the plural unless there is exactly one."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
