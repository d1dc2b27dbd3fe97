"""Hosts: where observation reads from, and what every kind of host can do.

The `Host` interface serves this machine, a snapshot directory, a snapshot archive and an
SSH host alike; knobs never see which. What only reads (plan, check, audit, report, verify)
takes a `ReadableHost`, which has no write method: "only apply and rollback write" is then
something mypy checks.
"""

from __future__ import annotations

import contextlib
import errno
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.errors import HostError, NoSpace, Refused, reason
from ..core.files import Files, Request
from .trust import Owned

if TYPE_CHECKING:
    from .targets import Identity

# What a full device (or a spent quota) makes a write fail with.
FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def write_error(path: str, doing: str, exc: OSError) -> HostError:
    """The sentence for a write that failed; a full device is its own error (and exit code)."""
    if exc.errno in FULL:
        return NoSpace(f"{path}: no space left on the device to {doing}")
    return HostError(f"{path}: cannot {doing} ({reason(exc)}).")


# The errnos with which the kernel rejects a value or a knob outright; 524 is the kernel's
# internal ENOTSUPP, which leaks to user space from a few handlers (proc_nmi_watchdog).
ENOTSUPP = 524
REFUSING_ERRNOS = frozenset({errno.EINVAL, errno.EOPNOTSUPP, ENOTSUPP})


def link_at_attribute(path: str) -> HostError:
    """The refusal of a write to a kernel attribute whose own name is a link: sysfs and procfs
    reach attributes through linked directories (/sys/block/sda), never as a link, so one there
    is a snapshot's or another user's, and a write through it would land on whatever it names."""
    return HostError(
        f"{path}: cannot open for writing (a symbolic link, which no kernel attribute is)."
    )


def refusal(path: str, value: str, code: int | None) -> HostError:
    """The error of a failed write(2) to a kernel attribute: `Refused` for the errnos that say
    the kernel rejected it, a plain `HostError` for anything else (EIO, EBUSY...), except EIO
    from an IRQ's affinity, which is the kernel saying user space may not move that IRQ."""
    from ..facts import irq  # only a refused write asks; a plan never does

    why = os.strerror(code) if code is not None else "write failed"
    message = f"{path}: the kernel refused {value!r} ({why})."
    refused = code in REFUSING_ERRNOS or (code == errno.EIO and irq.refuses_with_eio(path))
    return Refused(message) if refused else HostError(message)


@dataclass(frozen=True)
class Completed:
    """How a command ended."""

    returncode: int
    stdout: str = ""
    stderr: str = ""

    @property
    def said(self) -> str:
        """What a message quotes of it: the first line of stderr, else of stdout, else the
        exit status."""
        lines = (self.stderr or self.stdout).strip().splitlines()
        return lines[0] if lines else f"exit status {self.returncode}"


class ReadableHost(ABC):
    """A machine as plan, check, audit and report see it: the local root, a snapshot, or SSH.
    Nothing here changes the host."""

    name: str

    @abstractmethod
    def fetch(self, request: Request) -> Files:
        """Read everything in `request` in one batch."""

    def describe(self) -> str:
        return self.name

    def _refuse(self) -> HostError:
        return HostError(f"{self.describe()} cannot be written; apply to a directory or a host.")

    def read_file(self, path: str) -> bytes | None:
        """A whole file of tune's own state (journals), up to one byte past MAX_STATE_BYTES;
        None when absent."""
        raise self._refuse()

    def owned(self, paths: Sequence[str]) -> tuple[int, dict[str, Owned | None]]:
        """The uid tune runs as on the host, and who owns each of `paths` and its mode (a link
        not followed; None when absent): what `trust.check` judges."""
        raise self._refuse()

    def owned_and_read(
        self, paths: Sequence[str], path: str
    ) -> tuple[int, dict[str, Owned | None], bytes | None]:
        """`owned(paths)` and `read_file(path)` together: a host reached by round trips
        answers both in one (`ShellHost`)."""
        caller, found = self.owned(paths)
        return caller, found, self.read_file(path)

    def file_size(self, path: str) -> int | None:
        """The size in bytes of the file at `path` (links followed), for a message about a
        file too large to read; None when it cannot be known."""
        return None

    def value_unlike(
        self, path: str, before: str | None, within: float, interval: float
    ) -> str | None:
        """A one-value file's value (as `Files.value`), once it differs from `before` or
        `within` seconds on, whichever comes first, read every `interval` seconds. Here: read
        once, at once (the caller waits between reads); a host reached by round trips waits on
        the host's side instead (`ShellHost`), one round trip for the whole wait."""
        return self.fetch(Request.of(path)).value(path)

    def identity(self) -> Identity | None:
        """Which machine this is, for a rollout to pin; None for a host reached by no
        connection (this machine, a snapshot)."""
        return None

    def pin(self, identity: Identity) -> None:  # noqa: B027 - only hosts that connect check
        """From now on, refuse to reach any machine but `identity` (its host key once known)."""

    def close(self) -> None:  # noqa: B027 - a hook: only hosts that connect hold anything
        """Release what reading the host holds open (an SSH connection); files hold nothing."""


class Host(ReadableHost):
    """A machine to observe and (for apply and rollback only) to write.

    The write side is a handful of primitives that `apply.steps` describes as data; a host
    that cannot be written (an archive) keeps the defaults below, which refuse.
    """

    def check_privileges(self) -> None:
        """Raise unless this process may change the host's settings."""
        raise self._refuse()

    def set_attr(self, path: str, value: str) -> None:
        """One write of `value` to an existing kernel attribute file."""
        raise self._refuse()

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Replace a file atomically and durably, creating its directory."""
        raise self._refuse()

    def delete_file(self, path: str) -> None:
        raise self._refuse()

    def missing_dirs(self, path: str) -> list[str]:
        """The directories above `path` that do not exist, deepest first: what a `put_file`
        of it would create."""
        raise self._refuse()

    def remove_dir(self, path: str) -> None:
        """Remove a directory tune created, only while it is empty; gone already is fine."""
        raise self._refuse()

    def append(self, path: str, data: bytes, *, sync: bool = True) -> None:
        """Append to a file created with mode 0600; `sync` fsyncs before returning."""
        raise self._refuse()

    def run(self, argv: Sequence[str]) -> Completed:
        raise self._refuse()

    # What apply asks before it writes (`apply.preflight`).
    def has_command(self, name: str) -> bool:
        return False

    def defers(self, argv: Sequence[str]) -> bool:
        """Whether a boot tool's `argv` is recorded in the journal rather than run here."""
        return False

    def writable(self, path: str) -> bool:
        """Whether a write to `path` (or, for a path not yet there, to its nearest existing
        directory) would be accepted."""
        return False

    def lock(self, path: str) -> contextlib.AbstractContextManager[None]:
        """Hold an exclusive lock on `path` for the block; `LockHeld` when another has it.
        Its directory is made as `private_dir` makes one, and refused like tune's state."""
        raise self._refuse()

    def private_dir(self, path: str) -> None:
        """Create the directory `path` and its missing parents mode 0700, whatever the umask."""
        raise self._refuse()
