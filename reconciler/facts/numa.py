"""NUMA nodes as the kernel lists them under /sys/devices/system/node."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..core.files import Files
from . import numbers

NODES = "/sys/devices/system/node"
NODES_ONLINE = NODES + "/online"
NODE_CPULIST = NODES + "/node*/cpulist"

_NODE = re.compile(r"/node(\d+)/cpulist$")
# More CPUs than any kernel configures (NR_CPUS is 8192 at most): a list naming more, or a
# number past it, is no list the kernel printed (`0-4294967295` would take minutes to expand).
MAX_CPUS = 1 << 16


def parse_list(text: str | None) -> tuple[int, ...]:
    """A kernel cpulist or node list, `0-31,64-95`, as numbers; () when absent or malformed
    (a range that runs backwards, `5-3`, is malformed: bitmap_parselist refuses it)."""
    found: list[int] = []
    for part in (text or "").strip().split(","):
        match = re.fullmatch(r"\s*([0-9]+)(?:-([0-9]+))?\s*", part)
        if not match:
            return ()
        first = numbers.unsigned(match.group(1))
        last = first if match.group(2) is None else numbers.unsigned(match.group(2))
        if first is None or last is None or last < first or last - first >= MAX_CPUS:
            return ()
        found.extend(range(first, last + 1))
        if len(found) > MAX_CPUS:
            return ()
    return tuple(found)


def format_list(numbers: Iterable[int]) -> str:
    """Numbers as the kernel prints a cpulist (`%*pbl`): ascending ranges, `0-3,8`."""
    out: list[str] = []
    ordered = sorted(set(numbers))
    if not ordered:
        return ""
    start = prev = ordered[0]
    for n in [*ordered[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(out)


def node_cpus(files: Files) -> dict[int, frozenset[int]]:
    """Node number -> its CPUs, from each node's `cpulist` (a memory-only node lists none)."""
    found = {}
    for path in files.glob(NODE_CPULIST):
        match = _NODE.search(path)
        if match:
            found[int(match.group(1))] = frozenset(parse_list(files.value(path)))
    return dict(sorted(found.items()))
