"""The audit's rules: one function each, registered with its stable id and area, one module
per area. Importing this package registers them all, in the order the report lists them.

A rule reads `Facts` (and only the files its registration declares, plus those `facts.READS`
covers), compares with `Thresholds` (thresholds.py), and returns verdicts: a `Problem` with the
profile entries that fix it (or a remedy tune cannot apply), a `Good`, or a `NotIssue`. Rules
never decide whether a fix is already configured: the audit runs each fix through the plan
engine for that.
"""

from __future__ import annotations

from . import containers, cpu, gpu, irq, kernel, pcie, services, sysctl
from .base import RULES as REGISTERED
from .base import Rule

# The order a report lists them in: by area, then as each module registers them.
AREAS = tuple(m.__name__ for m in (pcie, gpu, sysctl, cpu, irq, kernel, containers, services))
RULES = sorted(REGISTERED, key=lambda r: AREAS.index(r.check.__module__))

__all__ = ["RULES", "Rule"]
