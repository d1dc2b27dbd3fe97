"""Host paths as files on this machine: `/` itself, or a snapshot directory that must hold them.

A snapshot comes from another machine or a support ticket, so its links are data, not
directions: `Beneath` resolves every path a component at a time from the snapshot's root and
follows each link itself, the way the kernel would on the machine the snapshot came from. An
absolute target starts again at the snapshot's root (`/sys/class/net/eth0 -> /sys/devices/...`
stays in the snapshot), a relative one goes on from the link's directory, and a `..` that would
climb above the root is an error, never clamped: the source host resolved that link to
something the snapshot does not hold, so any file read instead would be a different one (and a
link planted to reach this machine's files, `../../../../etc/shadow`, is exactly such a link).
Python has no openat2(RESOLVE_IN_ROOT); an lstat per component is what the kernel does on a
lookup anyway, and reads, temporary files and the emulated kernel writes open the resolved path
with O_NOFOLLOW, so what was resolved is what is opened. A snapshot is files at rest: another
process swapping a directory for a link between the walk and the open is the threat of a shared
directory (the lock, the state directories), not of a snapshot.

`Rooted` is `/` itself: nothing there to escape, so the plain path, at no extra system call.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import glob
import os
import stat
from collections.abc import Iterator
from typing import NamedTuple

# The kernel's MAXSYMLINKS: more links than this on one lookup is ELOOP.
MAX_HOPS = 40
# Components one lookup may walk, links' included: a path of PATH_MAX bytes has fewer. The
# kernel walks 40 links of 4,000 characters each in C; here each component is an lstat, and
# targets of `d/../` repeated made one file of a snapshot cost 60,000 of them (every CPU of
# a 400-CPU snapshot: minutes of `tune plan`). No host's lookup comes near; past it, ELOOP.
MAX_STEPS = 4096
OUTSIDE = "a symbolic link in the snapshot points outside it"
NOT_REGULAR = "not a regular file"
# Bytes asked of one read(2). procfs refuses a sysctl read of 4 MiB or more outright (ENOMEM:
# the kernel would allocate the whole request first), so a file is never read in one call.
CHUNK = 1 << 16


def outside(link: str, target: str) -> OSError:
    """What a lookup through a link that leaves the snapshot raises: EXDEV, as openat2's
    RESOLVE_BENEATH does, with the sentence that says which link."""
    return OSError(errno.EXDEV, f"{OUTSIDE}: {link} -> {target}")


def _parts(path: str) -> tuple[str, ...]:
    """A host path's components, as a lookup walks them (`//` and `.` walk nowhere)."""
    parts = tuple(filter(None, path.split("/")))
    return tuple(p for p in parts if p != ".") if "." in parts else parts


def _magic(part: str) -> bool:
    return any(c in "*?[" for c in part)


def _error(code: int, text: str | None = None) -> OSError:
    return OSError(code, text or os.strerror(code))


