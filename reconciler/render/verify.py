"""What `tune verify` (and `tune apply --reboot`, which waits for the boot) says of the stored
profile's runtime knobs that differ after the boot: not the boot's to judge (`boot.verify`), so
reported as `tune check` reports them, folded as the plan folds them, the first few only."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.changes import Change
from ..core.few import cut
from .folding import Group, entries, fold, shown

SHOWN = 3  # folded lines shown of each list; `tune check` shows all, `--format json` each knob


def runtime_lines(
    not_applied: Sequence[Change], drifted: Sequence[Change], apply: str
) -> list[str]:
    """`apply`: the command that applies the runtime phase on this host."""
    lines: list[str] = []
    if not_applied:
        lines.append(
            f"Not applied: {_count(not_applied)} of the runtime phase, which no run applied "
            f"here; the boot does not set them, so it is kept. `{apply}` applies them."
        )
        lines += _shown("NOT APPLIED", fold(not_applied))
    if drifted:
        lines.append(
            f"Drift: {_count(drifted)} of the runtime phase that a run applied no longer hold "
            f"after the boot (their boot-time files did not bring them back); the boot is "
            f"kept. `{apply}` applies them again."
        )
        lines += _shown("DRIFT", fold(drifted))
    return lines


def _count(changes: Sequence[Change]) -> str:
    said = f"{entries(changes)} entries"
    return f"{said} ({len(changes)} knobs)" if len(changes) != entries(changes) else said


def _shown(tag: str, groups: list[Group]) -> list[str]:
    lines = [
        cut(
            f"  {tag} {group.label}: {shown(group.first, group.first.current)} "
            f"(want {shown(group.first, group.first.desired)})",
            200,
        )
        for group in groups[:SHOWN]
    ]
    if len(groups) > SHOWN:
        lines.append(
            f"  ... and {len(groups) - SHOWN} more (`tune check` lists them, `--format json` "
            "each knob)"
        )
    return lines
