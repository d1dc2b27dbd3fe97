"""A file on this machine replaced whole (`-o FILE`, metrics, a suggested profile): a reader
sees the old file or the new, never a part. Or a record appended to one (`append_file`, the
rollout journal's transitions): whole, or not at all.

The text goes to a temporary file beside the target, under a leading dot and a `.tmp` suffix
(node_exporter's textfile collector skips it), is fsynced, then renamed over the target (a
rename is atomic within a file system), and the directory is fsynced so the rename survives a
crash.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import OutputError
from .base import FULL, write_error
from .beneath import append_whole, open_regular


def replace_file(
    target: str | os.PathLike[str],
    text: str,
    doing: str,
    pause: Callable[[str], None] | None = None,
    *,
    mode: int | None = None,
) -> None:
    """`target` replaced by `text`, with `mode` (None: what a new file gets under the umask);
    `doing` names the write in the error sentence ("write metrics"). `pause(stage)` runs at
    each stage ("opened", "written", "synced"): tests kill the process there to prove the old
    file survives."""
    path = Path(target)
    directory = path.parent
    step = pause or (lambda stage: None)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise _error(path, doing, exc) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            step("opened")
            handle.write(text)
            handle.flush()
            step("written")
            os.fchmod(handle.fileno(), _umasked() if mode is None else mode)
            os.fsync(handle.fileno())
        step("synced")
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise _error(path, doing, exc) from exc
    _fsync_directory(directory)


def append_file(target: str | os.PathLike[str], text: str, doing: str) -> None:
    """`text` appended to the existing file `target`, fsynced, whole or not at all (one
    record: the file stays the size it was when the write fails); `doing` as `replace_file`'s."""
    path = Path(target)
    try:
        fd = open_regular(str(path), os.O_WRONLY | os.O_APPEND)
        try:
            append_whole(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise _error(path, doing, exc) from exc


def _umasked() -> int:
    """0666 less the umask (mkstemp makes 0600 whatever it is): reading the umask sets it."""
    umask = os.umask(0o077)
    os.umask(umask)
    return 0o666 & ~umask


def _error(path: Path, doing: str, exc: OSError) -> Exception:
    """A full device is its own error (and exit code); anything else, one sentence."""
    if exc.errno in FULL:
        return write_error(str(path), doing, exc)
    return OutputError(f"{path}: cannot {doing} ({exc.strerror or exc}).")


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
