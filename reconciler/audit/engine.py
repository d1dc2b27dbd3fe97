"""The audit: observe the host once, run every rule, and run each fix through the plan engine.

Running the fixes through the knob kinds' own `compare` is what closes the loop: a finding is
actionable exactly when its profile entries produce changes in `tune plan`, and those changes
are the ones the suggested profile's plan will list. A fix already configured for the next
boot is pending, not actionable; a fix the host already has means tune cannot help, and the
finding carries the rule's remedy instead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..core.changes import Change, Outcome, Phase
from ..core.errors import HostError
from ..core.files import Files, Request
from ..hosts.base import ReadableHost
from ..plan.make import order
from ..plan.observe import observation
from ..profile.load import Profile, profiles_of
from .facts import READS, Facts
from .fixes import meta, profile_data
from .model import Finding, Good, HostSummary, NotIssue, Problem, Remark, Report
from .rules import RULES, Rule
from .thresholds import Thresholds


def request(rules: list[Rule]) -> Request:
    """Everything the audit reads, as one batch."""
    wanted = READS
    for rule in rules:
        wanted |= rule.reads
    return wanted


def audit(
    host: ReadableHost, limits: Thresholds | None = None, rules: list[Rule] | None = None
) -> Report:
    rules = RULES if rules is None else rules
    files = host.fetch(request(rules))
    if not files.contents:
        raise HostError(
            f"{host.describe()}: none of the files the audit reads exist; "
            "is this the root of a Linux host?"
        )
    facts = Facts(observation(host, files).host, files)
    problems: list[tuple[Rule, Problem]] = []
    good: list[Remark] = []
    not_issues: list[Remark] = []
    for rule in rules:
        for verdict in rule.check(facts, limits or Thresholds()):
            if isinstance(verdict, Problem):
                problems.append((rule, verdict))
            elif isinstance(verdict, Good):
                good.append(Remark(rule.id, rule.area, verdict.observed, verdict.evidence))
            elif isinstance(verdict, NotIssue):
                not_issues.append(
                    Remark(rule.id, rule.area, verdict.observed, verdict.evidence, verdict.reason)
                )
    # Every fix as a profile of its own, validated in one go (and cached by content).
    fixing = profiles_of([fix_profile(problem) for _, problem in problems])
    findings = [
        evaluate(rule, problem, facts, profile)
        for (rule, problem), profile in zip(problems, fixing, strict=True)
    ]
    findings.sort(key=lambda f: (f.priority, not f.actionable))
    return Report(facts.summary(), tuple(findings), tuple(good), tuple(not_issues))


def host_summary(host: ReadableHost) -> HostSummary | None:
    """The audit's host summary alone (for `tune report`); None where none of its files exist."""
    files = host.fetch(request(RULES))
    if not files.contents:
        return None
    return Facts(observation(host, files).host, files).summary()


def fix_profile(problem: Problem) -> dict[str, Any]:
    """The profile data of a problem's fixes alone."""
    entry_meta = meta(problem.priority.value, problem.reason)
    return {"name": "audit", **profile_data((fix, entry_meta) for fix in problem.fixes)}


def evaluate(rule: Rule, problem: Problem, facts: Facts, profile: Profile | None) -> Finding:
    """A problem as a finding: what its fixes (`profile`, None where the profile format refuses
    them) change on this host, according to the plan."""
    cannot = Finding(
        rule.id,
        rule.area,
        problem.priority,
        problem.observed,
        problem.evidence,
        problem.reason,
        fix=problem.remedy or "tune has no setting for this",
        phase=None,
    )
    if not problem.fixes or profile is None:
        # No fix, or one the profile format refuses (a container path with odd characters):
        # tune cannot manage it, so the remedy stands.
        return cannot
    outcome = Outcome()
    for kind, spec in profile.sections():
        unread = unfetched(kind.request(spec), facts.files)
        if unread:
            # A rule that forgot to declare what its fix compares would report from files
            # that look absent: fail loudly instead.
            raise RuntimeError(f"rule {rule.id} did not declare its reads: {', '.join(unread)}")
        outcome.extend(kind.compare(spec, facts.files))
    changes = tuple(sorted((c for c in outcome.changes if not c.in_sync), key=order))
    if changes:
        return replace(
            cannot,
            fix=_commands(changes),
            phase=max((c.phase for c in changes), key=list(Phase).index),
            changes=changes,
            fixes=problem.fixes,
        )
    if outcome.pending:
        configured = ", ".join(
            p.target if p.configured in (None, "") else f"{p.target}={p.configured}"
            for p in outcome.pending
        )
        return replace(
            cannot,
            fix=f"reboot: {configured} is configured for the next boot",
            phase=Phase.REBOOT,
            pending=True,
        )
    return cannot


def unfetched(wanted: Request, files: Files) -> list[str]:
    """Patterns of `wanted` that the observation neither asked for nor read through a glob."""
    unread = [p for p in wanted.patterns if p not in files.matches and p not in files.contents]
    return sorted(unread + [p for p in wanted.nodes if p not in files.nodes])


def _commands(changes: tuple[Change, ...]) -> str:
    return "\n".join(dict.fromkeys(c.fix for c in changes if c.fix))
