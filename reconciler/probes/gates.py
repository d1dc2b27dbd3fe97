"""Gate arithmetic: did a phase make a probe's metric worse than the profile allows?"""

from __future__ import annotations

from dataclasses import dataclass

from ..profile.probe_spec import Gate


@dataclass(frozen=True)
class GateVerdict:
    ok: bool
    message: str


def change_percent(before: float, after: float) -> float | None:
    """Signed change from before to after, in percent of before; None when before is 0."""
    if before == 0:
        return None
    return (after - before) / abs(before) * 100.0


def judge(gate: Gate, better: str, before: float | None, after: float | None) -> GateVerdict:
    """Absolute bounds hold on `after` alone; `regress_max` compares with `before` in the
    direction that is worse (`better: higher` -> a drop, `lower` -> a rise)."""
    if after is None:
        return GateVerdict(True, "no result after the phase; gate not evaluated")
    if gate.min is not None and after < gate.min:
        return GateVerdict(False, f"{after:g} is below the minimum {gate.min:g}")
    if gate.max is not None and after > gate.max:
        return GateVerdict(False, f"{after:g} is above the maximum {gate.max:g}")
    if gate.regress_max is not None and before is not None:
        allowed = abs(before) * gate.regress_max / 100.0
        worse = before - after if better == "higher" else after - before
        if worse > allowed:
            pct = change_percent(before, after)
            shown = f"{pct:+.1f}%" if pct is not None else f"{after - before:+g}"
            return GateVerdict(
                False,
                f"{before:g} -> {after:g} ({shown}) regresses more than {gate.regress_max:g}%",
            )
    return GateVerdict(True, "within the gate")
