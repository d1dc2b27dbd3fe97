"""NUMA nodes as the kernel lists them under /sys/devices/system/node."""

from __future__ import annotations

import re

NODES = "/sys/devices/system/node"
NODES_ONLINE = NODES + "/online"


def parse_list(text: str | None) -> tuple[int, ...]:
    """A kernel cpulist or node list, `0-31,64-95`, as numbers; () when absent or malformed."""
    numbers: list[int] = []
    for part in (text or "").strip().split(","):
        match = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if not match:
            return ()
        first = int(match.group(1))
        numbers.extend(range(first, int(match.group(2) or first) + 1))
    return tuple(numbers)
