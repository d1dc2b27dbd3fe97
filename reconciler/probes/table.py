"""Probe results for a terminal."""

from __future__ import annotations

from collections.abc import Sequence

from .runner import ProbeResult


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def render(results: Sequence[ProbeResult]) -> str:
    rows = [("probe", "metric", "median", "min", "max", "unit", "runs", "status")]
    for r in results:
        status = r.error or r.skipped or "ok"
        rows.append(
            (
                r.name,
                r.metric if len(r.metric) <= 24 else r.metric[:21] + "...",
                number(r.median),
                number(min(r.values) if r.values else None),
                number(max(r.values) if r.values else None),
                r.unit or "-",
                str(len(r.values)),
                status,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    ]
    return "\n".join(lines) + "\n"
