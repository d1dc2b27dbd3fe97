"""`tune audit`: find what is wrong with a GPU host without a profile, and write the profile
that fixes it. Rules live in `rules.py`; `engine.audit` runs them on one observation."""

from .engine import audit, request
from .model import Area, Finding, Fix, Remark, Report
from .rules import RULES, Thresholds

__all__ = ["RULES", "Area", "Finding", "Fix", "Remark", "Report", "Thresholds", "audit", "request"]
