"""Whose files tune acts on: its own state, its lock, a saved plan.

tune runs as root and does what a journal or a saved plan says (write a file, run an argv), so
such a file is only as trustworthy as whoever could have written it. The rule, the same on a
live host, inside a snapshot (`--root`) and over SSH: the file and the directory holding it are
owned by the caller or by root, and nobody else can write to them (no group or other write
bit, sticky or not: `/tmp` and `/run/lock` are shared with every user). A snapshot is made by
whoever copied it, so a snapshot's state is trusted when that is the caller (or root), as on a
live host. Directories tune creates for its state are made 0700 whatever the umask.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import HostError

ROOT = 0
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UntrustedState(HostError):
    """A file tune would act on that someone other than the caller or root could have
    written: refused, whatever it says."""


@dataclass(frozen=True)
class Owned:
    """Who owns a path and who may write it, as `lstat` says (a link is not followed)."""

    uid: int
    mode: int

    @classmethod
    def of(cls, info: os.stat_result) -> Owned:
        return cls(info.st_uid, info.st_mode)


def problem(owned: Owned, caller: int, *, directory: bool) -> str | None:
    """Why a path owned as `owned` cannot be trusted by `caller` (a uid), or None."""
    wanted = "a directory" if directory else "a regular file"
    if stat.S_ISLNK(owned.mode):
        return f"it is a symbolic link, not {wanted}"
    if not (stat.S_ISDIR if directory else stat.S_ISREG)(owned.mode):
        return f"it is not {wanted}"
    if owned.uid not in (ROOT, caller):
        return f"it is owned by uid {owned.uid}, not by root or by you (uid {caller})"
    if owned.mode & OTHERS_WRITE:
        return f"other users can write to it (mode {stat.S_IMODE(owned.mode):04o})"
    return None


def above(info: os.stat_result) -> Owned:
    """A directory above the one that holds a file tune reads, as the trust rule sees it: a
    sticky directory shared with every user (/tmp) lets nobody but an entry's owner rename or
    delete that entry, so the path through it, checked one directory further down, cannot be
    swapped. The directory holding the file gets no such allowance: there a new name is
    anyone's to plant."""
    mode = info.st_mode & ~OTHERS_WRITE if info.st_mode & stat.S_ISVTX else info.st_mode
    return Owned(info.st_uid, mode)


def check(caller: int, owned: Mapping[str, Owned | None], files: Collection[str] = ()) -> None:
    """`UntrustedState`, with one sentence that says why, for the first path of `owned` that
    `caller` cannot trust (paths in `files` are regular files, the others directories); an
    absent path (None) is nobody's yet."""
    for path, info in owned.items():
        why = None if info is None else problem(info, caller, directory=path not in files)
        if why is not None:
            raise UntrustedState(
                f"refusing to use {path}: {why}; tune only acts on state that root or you "
                "wrote and nobody else can change."
            )


def private_directory(local: Path) -> None:
    """Make `local` and any missing directory above it mode 0700, whatever the umask: tune's
    state is nobody else's to read or plant."""
    make_directories(local, 0o700)


def make_directories(local: Path, mode: int) -> None:
    """Make `local` and any missing directory above it `mode`, whatever the umask: under
    umask 000 a plain mkdir made /etc/sysctl.d (or /etc/tune, whose irqbalance policy root
    runs) writable by everyone."""
    missing = []
    for directory in (local, *local.parents):
        if os.path.lexists(directory):
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            continue  # made at the same moment by another run: checked like any other
        # The umask may have taken bits off. Through the directory made, never its name: in a
        # directory another user can write, the name may be a link by now.
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
