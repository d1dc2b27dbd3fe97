"""Probes around a phase of `tune apply`: measure before the first write and after the last
read-back, journal both, and judge each gate; a failed gate makes the engine roll the phase back
unless the operator asked to keep it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..core.errors import HostError
from ..profile.probe_spec import ProbeSpec
from ..steps.records import GateJudged, ProbesMeasured, Record
from .gates import GateVerdict, judge
from .runner import Executor, ProbeResult, run_argv, run_probe

# `when` of the measurement `tune verify` makes after the boot a reboot-phase apply prepared.
AFTER_BOOT = "after-boot"


class Regressed(HostError):
    """A probe's gate failed after the phase; the message names the probes and the numbers."""


@dataclass(frozen=True)
class GateFailure:
    probe: str
    verdict: GateVerdict


class Recorder(Protocol):
    """Where the records go: the run's `Journal`, or a list a remote apply hands the target."""

    def record(self, record: Record) -> None: ...


@dataclass
class Records:
    """Records kept here to be written by the target's own apply script."""

    lines: list[Record] = field(default_factory=list)

    def record(self, record: Record) -> None:
        self.lines.append(record)


@dataclass
class PhaseProbes:
    """The hook `apply.execute` calls around a phase (`before`, then `after`).

    The reboot phase takes effect only at the next boot: `after` leaves it to `tune verify`,
    which measures again after the boot (`after_boot`) against the last measurement the run
    journaled before it."""

    probes: Mapping[str, ProbeSpec]
    phase: str
    env: Mapping[str, str] = field(default_factory=dict)
    keep_on_regression: bool = False
    execute: Executor = run_argv
    progress: Callable[[str], None] | None = None  # hears each probe run, while it runs
    before_results: dict[str, ProbeResult] = field(default_factory=dict)
    after_results: dict[str, ProbeResult] = field(default_factory=dict)
    failures: list[GateFailure] = field(default_factory=list)

    @property
    def measured_after_boot(self) -> bool:
        return self.phase == "reboot"

    def _measure(self, journal: Recorder, when: str) -> dict[str, ProbeResult]:
        results = {
            name: run_probe(name, spec, self.execute, self.env, self.progress)
            for name, spec in self.probes.items()
        }
        journal.record(
            ProbesMeasured(when, self.phase, tuple(r.to_json() for r in results.values()))
        )
        return results

    def before(self, journal: Recorder) -> None:
        self.before_results = self._measure(journal, "before")

    def after(self, journal: Recorder) -> None:
        if self.measured_after_boot:
            return
        self.judge(journal, "after")
        if self.failures and not self.keep_on_regression:
            raise Regressed(f"probe gate failed: {self.failed()}")

    def after_boot(self, journal: Recorder) -> list[GateFailure]:
        """Measure after the boot and judge; the caller rolls back (or keeps) on failures."""
        return self.judge(journal, AFTER_BOOT)

    def failed(self) -> str:
        return "; ".join(f"{f.probe}: {f.verdict.message}" for f in self.failures)

    def judge(self, journal: Recorder, when: str) -> list[GateFailure]:
        """Measure now, journal a `gate` record per gated probe against `before_results`."""
        self.after_results = self._measure(journal, when)
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
                verdict = GateVerdict(False, f"measured {before:g} before, then {result.error}")
            journal.record(
                GateJudged(
                    probe=name,
                    phase=self.phase,
                    when=when,
                    ok=verdict.ok,
                    message=verdict.message,
                    before=before,
                    after=after,
                    kept=not verdict.ok and self.keep_on_regression,
                )
            )
            if not verdict.ok:
                self.failures.append(GateFailure(name, verdict))
        return self.failures