def read_chunks(fd: int, limit: int | None) -> bytes:
    """At most `limit` bytes (all for None) from the open file `fd`, CHUNK at a time."""
    chunks = []
    wanted = -1 if limit is None else limit
    while wanted:
        chunk = os.read(fd, CHUNK if wanted < 0 else min(wanted, CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        wanted -= 0 if wanted < 0 else len(chunk)
    return b"".join(chunks)


class Found(NamedTuple):
    """Where a host path lies here, and the lstat of that place (None: nothing there)."""

    local: str
    stat: os.stat_result | None


class Rooted:
    """`/`: host paths are this machine's paths."""

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """A block of reads with nothing written in between (see `Beneath.batch`)."""
        yield

    def local(self, path: str, *, follow: bool = True) -> str:
        """Where `path` lies here; with `follow=False` a link at its last component is the
        link itself (what an unlink or a rename replaces)."""
        return path

    def lexists(self, path: str) -> bool:
        return os.path.lexists(path)

    def isfile(self, path: str) -> bool:
        return os.path.isfile(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def glob(self, pattern: str) -> list[str]:
        return glob.glob(pattern)

    def read(self, path: str, limit: int | None) -> bytes:
        """At most `limit` bytes of a file (all for None); OSError as open(2) fails, and
        IsADirectoryError for a directory."""
        with open(path, "rb", buffering=0) as handle:
            return read_chunks(handle.fileno(), limit)

    def walk(self, directory: str) -> list[str]:
        """Every file below `directory`, as `os.walk` lists them (links to directories are not
        entered)."""
        return [os.path.join(base, f) for base, _dirs, names in os.walk(directory) for f in names]


class Beneath(Rooted):
    """A snapshot directory: every lookup resolved beneath `root`."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.realpath(root)
        # Inside `batch`: each directory of a host path, by its components, as resolved; and
        # each path looked up, by the path and whether its last link was followed.
        self._dirs: dict[tuple[str, ...], list[str]] | None = None
        self._found: dict[tuple[str, bool], Found] = {}
        # And each directory listed, by its host path: globs that share directories (every
        # CPU's cpuidle states, for `name` and for `disable`) list each once.
        self._listed: dict[str, list[tuple[str, bool | None]]] = {}

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Remember resolved directories for the block: a fetch looks up a thousand files in
        a few dozen directories, and nothing writes meanwhile."""
        self._dirs, self._found, self._listed = {}, {}, {}
        try:
            yield
        finally:
            self._dirs, self._found, self._listed = None, {}, {}

    def _here(self, parts: list[str]) -> str:
        return self.root + "/" + "/".join(parts) if parts else self.root

    def find(self, path: str, *, follow: bool = True) -> Found:
        """Resolve `path` a component at a time (see the module). OSError: EXDEV for a link
        out of the snapshot, ELOOP past MAX_HOPS links."""
        if self._dirs is None:
            return self._find(path, follow)
        # A glob's match is looked up, then read: in a batch, one lookup does for both.
        found = self._found.get((path, follow))
        if found is None:
            found = self._found[(path, follow)] = self._find(path, follow)
            if not follow and not (found.stat is not None and stat.S_ISLNK(found.stat.st_mode)):
                self._found[(path, True)] = found  # no link at its end: followed, the same
        return found

    def _find(self, path: str, follow: bool) -> Found:
        parts = _parts(path)
        known = self._dirs
        if known is not None and len(parts) > 1 and parts[-1] != "..":
            # The common case in a batch: a file in a directory resolved before, no link.
            base = known.get(parts[:-1])
            if base is not None:
                local = [*base, parts[-1]]
                here = self._here(local)
                try:
                    found = os.lstat(here)
                except OSError:
                    return Found(here, None)
                if stat.S_ISDIR(found.st_mode):
                    known[parts] = local
                if not (follow and stat.S_ISLNK(found.st_mode)):
                    return Found(here, found)
        done: list[str] = []
        start = 0
        if known is not None:
            # From the deepest directory of the path resolved before in this batch.
            start = next((i for i in range(len(parts) - 1, 0, -1) if parts[:i] in known), 0)
            done = list(known.get(parts[:start], []))
        todo = list(reversed(parts[start:]))
        # How many of the path's own components are still to resolve: when the stack is back
        # to them, the components before are resolved to `done` (a directory to remember).
        left = len(todo)
        hops = steps = 0
        link = path, path  # the last link followed, and its target: what a `..` climbed from
        while todo:
            steps += 1
            if steps > MAX_STEPS:
                raise _error(errno.ELOOP)
            if known is not None and len(todo) == left:
                known[parts[: len(parts) - left]] = list(done)
            name = todo.pop()
            left = min(left, len(todo))
            if name == "..":
                if not done:
                    raise outside(*link)
                done.pop()
                continue
            here = self._here([*done, name])
            try:
                found = os.lstat(here)
            except OSError:
                # Nothing there (or not a directory): nothing below it exists either, and an
                # open or an lstat of the rest fails as the kernel's lookup would. Past a
                # missing directory, `..` is the kernel's ENOENT too, and no mkdir of such a
                # path may climb out.
                if ".." in todo:
                    raise _error(errno.ENOENT) from None
                return Found(self._here([*done, name, *reversed(todo)]), None)
            if stat.S_ISLNK(found.st_mode) and (todo or follow):
                hops += 1
                if hops > MAX_HOPS:
                    raise _error(errno.ELOOP)
                target = os.readlink(here)
                link = "/" + "/".join([*done, name]), target
                todo.extend(p for p in reversed(target.split("/")) if p and p != ".")
                if target.startswith("/"):
                    done = []
                continue
            done.append(name)
            if not todo:
                if known is not None and stat.S_ISDIR(found.st_mode):
                    known[parts] = done  # the files in it are looked up next, one lstat each
                return Found(here, found)
        return Found(self.root, os.lstat(self.root))

    def local(self, path: str, *, follow: bool = True) -> str:
        return self.find(path, follow=follow).local

    def lexists(self, path: str) -> bool:
        """A name at `path` (a dangling link too). A path through a link out of the snapshot
        is there, to be read as an error that says so."""
        try:
            return self.find(path, follow=False).stat is not None
        except OSError as exc:
            return exc.errno == errno.EXDEV

    def _mode(self, path: str) -> int | None:
        try:
            found = self.find(path).stat
        except OSError:
            return None
        return None if found is None else found.st_mode

    def isfile(self, path: str) -> bool:
        mode = self._mode(path)
        return mode is not None and stat.S_ISREG(mode)

    def isdir(self, path: str) -> bool:
        mode = self._mode(path)
        return mode is not None and stat.S_ISDIR(mode)

    def glob(self, pattern: str) -> list[str]:
        """Shell-glob matches of `pattern` (host paths), each directory listed where the
        snapshot's links lead, not where this machine's do. As `glob.glob`: a name starting
        with a dot only for a component that does, directories only before the last one,
        literal components looked up last."""
        parts = [p for p in pattern.split("/") if p]
        bases = [""]
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            if not _magic(part):
                bases = [f"{base}/{part}" for base in bases]
                continue
            matched = []
            for base in bases:
                entries = self._entries(base or "/")
                # In a batch, a directory the listing found (a directory, not a link) is
                # resolved as a lookup of it would resolve it: the files in it are found
                # with one lstat each.
                known, within = self._dirs, None
                if known is not None:
                    above = _parts(base)
                    within = known.get(above)
                for name, directory in entries:
                    if (name.startswith(".") and not part.startswith(".")) or not (
                        fnmatch.fnmatchcase(name, part)
                    ):
                        continue
                    path = f"{base}/{name}"
                    if last or (self.isdir(path) if directory is None else directory):
                        matched.append(path)
                        if directory and within is not None and known is not None:
                            known[(*above, name)] = [*within, name]
            bases = matched
        # A listed name is there; a literal last component is looked up.
        return bases if parts and _magic(parts[-1]) else [p for p in bases if self.lexists(p)]

    def _entries(self, directory: str) -> list[tuple[str, bool | None]]:
        """The names in a directory, each with whether it is one (None for a link: where it
        leads is for `find` to say)."""
        if self._dirs is None:
            return self._list(directory)
        listed = self._listed.get(directory)
        if listed is None:
            listed = self._listed[directory] = self._list(directory)
        return listed

    def _list(self, directory: str) -> list[tuple[str, bool | None]]:
        try:
            with os.scandir(self.find(directory).local) as entries:
                return [
                    (e.name, None if e.is_symlink() else e.is_dir(follow_symlinks=False))
                    for e in entries
                ]
        except OSError:
            return []

    def read(self, path: str, limit: int | None) -> bytes:
        """As `Rooted.read`, and only a regular file: a FIFO would block the read forever, a
        device could act on being opened, so neither is opened at all."""
        local, found = self.find(path)
        if found is not None and stat.S_ISDIR(found.st_mode):
            raise _error(errno.EISDIR)
        if found is not None and not stat.S_ISREG(found.st_mode):
            raise _error(errno.EINVAL, NOT_REGULAR)
        fd = os.open(local, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _error(errno.EINVAL, NOT_REGULAR)
            return read_chunks(fd, limit)
        finally:
            os.close(fd)

    def walk(self, directory: str) -> list[str]:
        try:
            top = self.find(directory).local
        except OSError:
            return []
        return [directory.rstrip("/") + "/" + os.path.relpath(f, top) for f in super().walk(top)]


def write_all(fd: int, data: bytes) -> None:
    """Every byte of `data`, or OSError: write(2) may write less than it was given (a device
    that fills up midway, RLIMIT_FSIZE), and the rest must not be dropped in silence."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:  # a regular file says why it takes nothing; be safe if one does not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def append_whole(fd: int, data: bytes, sync: bool = True) -> None:
    """`data` appended whole and (with `sync`) on disk, or the file cut back to where it was
    and OSError: a reader finds whole records only. The caller is the file's only writer (it
    holds the lock)."""
    start = os.fstat(fd).st_size
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise


def open_regular(local: str, flags: int, mode: int = 0o644) -> int:
    """A descriptor of the regular file at `local` (created if `flags` has O_CREAT and nothing
    is there), opened with `flags`; OSError EINVAL for anything else. A snapshot is extracted
    by root, so it holds the FIFOs and device nodes its archive had: a FIFO would block the
    open for ever, and a device would take the bytes (a disk's, for a block device's numbers),
    so neither is opened at all. The lstat before the open is enough for files at rest (see
    `reconciler.hosts.beneath`); the fstat after it catches a FIFO put there in between."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(local).st_mode):
            raise OSError(errno.EINVAL, NOT_REGULAR)
    fd = os.open(local, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, NOT_REGULAR)
    return fd
