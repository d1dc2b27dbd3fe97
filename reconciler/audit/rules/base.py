"""What every audit rule shares: the registry, and the wording helpers of their messages."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ...core.changes import Priority
from ...core.files import Request
from ...facts.numa import format_list
from ...facts.pci import DEVICES, PciDevice
from ..facts import Facts
from ..model import Area, Fix, Good, Problem, Verdict
from ..thresholds import Thresholds

P0, P1, P2 = Priority.P0, Priority.P1, Priority.P2


Check = Callable[[Facts, Thresholds], Iterable[Verdict]]


@dataclass(frozen=True)
class Rule:
    id: str
    area: Area
    reads: Request
    check: Check


RULES: list[Rule] = []


def rule(rule_id: str, area: Area, *reads: str | Request) -> Callable[[Check], Check]:
    """Register a rule; `reads` are the files (or requests) it needs beyond `facts.READS`."""
    wanted = Request.of(*(r for r in reads if isinstance(r, str)))
    for read in reads:
        if isinstance(read, Request):
            wanted |= read

    def register(check: Check) -> Check:
        RULES.append(Rule(rule_id, area, wanted, check))
        return check

    return register


def count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def cpus(names: Iterable[str]) -> str:
    """`cpu0-63,96-127` for a set of `cpuN` names."""
    return "cpu" + format_list(int(n.removeprefix("cpu")) for n in names)


def addresses(devices: list[PciDevice]) -> str:
    names = [d.address for d in devices]
    return ", ".join(names) if len(names) <= 4 else f"{names[0]} ... {names[-1]}"


def config_of(device: PciDevice) -> str:
    return f"{DEVICES}/{device.address}/config"


@dataclass(frozen=True)
class Checked:
    """One thing a rule checks one by one (a service, a container): whether it holds, the line
    that shows it, and how it reads as a problem and the profile entry that fixes it where not."""

    name: str
    holds: bool
    shown: str
    problem: str
    fix: Fix


def good_or_problem(
    checked: list[Checked], good: str, priority: Priority, reason: str
) -> list[Verdict]:
    """One Good naming those that hold (`good` then their names), one Problem for the rest."""
    fine = [c for c in checked if c.holds]
    failing = [c for c in checked if not c.holds]
    out: list[Verdict] = []
    if fine:
        out.append(Good(f"{good} {', '.join(c.name for c in fine)}", tuple(c.shown for c in fine)))
    if failing:
        out.append(
            Problem(
                priority,
                "; ".join(c.problem for c in failing),
                tuple(c.shown for c in failing),
                reason,
                tuple(c.fix for c in failing),
            )
        )
    return out
