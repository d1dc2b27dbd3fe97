"""Where tune keeps what it may compute again (validated profiles):
the user's cache directory, trusted only when it is this user's alone."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def directory() -> Path | None:
    """tune's cache directory, None when turned off (`TUNE_CACHE_DIR=`)."""
    configured = os.environ.get("TUNE_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tune"


def trusted(path: Path) -> bool:
    """Owned by this user and writable by nobody else: a file here is one we wrote."""
    try:
        info = path.lstat()
    except OSError:
        return False
    mine = info.st_uid == os.geteuid()
    return mine and not stat.S_ISLNK(info.st_mode) and not info.st_mode & 0o022
