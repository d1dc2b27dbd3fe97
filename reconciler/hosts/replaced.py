"""A file on this machine that tune writes for the operator (`-o FILE`, `--save`, metrics, a
suggested profile, a snapshot archive), replaced whole: a reader sees the old file or the new,
never a part. Or a record appended to one (`append_file`, the rollout journal's transitions):
whole, or not at all.

The bytes go to a temporary file beside the target, under a leading dot and a `.tmp` suffix
(node_exporter's textfile collector skips it), are fsynced, then renamed over the target (a
rename is atomic within a file system), and the directory is fsynced so the rename survives a
crash.

Only a regular file (or nothing) is replaced that way. A rename puts a regular file in place of
whatever had the name, so `-o /dev/null` run as root once left the machine without its null
device (and sshd, which opens it, without logins): a character device or a FIFO, and a link
to one (`/dev/stdout` leads to a terminal or a pipe), are written through instead; a link to a
regular file has that file replaced and stays a link. A link is followed only when root or the
caller made it (fs.protected_symlinks's rule): another user's link could lead root's write to
any device. A directory, a block device or a socket is refused.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NamedTuple

from ..core.bounded import kind_of
from ..core.errors import OutputError, reason
from .base import FULL, write_error
from .beneath import append_whole, open_regular

ROOT = 0
MAX_LINKS = 40  # the kernel's own limit on links followed in one lookup (ELOOP past it)
Produce = Callable[[BinaryIO], object]  # writes the file's bytes to the open handle it is given


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
    file survives. For tune's own files (a rollout journal); what the operator named goes
    through `write_output`."""
    _replace(Path(target), _text(text), doing, pause, mode)


def write_output(
    target: str | os.PathLike[str],
    content: str | Produce,
    doing: str,
    pause: Callable[[str], None] | None = None,
    *,
    mode: int | None = None,
) -> None:
    """`content` (text, or a function that writes bytes to a handle) in the file the operator
    named: a regular file (or a new one) replaced whole as `replace_file` does, a character
    device or a FIFO written through (see the module's docstring); OutputError in a sentence
    for anything else."""
    path = Path(target)
    produce = _text(content) if isinstance(content, str) else content
    through, where, seen = _destination(path, doing)
    if not through:
        _replace(where, produce, doing, pause, mode)
        return
    # No O_NONBLOCK: a FIFO the operator named waits for its reader, as a shell's `>` does. A
    # name that was no link is opened as no link: whoever owns the directory could otherwise
    # swap the FIFO they showed for a link to any device between the look and the open.
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC
    if not seen.linked:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(where, flags)
    except OSError as exc:
        raise _error(path, doing, exc) from exc
    try:
        opened = os.fstat(fd)
        if not (_written_through(opened.st_mode) and seen.same(opened)):
            raise OutputError(f"{path}: cannot {doing} (it changed while it was opened).")
        with os.fdopen(fd, "wb", closefd=False) as handle:
            produce(handle)
    except OSError as exc:
        raise _error(path, doing, exc) from exc
    finally:
        os.close(fd)


def _text(text: str) -> Produce:
    return lambda handle: handle.write(text.encode())


def _written_through(mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


class _Seen(NamedTuple):
    """What the name led to when it was looked at: whether it was a link, and the file (its
    device, inode and, for a device, which one) that the write must reach."""

    linked: bool
    identity: tuple[int, int, int] | None

    def same(self, opened: os.stat_result) -> bool:
        return self.identity == (opened.st_dev, opened.st_ino, opened.st_rdev)


def _destination(path: Path, doing: str) -> tuple[bool, Path, _Seen]:
    """Whether `path` is written through (a device or a FIFO, or a link to one), the path to
    write (`path` itself, or the regular file a link at `path` leads to) and what was seen."""
    _links_of_root_or_caller(path, doing)
    try:
        info = os.lstat(path)
        final = os.stat(path)
    except FileNotFoundError:
        # nothing there, or a link to nothing: a new file in its place
        return False, path, _Seen(False, None)
    except OSError as exc:
        raise _error(path, doing, exc) from exc
    seen = _Seen(stat.S_ISLNK(info.st_mode), (final.st_dev, final.st_ino, final.st_rdev))
    if _written_through(final.st_mode):
        return True, path, seen
    if not stat.S_ISREG(final.st_mode):
        raise OutputError(f"{path}: cannot {doing} (it is {kind_of(final.st_mode)}).")
    if not stat.S_ISLNK(info.st_mode):
        return False, path, seen
    resolved = Path(os.path.realpath(path))
    try:
        same = os.path.samestat(final, os.lstat(resolved))
    except OSError:
        same = False
    if not same:  # a link of /proc that names no path (a deleted file's "(deleted)")
        raise OutputError(f"{path}: cannot {doing} (cannot tell which file the link leads to).")
    return False, resolved, seen


def _links_of_root_or_caller(path: Path, doing: str) -> None:
    """OutputError unless every link on the way from `path` is root's or the caller's."""
    hop = path
    for _ in range(MAX_LINKS):
        try:
            info = os.lstat(hop)
        except OSError:
            return  # nothing there, or a name only the kernel follows (/proc/self/fd/1)
        if not stat.S_ISLNK(info.st_mode):
            return
        if info.st_uid not in (ROOT, os.geteuid()):
            raise OutputError(
                f"{path}: refusing to {doing} through the symbolic link {hop}: uid "
                f"{info.st_uid} owns it, not root or you (uid {os.geteuid()})."
            )
        hop = hop.parent / os.readlink(hop)


def _replace(
    path: Path,
    produce: Produce,
    doing: str,
    pause: Callable[[str], None] | None,
    mode: int | None,
) -> None:
    directory = path.parent
    step = pause or (lambda stage: None)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise _error(path, doing, exc) from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            step("opened")
            produce(handle)
            handle.flush()
            step("written")
            os.fchmod(handle.fileno(), _umasked() if mode is None else mode)
            os.fsync(handle.fileno())
        step("synced")
        os.replace(temp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        if isinstance(exc, OSError):
            raise _error(path, doing, exc) from exc
        raise
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
    return OutputError(f"{path}: cannot {doing} ({reason(exc)}).")


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
