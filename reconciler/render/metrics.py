"""Prometheus metrics of a check, for node_exporter's textfile collector.

The collector reads every `*.prom` file in its directory on each scrape, so a file must never be
seen half-written: it is written under a name the collector ignores, fsynced, then renamed over
the old one (rename is atomic within a file system), and the directory is fsynced so the rename
survives a crash.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from ..drift.check import DriftReport
from ..hosts.replaced import write_output
from .folding import fold

Labels = dict[str, str]


@dataclass
class Family:
    name: str
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {escape_help(self.help)}", f"# TYPE {self.name} gauge"]
        lines += [f"{self.name}{label_set(labels)} {number(v)}" for labels, v in self.samples]
        return lines


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_set(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items()) + "}"


def number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def exposition(report: DriftReport | None, now: float) -> str:
    """The metrics file for a check that ran (`report`) or could not (`None`)."""
    families = [
        Family(
            "tune_check_success",
            "1 if tune check could read the host and its profile, 0 if it could not.",
            [({}, 0 if report is None else 1)],
        ),
        Family(
            "tune_last_check_timestamp_seconds",
            "Unix time of the last tune check, successful or not.",
            [({}, round(now, 3))],
        ),
    ]
    if report is not None:
        families += _knobs(report)
    return "\n".join(line for f in families for line in f.render()) + "\n"


def _knobs(report: DriftReport) -> Iterable[Family]:
    """One series per profile entry, never per CPU or device (`folding.fold`): a 128-CPU host
    has as many series as a 4-CPU one."""
    profile = {"profile": report.plan.profile}
    plan = report.plan
    applied = Family(
        "tune_applied",
        "1 if a run tune applied is in effect on the host, 0 if none is (never, rolled back).",
        [(profile, 0 if report.last_apply is None else 1)],
    )
    if not report.compared:  # no profile to compare with: a count of 0 would say it was
        return [applied]
    not_applied = {c.id for c in report.not_applied}
    in_sync = Family(
        "tune_knob_in_sync",
        "1 if every knob of the profile entry matches it (a parameter pending a reboot counts), "
        "0 if one drifted or was never applied.",
    )
    for group in fold(plan.compared, same_values=False):
        first = group.first
        labels = profile | {"kind": first.kind, "target": group.entry, "phase": first.phase.value}
        differs = any(report.drifted(c) or c.id in not_applied for c in group.changes)
        in_sync.samples.append((labels, 0 if differs else 1))
    for pending in plan.pending:
        labels = profile | {"kind": pending.kind, "target": pending.target, "phase": "reboot"}
        in_sync.samples.append((labels, 1))
    passing = Family(
        "tune_check_passing",
        "1 if the profile's audit check passes (on every device it names), 0 if it fails.",
    )
    checks: dict[str, bool] = {}
    for check in plan.checks:
        checks[check.name] = checks.get(check.name, True) and check.ok
    passing.samples += [(profile | {"check": name}, int(ok)) for name, ok in checks.items()]
    families = [
        Family(
            "tune_knobs_drifted",
            "Profile entries with a knob tune applied, or found in sync, that has moved.",
            [(profile, len(fold(report.drift, same_values=False)))],
        ),
        Family(
            "tune_knobs_not_applied",
            "Profile entries of a phase never applied (or rolled back): not drift.",
            [(profile, len(fold(report.not_applied, same_values=False)))],
        ),
        in_sync,
        Family(
            "tune_checks_failed",
            "Audit checks of the profile that fail (kernel, driver, IOMMU, PCIe link).",
            [(profile, len(report.failed_checks))],
        ),
        passing,
        Family(
            "tune_pending_reboot",
            "Kernel parameters configured for the next boot but not running yet.",
            [(profile, len(report.pending))],
        ),
        applied,
    ]
    drifting = [c.id for c in report.drift] + [c.id for c in report.changed]
    seen = [report.first_seen[i] for i in drifting if i in report.first_seen]
    if seen:
        families.append(
            Family(
                "tune_drift_first_seen_timestamp_seconds",
                "Unix time tune check first saw the oldest drift still there.",
                [(profile, datetime.fromisoformat(min(seen)).timestamp())],
            )
        )
    if report.since_apply:
        families.append(
            Family(
                "tune_knobs_changed_after_apply",
                "Knobs whose value differs from what the last applied run wrote.",
                [(profile, len(report.changed))],
            )
        )
    if report.last_apply is not None:
        families.append(
            Family(
                "tune_last_apply_timestamp_seconds",
                "Unix time the last successful tune apply finished.",
                [(profile, report.last_apply.finished_at.timestamp())],
            )
        )
    return families


def write_atomically(
    target: str | os.PathLike[str], text: str, pause: Callable[[str], None] | None = None
) -> None:
    """Replace `target` with `text` so a scrape sees the old file or the new, never a part."""
    # node_exporter runs as its own user: it must read what root's check wrote.
    write_output(target, text, "write metrics", pause, mode=0o644)
