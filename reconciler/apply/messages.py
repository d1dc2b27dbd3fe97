"""The sentences of a run, whatever applied it: a requirement not met, a knob the kernel
refuses or does not read back, a restore that did not hold, a failed run. Each is written once
here; the Python executor fills in the text itself, the sh executor an expansion in its script.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from ..core.few import first_few
from ..core.words import counted
from ..kinds import named
from ..steps.ops import Need, Require, Step

PACKAGES = {"setpci": "pciutils", "grubby": "grubby"}

# What a message leaves to its engine: the text itself here, an expansion in the remote script.
Said = TypeVar("Said")


def unmet_message(need: Require, step: Step, said: Said) -> tuple[str | Said, ...]:
    """The line for a requirement of `step` the host does not meet, whatever checked it;
    `said`: the first line a failed `modprobe --dry-run` printed (a module's only)."""
    if need.need is Need.WRITABLE:
        return (f"{step.id} cannot be changed: {need.arg} is read-only on this host.",)
    if need.need is Need.COMMAND:
        package = PACKAGES.get(need.arg, need.arg)
        text = f"{need.arg} is not installed on this host (package {package}); {step.id} needs it."
        return (text,)
    return (f"Module {need.arg} cannot be loaded on this host (", said, ").")


def unsupported_message(step: Step, refused: Said) -> tuple[str, Said, str]:
    """The one line that says a knob cannot be set on this host, whatever applied it, around
    the kernel's reason (its final dot dropped)."""
    return (
        f"{step.id} is not supported on this host: ",
        refused,
        "; mark the entry `optional: true` to apply the rest without it.",
    )


def read_back_message(step: Step, shown: Said) -> tuple[str, Said, str]:
    """The line for a write the kernel took but does not read back, around what it reads
    (`show_value`), whatever applied it; in the kind's words where it has some."""
    kind = named(step.kind)
    words = kind.read_back_words(step) if kind is not None else None
    if words is not None:
        return words[0], shown, words[1]
    return (
        f"{step.id}: wrote {show_value(step.expect)} but {step.probe.path} reads back ",
        shown,
        " (refused or clamped by the kernel)",
    )


def not_restored_message(step: Step, shown: Said) -> tuple[str, Said]:
    """The line for an undo the kernel took but does not read back, whatever restored it."""
    return (f"{step.id}: restored {show_value(step.restored)} but it reads back ", shown)


# A value longer than this is shown by its start and its length: a file tune rewrites is read
# whole (a container config of megabytes), a message is one line an operator reads, and lib.sh
# quotes a value one character at a time.
SHOWN_CHARACTERS = 200


def show_value(value: str | None) -> str:
    """A value as messages show it: quoted (its first SHOWN_CHARACTERS and its length when
    longer), or "nothing (absent)". lib.sh's REPR says the same."""
    if value is None:
        return "nothing (absent)"
    if len(value) <= SHOWN_CHARACTERS:
        return repr(value)
    return f"{value[:SHOWN_CHARACTERS]!r}... ({len(value)} characters)"


def failed_message(reason: str, at: str, count: int, failures: list[str], run_id: str) -> str:
    """The message of a run that failed `at` a step (or a phase) for `reason` and restored
    the `count` writes it made, `failures` of them not, whatever applied it."""
    head = reason if reason.startswith(at) else f"{at}: {reason}"
    if failures:
        return (
            f"apply failed ({head}); rolling back {counted(count, 'write')} left "
            f"{len(failures)} not restored: {first_few(failures)} (run {run_id})."
        )
    return f"apply failed ({head}); rolled back {counted(count, 'write')} (run {run_id})."


def explained(steps: Sequence[Step], at: str, reason: str) -> str:
    """The failure `reason` of the step `at` as the user reads it: a command's failure
    (`` `ARGV` failed: OUTPUT ``, as both engines journal it) in the words of its kind where
    the kind knows the cause (`Kind.explain`), else as journaled."""
    step = next((s for s in steps if s.id == at), None)
    kind = named(step.kind) if step is not None else None
    command, sep, output = reason.partition("` failed: ")
    if step is None or kind is None or not sep or not command.startswith("`"):
        return reason
    return kind.explain(step, output) or reason
