"""The host's run lock, specified once for both engines: `/run/tune/tune.lock` (`state.LOCK`),
flock(2)ed for a whole run, waited for at most `WAIT` seconds, and holding one line that names
its holder, `PID SINCE COMMAND`, so that whoever finds it held can say who has it.

A pull-mode `tune apply --runtime-only` on the host, a local one and a `tune apply -H` pushed
from a controller run the same sh script (`apply/lib.sh` `take_lock`), and a snapshot's Python
executor takes it in this process: one lock, so a push and a pull never write at the same
time; the one that comes second waits for a run that is ending, and otherwise exits 1 naming
the other.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from typing import NamedTuple

# Long enough for a run between its `end` record and its exit (a detached script, a promotion
# started right after), short enough that a timer's run gives way at once to a run that goes on.
WAIT = 5
# What a holder's line may take: a command line is cut, never the pid or the time.
MAX_RECORD = 512
SINCE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # UTC, as `date -u +%Y-%m-%dT%H:%M:%SZ` writes it


class Holder(NamedTuple):
    """Who holds the lock, as its line says; an older tune wrote the pid alone."""

    pid: str
    since: str | None = None
    command: str | None = None

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        words = data[:MAX_RECORD].decode("utf-8", "replace").split("\n", 1)[0].split(" ", 2)
        if not words[0].isdigit():
            return None
        return cls(words[0], *(w.strip() or None for w in words[1:]))

    def __str__(self) -> str:
        said = f"pid {self.pid}"
        if self.since:
            said += f", since {self.since}"
        return said + (f": {self.command}" if self.command else "")


def record(command: str) -> bytes:
    """The holder's line this process writes once it has the lock."""
    since = time.strftime(SINCE_FORMAT, time.gmtime())
    line = f"{os.getpid()} {since} {one_line(command)}"
    return line.encode()[: MAX_RECORD - 1] + b"\n"


def one_line(command: str) -> str:
    return " ".join(command.split())


# The arguments `tune` was started with: a fact of the process, as its pid is, which the CLI's
# entry point records (tests and embedding tools call it with argv of their own).
_invoked: list[str] | None = None


def invoked(args: list[str]) -> None:
    global _invoked
    _invoked = list(args)


def this_command() -> str:
    """This process's command line, as the operator typed it."""
    args = sys.argv[1:] if _invoked is None else _invoked
    return one_line("tune " + shlex.join(args))


def held_message(path: str, holder: Holder | None) -> str:
    """The one sentence for a lock still held after `WAIT` seconds."""
    who = str(holder) if holder is not None else "its holder wrote no record"
    return f"another tune run holds {path} ({who}); gave up after {WAIT} s."
