"""Fold changes that differ only in their subject (128 CPUs, 8 GPUs) into one line.

One rule for every view of many knobs: the text plan, `--dry-run`, `tune report`, `tune check`,
the summary counts and the Prometheus metrics. A profile entry (`cpu: {governor: performance}`)
expands to one knob per subject; `entry` is what those knobs share, so a view counts and labels
profile entries, never CPUs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from ..core.changes import Change, Value
from ..core.words import counted
from ..facts.numa import format_list
from ..kinds import named

# The rule of what a change is lives in `plan.entries`; the views take it from here too.
from ..plan.entries import entries as entries
from ..plan.entries import entry as entry
from ..plan.entries import of_subjects

T = TypeVar("T")


@dataclass(frozen=True)
class Group:
    changes: tuple[Change, ...]

    @property
    def first(self) -> Change:
        return self.changes[0]

    @property
    def label(self) -> str:
        c = self.first
        if len(self.changes) == 1:
            return f"{c.kind} {c.target}"
        return (
            f"{c.kind} {c.setting} on {len(self.changes)} {noun(c.kind)} ({subjects(self.changes)})"
        )

    @property
    def entry(self) -> str:
        return entry_name(self.first)

    @property
    def fixes(self) -> list[str]:
        return list(dict.fromkeys(c.fix for c in self.changes if c.fix))


def entry_name(change: Change) -> str:
    """The profile entry's name, the same for each of its subjects (`governor`, `idle C2`), or
    the knob's target: a label that stays put whatever the host has drifted to, and names
    one entry (a container's setting is its own: `101:lxc.cgroup2.devices.allow`)."""
    return change.setting if of_subjects(change.kind, change.subject) else change.target


def fold_key(change: Change, *, same_values: bool = True) -> tuple[object, ...]:
    """The one folding rule: changes with equal keys are one group. By profile entry; with
    `same_values` (a line that shows one value for all of them) also by what the line shows."""
    key = entry(change)
    if same_values and change.subject:
        key += (change.current, change.desired, change.priority, change.reason, change.phase)
    return key


def fold(changes: Iterable[Change], *, same_values: bool = True) -> list[Group]:
    """Changes grouped by `fold_key`, in the order each group first appears."""
    return [
        Group(tuple(b)) for b in blocks(changes, lambda c: fold_key(c, same_values=same_values))
    ]


def blocks(items: Iterable[T], key: Callable[[T], Hashable | None]) -> list[list[T]]:
    """`items` in blocks of equal key, each block where its first item was; an item whose key
    is None is a block of its own."""
    found: dict[Hashable, list[T]] = {}
    for n, item in enumerate(items):
        k = key(item)
        found.setdefault(("alone", n) if k is None else ("key", k), []).append(item)
    return list(found.values())


def same_but_subject(texts: Iterable[str], subject: str) -> tuple[str, ...]:
    """`texts` (a step's operations) with `subject` blanked out as a whole name (cpu1 is not
    the start of cpu12): equal for steps that do the same thing to another CPU or device. An
    IRQ's files name it by its bare number (`irq120` is /proc/irq/120/)."""
    name = re.compile(rf"(?<![\w.:-]){re.escape(subject)}(?![\w.:-])")
    irq = re.fullmatch(r"irq(\d+)", subject)
    number = re.compile(rf"(?<=/proc/irq/){irq.group(1)}(?=/)" if irq else r"(?!)")
    return tuple(number.sub("\0", name.sub("\0", text)) for text in texts)


def changes_and_writes(changes: int, writes: int) -> str:
    """The two words every command counts a plan in: `29 changes (368 writes)`. A change is a
    profile entry that differs (a governor on 128 CPUs is one), a write one knob it writes
    (that governor is 128); the writes are said where they are more."""
    said = counted(changes, "change")
    return said + (f" ({counted(writes, 'write')})" if writes != changes else "")


def noun(kind: str) -> str:
    known = named(kind)
    return known.noun if known is not None else "targets"


def whole_files(change: Change) -> bool:
    """Whether `change` replaces whole files (tune's boot-time files), shown by their size."""
    kind = named(change.kind)
    return kind is not None and kind.whole_file


def subjects(changes: tuple[Change, ...]) -> str:
    """`cpu0-63,96-127` for CPUs, `irq120-183` for interrupts; the addresses themselves for a
    few devices."""
    names = [c.subject for c in changes]
    numbered = [re.fullmatch(r"(cpu|irq)(\d+)", n) for n in names]
    prefixes = {m.group(1) for m in numbered if m}
    if all(numbered) and len(prefixes) == 1:
        return prefixes.pop() + format_list(int(m.group(2)) for m in numbered if m)
    if len(names) <= 4:
        return ", ".join(names)
    return f"{names[0]} ... {names[-1]}"


def show(value: Value) -> str:
    if value is None:
        return "(absent)"
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]" if value else "[]"
    return repr(value) if value == "" or value != value.strip() else value


def line_changes(change: Change) -> list[tuple[str, str]]:
    """("+", line) for each line `change` adds, ("-", line) for each it removes."""
    old = change.current if isinstance(change.current, tuple) else ()
    new = change.desired if isinstance(change.desired, tuple) else ()
    return [("+", x) for x in new if x not in old] + [("-", x) for x in old if x not in new]


def shown(change: Change, value: Value) -> str:
    """A value as a report shows it: a whole file (tune's boot-time files) by its size."""
    if whole_files(change) and isinstance(value, tuple):
        return f"{len(value)} lines"
    return show(value)
