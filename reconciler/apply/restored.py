"""What restoring a run came to, for either executor, and `tune rollback`'s chain of runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..hosts.base import Host
from .journal import DamagedJournal, Run, rollback_chain


@dataclass
class Restored:
    restored: int = 0
    unchanged: int = 0
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RollbackResult:
    run_id: str
    result: Restored
    already: bool = False
    # The run's journal is damaged: only the steps recorded before the damage were restored.
    damage: DamagedJournal | None = None


def roll_back_chain(
    host: Host,
    run_id: str | None,
    restore_one: Callable[[Run], RollbackResult],
    approve: Callable[[list[Run]], None] | None = None,
) -> list[RollbackResult]:
    """`tune rollback`: each run of `journal.rollback_chain`, newest first, with `restore_one`
    (an engine's `rollback`); stops at the first run that leaves a change behind. `approve`
    sees the runs before the first is restored, and raises to restore none."""
    results: list[RollbackResult] = []
    chain = rollback_chain(host, run_id)
    if approve is not None:
        approve(chain)
    for run in chain:
        results.append(restore_one(run))
        if results[-1].result.failures:
            break
    return results
