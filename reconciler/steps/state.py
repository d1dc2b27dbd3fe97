"""Where tune keeps its state on a host (inside `--root` for a snapshot), defined once: the
stored profile, the run journals, the lock. Light on purpose: `tune plan` and `tune check` read
these paths without loading the journal's record types until a journal is there to read."""

from __future__ import annotations

import posixpath

from ..core.bounded import size_text
from ..core.errors import JournalError
from ..core.files import MAX_STATE_BYTES, Files, Request

STATE = "/var/lib/tune"
RUNS = f"{STATE}/runs"
PROFILE = f"{STATE}/profile.yaml"
# In a directory only root can write: in /run/lock (1777 on Debian) any user could plant a link
# there, or hold the lock with a pid of their choosing.
LOCK = "/run/tune/tune.lock"


RUN_SUFFIX = ".jsonl"


def run_path(run_id: str) -> str:
    return f"{RUNS}/{run_id}{RUN_SUFFIX}"


def skipped_line(knob: str, refused: str) -> str:
    return f"{knob} is not supported on this host, skipped (optional): {refused}"


def within_limit(path: str, data: bytes) -> bytes:
    """A journal's bytes as read (whole reads stop one byte past MAX_STATE_BYTES), refused when
    it is larger than tune reads."""
    if len(data) > MAX_STATE_BYTES:
        raise JournalError(
            f"{path}: larger than {size_text(MAX_STATE_BYTES)}, the most tune reads of a run "
            "journal; it is not one tune wrote: move it out of the way to go on."
        )
    return data


def runs_request(newest: int = 0) -> Request:
    """The names of the run journals, and the contents of the `newest` ones; the others are
    fetched newest first, as needed."""
    journals = [(f"{RUNS}/*{RUN_SUFFIX}", newest)] if newest else []
    return Request.of(listings=[RUNS], newest=journals)


def run_paths(files: Files) -> list[str]:
    """Journal paths from the listing, newest first (run ids sort by time)."""
    paths = [
        p for p in files.listing(RUNS) if posixpath.dirname(p) == RUNS and p.endswith(RUN_SUFFIX)
    ]
    return sorted(paths, key=posixpath.basename, reverse=True)
