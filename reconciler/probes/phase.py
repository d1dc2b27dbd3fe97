"""Probes around a phase of `tune apply`: measure before the first write and after the last
read-back, journal both, and judge each gate; a failed gate makes the engine roll the phase back
unless the operator asked to keep it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import HostError
from ..journal import Journal
from .gates import Verdict, judge
from .runner import Executor, ProbeResult, run_argv, run_probe
from .spec import ProbeSpec


class Regressed(HostError):
    """A probe's gate failed after the phase; the message names the probes and the numbers."""


@dataclass(frozen=True)
class GateFailure:
    probe: str
    verdict: Verdict


@dataclass
class PhaseProbes:
    """The hook `apply.execute` calls around a phase (`before`, then `after`)."""

    probes: Mapping[str, ProbeSpec]
    phase: str
    env: Mapping[str, str] = field(default_factory=dict)
    keep_on_regression: bool = False
    execute: Executor = run_argv
    before_results: dict[str, ProbeResult] = field(default_factory=dict)
    after_results: dict[str, ProbeResult] = field(default_factory=dict)
    failures: list[GateFailure] = field(default_factory=list)

    def _measure(self, journal: Journal, when: str) -> dict[str, ProbeResult]:
        results = {
            name: run_probe(name, spec, self.execute, self.env)
            for name, spec in self.probes.items()
        }
        journal.record(
            "probes",
            when=when,
            phase=self.phase,
            results=[r.to_json() for r in results.values()],
        )
        return results

    def before(self, journal: Journal) -> None:
        self.before_results = self._measure(journal, "before")

    def after(self, journal: Journal) -> None:
        self.after_results = self._measure(journal, "after")
        for name, spec in self.probes.items():
            if spec.gate is None:
                continue
            measured = self.before_results.get(name)
            before = measured.median if measured is not None else None
            result = self.after_results[name]
            after = result.median
            verdict = judge(spec.gate, spec.better, before, after)
            if result.error is not None and before is not None:
                # It measured before the changes and cannot now: the changes broke what it runs.
                verdict = Verdict(False, f"measured {before:g} before, then {result.error}")
            journal.record(
                "gate",
                probe=name,
                phase=self.phase,
                ok=verdict.ok,
                message=verdict.message,
                before=before,
                after=after,
                kept=not verdict.ok and self.keep_on_regression,
            )
            if not verdict.ok:
                self.failures.append(GateFailure(name, verdict))
        if self.failures and not self.keep_on_regression:
            failed = "; ".join(f"{f.probe}: {f.verdict.message}" for f in self.failures)
            raise Regressed(f"probe gate failed: {failed}")
