"""Running probes: argv without a shell, a timeout that kills the whole process group, the
metric parsed from stdout, the median of `repeat` runs."""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import child_environment
from ..profile.probe_spec import ProbeSpec

# Kept in the journal: enough to see what a probe printed, not a whole benchmark log.
OUTPUT_KEEP = 4096
# The status of a command that is not there: sh's, and what `run_argv` reports for it.
NOT_FOUND = 127
GPU_P2P = Path(__file__).with_name("gpu_p2p.py")


@dataclass(frozen=True)
class ProcessEnded:
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float


Executor = Callable[[list[str], float, Mapping[str, str]], ProcessEnded]


def run_argv(argv: list[str], timeout: float, env: Mapping[str, str]) -> ProcessEnded:
    """Run argv on this machine in its own session so a timeout can kill everything it
    started (benchmarks fork workers; killing only the parent leaves them holding the GPUs)."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**child_environment(), **env},
            start_new_session=True,
        )
    except OSError as exc:
        return ProcessEnded(NOT_FOUND, "", f"{argv[0]}: {exc.strerror}", 0.0)
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return ProcessEnded(
        code,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        time.monotonic() - started,
    )


@dataclass(frozen=True)
class ProbeResult:
    name: str
    metric: str
    unit: str
    better: str
    values: tuple[float, ...] = ()
    skipped: str | None = None  # not a failure: e.g. no CUDA device on this host
    error: str | None = None
    output: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "metric": self.metric,
            "unit": self.unit,
            "better": self.better,
            "values": list(self.values),
            "median": self.median,
            "min": min(self.values) if self.values else None,
            "max": max(self.values) if self.values else None,
            "skipped": self.skipped,
            "error": self.error,
            "output": self.output,
            "details": self.details,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProbeResult:
        return cls(
            name=data["name"],
            metric=data["metric"],
            unit=data.get("unit", ""),
            better=data.get("better", "higher"),
            values=tuple(data.get("values", ())),
            skipped=data.get("skipped"),
            error=data.get("error"),
            output=data.get("output", ""),
            details=dict(data.get("details") or {}),
        )


def argv_of(spec: ProbeSpec) -> list[str]:
    if spec.run is not None:
        return list(spec.run)
    # The target's own python3 (where its PyTorch or CuPy lives), given the script's text so the
    # same argv works on a remote host that has no copy of tune.
    return ["python3", "-c", GPU_P2P.read_text(encoding="utf-8")]


def run_probe(
    name: str,
    spec: ProbeSpec,
    execute: Executor = run_argv,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ProbeResult:
    """Run the probe `spec.repeat` times; `progress` hears which run is going."""
    base = ProbeResult(name, spec.metric, spec.unit_label, spec.better)
    values: list[float] = []
    output = ""
    details: dict[str, Any] = {}
    for run in range(1, spec.repeat + 1):
        if progress is not None:
            progress(f"Probe {name}: run {run} of {spec.repeat}")
        done = execute(argv_of(spec), spec.timeout, env or {})
        output = _tail(done.stdout + (("\n" + done.stderr) if done.stderr else ""))
        if done.returncode is None:
            return _with(base, values, output, error=f"timed out after {spec.timeout:g} s")
        if done.returncode == NOT_FOUND and spec.builtin is not None:
            # The builtin needs the host's python3 by nature: a host without one has no GPU
            # stack to measure, which is not a failure of the host.
            return _with(base, values, output, skipped="skipped: no python3 on the host")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return _with(
                base, values, output, error=f"exited with status {done.returncode}: {last}"
            )
        if spec.builtin is not None:
            value, skipped, details = _builtin_metric(done.stdout, spec.metric)
            if skipped:
                return _with(base, values, output, skipped=skipped, details=details)
        else:
            match = re.search(spec.metric, done.stdout)
            if match is None:
                return _with(
                    base,
                    values,
                    output,
                    error=f"metric pattern {spec.metric!r} not found in the output",
                )
            value = _number(match.group(1))
        if value is None:
            return _with(base, values, output, error="the metric is not a number")
        values.append(value)
    return _with(base, values, output, details=details)


def _with(base: ProbeResult, values: list[float], output: str, **changes: Any) -> ProbeResult:
    return ProbeResult(
        base.name, base.metric, base.unit, base.better, tuple(values), output=output, **changes
    )


def _builtin_metric(stdout: str, metric: str) -> tuple[float | None, str | None, dict[str, Any]]:
    try:
        report = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, None, {}
    if report.get("skipped"):
        return None, f"skipped: {report['skipped']}", report
    value = report.get("metrics", {}).get(metric)
    if value is None:
        return (
            None,
            f"skipped: {metric} not measured on this host ({report.get('note', '')})",
            report,
        )
    return float(value), None, report


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _tail(text: str) -> str:
    return text if len(text) <= OUTPUT_KEEP else "..." + text[-OUTPUT_KEEP:]
