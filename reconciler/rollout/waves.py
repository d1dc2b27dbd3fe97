"""How a fleet is cut into waves: `--serial` as Ansible reads it, `--canary` hosts first, and
the failure budget `--max-fail`.

Ansible's `serial` is a list of batch sizes, the last repeating until every host had its turn;
each size is a number of hosts or a percentage of the whole play's hosts, rounded down and at
least 1. A single value is a list of one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.errors import UsageError

_SIZE = re.compile(r"(\d+)(%?)")


@dataclass(frozen=True)
class Size:
    """One batch size: `count` hosts, or `count` percent of the fleet."""

    count: int
    percent: bool = False

    def of(self, fleet: int) -> int:
        if not self.percent:
            return self.count
        return max(1, fleet * self.count // 100)

    def __str__(self) -> str:
        return f"{self.count}%" if self.percent else str(self.count)


def parse_sizes(text: str, option: str) -> list[Size]:
    """`1`, `25%`, `1,5,25%`: the sizes in order; `UsageError` naming `option` otherwise."""
    sizes = []
    for part in text.split(","):
        match = _SIZE.fullmatch(part.strip())
        if (
            match is None
            or int(match.group(1)) == 0
            or (match.group(2) and int(match.group(1)) > 100)
        ):
            raise UsageError(
                f"{option} {text!r}: give a number of hosts or a percentage of the fleet "
                "(1 to 100%), or a comma-separated list of them, e.g. 1,5,25%."
            )
        sizes.append(Size(int(match.group(1)), bool(match.group(2))))
    return sizes


def waves(
    hosts: Sequence[str], serial: Sequence[Size], canaries: Sequence[str] = ()
) -> list[list[str]]:
    """The hosts cut into waves: the canaries alone first (one wave), then the others in the
    inventory's order by `serial`, its last size repeating. Percentages are of the whole fleet
    (canaries included), as Ansible counts them."""
    unknown = [name for name in canaries if name not in hosts]
    if unknown:
        raise UsageError(f"--canary {unknown[0]} is not one of the hosts of the rollout.")
    rest = [name for name in hosts if name not in canaries]
    cut: list[list[str]] = [list(dict.fromkeys(canaries))] if canaries else []
    sizes = list(serial) or [Size(100, percent=True)]
    start = 0
    while start < len(rest):
        size = sizes[min(len(cut) - bool(canaries), len(sizes) - 1)].of(len(hosts))
        cut.append(rest[start : start + size])
        start += size
    return cut


@dataclass(frozen=True)
class FailureBudget:
    """`--max-fail N|P%`: how many hosts may fail before the rollout stops (it stops when the
    failures exceed it); a percentage is of the whole fleet, rounded down."""

    size: Size | None  # None: no host may fail

    @classmethod
    def parse(cls, text: str) -> FailureBudget:
        match = _SIZE.fullmatch(text.strip())
        if match is None or (match.group(2) and int(match.group(1)) > 100):
            raise UsageError(
                f"--max-fail {text!r}: give a number of hosts (0: none may fail) or a "
                "percentage of the fleet, e.g. 2 or 10%."
            )
        return cls(Size(int(match.group(1)), bool(match.group(2))))

    def allowed(self, fleet: int) -> int:
        if self.size is None:
            return 0
        if self.size.percent:
            return fleet * self.size.count // 100
        return self.size.count

    def __str__(self) -> str:
        return "0" if self.size is None else str(self.size)
