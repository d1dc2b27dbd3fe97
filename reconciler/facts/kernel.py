"""The running kernel: who it is (host name, release, boot id), how its version compares, and
how its IOMMU groups translate DMA."""

from __future__ import annotations

import re

from . import numbers

HOSTNAME = "/proc/sys/kernel/hostname"
OSRELEASE = "/proc/sys/kernel/osrelease"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
IOMMU_TYPES = "/sys/kernel/iommu_groups/*/type"


def version(release: str) -> tuple[int, ...]:
    """`6.8.12-9-pve` -> (6, 8, 12); () when it does not start with a version."""
    match = re.match(r"([0-9]+(?:\.[0-9]+)*)", release.strip())
    parts = [numbers.unsigned(p) for p in match.group(1).split(".")] if match else []
    return () if None in parts else tuple(p for p in parts if p is not None)


def kernel_ok(release: str, constraint: str) -> bool:
    """Whether `release` meets `constraint` (`>=6.14`, `<6.8`, `==6.8.12`; no operator: `>=`),
    compared on as many components as the constraint gives."""
    match = re.fullmatch(r"(>=|<=|==|>|<)?\s*([\d.]+)", constraint.strip())
    assert match is not None  # the profile schema only admits this shape
    op, wanted = match.group(1) or ">=", version(match.group(2))
    have = version(release)[: len(wanted)]
    return {
        ">=": have >= wanted,
        "<=": have <= wanted,
        "==": have == wanted,
        ">": have > wanted,
        "<": have < wanted,
    }[op]
