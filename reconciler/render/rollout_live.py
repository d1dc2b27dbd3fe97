"""The rollout as a table a terminal redraws while hosts move (`tune apply --reboot` over a
fleet, standard output a terminal): every host's wave, state, elapsed time and last message,
the counts in the caption.

Each cell is a `rich.text.Text`, never a string: a string is read as rich's markup, and a
host's message (`[/]`, `[link=...]`) is the host's text, not tune's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table
from rich.text import Text

from ..core.printable import printable
from .rollout import CONFIGURATIONS, counts_line, elapsed

if TYPE_CHECKING:
    from ..rollout.journal import HostEntry, Rollout

COLUMNS = ("WAVE", "HOST", "STATE", "ELAPSED", "MESSAGE")

# What a host in flight is doing, as `RolloutShow.changed` names its steps.
STEPS = {
    "applying": "applying the profile",
    "rebooting": "rebooting: waiting for a new boot id",
    "verifying": "verifying the new boot",
}
STYLES = {
    "done": "green",
    "failed": "bold red",
    "rolled-back": "yellow",
    "not-started": "dim",
}


def _moving(entry: HostEntry, step: str | None) -> bool:
    # "applying" is announced before the host is journaled in flight.
    return step in STEPS and entry.state in ("not-started", "in-flight")


def message(entry: HostEntry, step: str | None) -> str:
    """The host's last message: what it is doing, or how it ended."""
    if step is not None and _moving(entry, step):
        return STEPS[step]
    if entry.why:
        return printable(entry.why)  # quotes what a host or a hook said
    if entry.state == "done":
        return CONFIGURATIONS[entry.configuration]
    return ""


def state(entry: HostEntry, step: str | None) -> str:
    """Its step while in flight (applying, rebooting, verifying), else its journaled state."""
    return step if step is not None and _moving(entry, step) else entry.state


def live_table(
    rollout: Rollout,
    steps: Mapping[str, str],
    note: str | None = None,
    now: float | None = None,
    max_rows: int | None = None,
) -> Table:
    """Every host of `rollout` in wave order; `steps`: each host's last step seen; `note`: a
    line under the counts (the pause between two waves); `max_rows`: the rows a terminal has
    room for, past which hosts done, then hosts not started (the last wave's first), are left
    out in one row that counts them."""
    caption = counts_line(rollout) + (f"\n{note}" if note else "")
    table = Table(
        *COLUMNS,
        box=box.SIMPLE_HEAD,
        caption=Text(caption),
        caption_justify="left",
        header_style="bold",
    )
    order = [name for wave in rollout.waves for name in wave]
    left_out = _left_out(rollout, order, steps, max_rows)
    for name in order:
        if name in left_out:
            continue
        entry = rollout.hosts[name]
        step = steps.get(name)
        shown = state(entry, step)
        table.add_row(
            Text(str(entry.wave + 1)),
            Text(printable(name)),
            Text(shown, style=STYLES.get(shown, "cyan")),
            Text(elapsed(entry, now)),
            Text(message(entry, step)),
        )
    if left_out:
        counts = Counter(rollout.hosts[name].state for name in left_out)
        said = ", ".join(f"{count} {state}" for state, count in sorted(counts.items()))
        said_row = ["…", f"{len(left_out)} more", said, "", "not shown: the terminal is full"]
        table.add_row(*(Text(cell, style="dim") for cell in said_row))
    return table


def _left_out(
    rollout: Rollout, order: list[str], steps: Mapping[str, str], max_rows: int | None
) -> set[str]:
    if max_rows is None or len(order) <= max_rows:
        return set()
    done = [name for name in order if rollout.hosts[name].state == "done"]
    waiting = [
        name
        for name in reversed(order)
        if rollout.hosts[name].state == "not-started" and name not in steps
    ]
    # One row more than the terminal holds is taken by the row that counts the rest.
    return set((done + waiting)[: len(order) - max(max_rows - 1, 0)])
