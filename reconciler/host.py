"""Hosts: where observation reads from.

Every knob kind says which files it needs as a `Request` (glob patterns and directories whose
names it lists); a host answers the whole request at once with `Files`. That single batch is what
lets an SSH host later observe in one round trip, and what makes every knob testable against a
snapshot directory: knobs parse `Files`, never the host.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import functools
import importlib
import io
import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .beneath import NOT_REGULAR, Beneath, Rooted
from .bounded import size_text
from .errors import HostError, LockHeld, NoSpace, Refused
from .steps import temporary as temporary_of
from .trust import Owned, check, private_directory

# sysfs and procfs files report 4096 bytes or 0 whatever they hold; cap reads so a profile glob
# that matches something large (a log, a firmware blob) cannot balloon the observation.
MAX_FILE_BYTES = 1 << 16
# tune's own state read whole (run journals, the stored profile): far above any journal tune
# writes (a 128-CPU host's run is a few MB), and still a bound on what a file planted or grown
# there (a sparse file of 20 GiB) can make tune hold. Whole reads take one byte more, which is
# how a reader tells a file past the limit from one at it.
MAX_STATE_BYTES = 64 << 20
GLOB_CHARS = frozenset("*?[")

View = TypeVar("View")


# What a full device (or a spent quota) makes a write fail with.
FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def write_all(fd: int, data: bytes) -> None:
    """Every byte of `data`, or OSError: write(2) may write less than it was given (a device
    that fills up midway, RLIMIT_FSIZE), and the rest must not be dropped in silence."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:  # a regular file says why it takes nothing; be safe if one does not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def open_regular(local: str, flags: int, mode: int = 0o644) -> int:
    """A descriptor of the regular file at `local` (created if `flags` has O_CREAT and nothing
    is there), opened with `flags`; OSError EINVAL for anything else. A snapshot is extracted
    by root, so it holds the FIFOs and device nodes its archive had: a FIFO would block the
    open for ever, and a device would take the bytes (a disk's, for a block device's numbers),
    so neither is opened at all. The lstat before the open is enough for files at rest (see
    `reconciler.beneath`); the fstat after it catches a FIFO put there in between."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(local).st_mode):
            raise OSError(errno.EINVAL, NOT_REGULAR)
    fd = os.open(local, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, NOT_REGULAR)
    return fd


def write_error(path: str, doing: str, exc: OSError) -> HostError:
    """The sentence for a write that failed; a full device is its own error (and exit code)."""
    if exc.errno in FULL:
        return NoSpace(f"{path}: no space left on the device to {doing}")
    return HostError(f"{path}: cannot {doing} ({exc.strerror or exc}).")


def is_glob(pattern: str) -> bool:
    return not GLOB_CHARS.isdisjoint(pattern)


@dataclass(frozen=True)
class Request:
    """Absolute paths or glob patterns to read, and directories whose file names to list."""

    patterns: frozenset[str] = frozenset()
    listings: frozenset[str] = frozenset()
    # Patterns read in full, past MAX_FILE_BYTES: tune's own state (a run journal of 128 CPUs'
    # steps outgrows the cap meant for kernel files, and a cut journal loses its end record).
    whole: frozenset[str] = frozenset()
    # (pattern, n): only the last n matches in name order, read whole (the newest run journals:
    # run ids sort by time), so a check reads them in the same batch as the observation.
    newest: frozenset[tuple[str, int]] = frozenset()
    # Patterns of device nodes (`/dev/nvidia*`) that are listed, never opened: opening an NVIDIA
    # node initialises the GPU, and what a container needs is only which nodes exist.
    nodes: frozenset[str] = frozenset()
    # (directory, path): list the directory only when there is no file at the path (nothing,
    # or a directory: a sysctl key one level short). The names to suggest for a path a profile
    # got wrong, without listing thousands of them (/proc/sys on a host with many network
    # interfaces) on every read.
    listings_if_no_file: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def of(
        cls,
        *patterns: str,
        listings: Iterable[str] = (),
        whole: Iterable[str] = (),
        newest: Iterable[tuple[str, int]] = (),
        nodes: Iterable[str] = (),
        listings_if_no_file: Iterable[tuple[str, str]] = (),
    ) -> Request:
        return cls(
            frozenset(patterns),
            frozenset(listings),
            frozenset(whole),
            frozenset(newest),
            frozenset(nodes),
            frozenset(listings_if_no_file),
        )

    def __or__(self, other: Request) -> Request:
        return Request(
            self.patterns | other.patterns,
            self.listings | other.listings,
            self.whole | other.whole,
            self.newest | other.newest,
            self.nodes | other.nodes,
            self.listings_if_no_file | other.listings_if_no_file,
        )

    def conditions(self) -> dict[str, tuple[str, ...]]:
        """Each directory to list only when a path is not a file, with those paths, in order; a
        directory also listed unconditionally is not one of them."""
        found: dict[str, list[str]] = {}
        for directory, path in sorted(self.listings_if_no_file):
            if directory not in self.listings:
                found.setdefault(directory, []).append(path)
        return {directory: tuple(paths) for directory, paths in found.items()}

    def listed(self, is_file: Callable[[str], bool]) -> list[str]:
        """The directories to list, given which paths are files (symlinks followed)."""
        wanted = set(self.listings)
        wanted.update(d for d, paths in self.conditions().items() if not all(map(is_file, paths)))
        return sorted(wanted)

    def reads(self) -> list[tuple[str, int | None, int | None]]:
        """Every pattern to read, in a fixed order: (pattern, how many of its last matches to
        keep or None for all, the byte cap or None for whole)."""
        return [
            *(
                (p, None, None if p in self.whole else MAX_FILE_BYTES)
                for p in sorted(self.patterns | self.whole)
            ),
            *((p, n, None) for p, n in sorted(self.newest)),
        ]


def last(found: list[str], keep: int | None) -> list[str]:
    """The last `keep` of the sorted matches (all of them for None)."""
    return found if keep is None else found[max(0, len(found) - keep) :]


@dataclass
class Files:
    """The answer to a `Request`: plain data, no host access."""

    contents: dict[str, bytes] = field(default_factory=dict)
    matches: dict[str, tuple[str, ...]] = field(default_factory=dict)
    listings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Paths that exist but could not be read (EACCES, EIO), with the reason.
    errors: dict[str, str] = field(default_factory=dict)
    # Node pattern -> the paths it matches, a directory with a trailing "/" (`/dev/nvidia-caps/`).
    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _views: dict[Callable[[Files], Any], Any] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def view(self, make: Callable[[Files], View]) -> View:
        """`make(self)`, built once per answer: a plan asks for the same parsed view (every
        CPU's idle states) from compare, persist and step, and over a fleet it adds up. Views
        are shared: callers read them, never change them."""
        if make not in self._views:
            self._views[make] = make(self)
        result: View = self._views[make]
        return result

    def read(self, path: str) -> bytes | None:
        return self.contents.get(path)

    def text(self, path: str) -> str | None:
        data = self.contents.get(path)
        return None if data is None else data.decode("utf-8", "replace")

    def value(self, path: str) -> str | None:
        """A one-value kernel file without its trailing newline."""
        text = self.text(path)
        return None if text is None else text.rstrip("\n")

    def glob(self, pattern: str) -> tuple[str, ...]:
        if pattern in self.matches:
            return self.matches[pattern]
        if not is_glob(pattern):
            return (pattern,) if pattern in self.contents else ()
        return tuple(sorted(p for p in self.contents if path_matches(pattern, p)))

    def listing(self, directory: str) -> tuple[str, ...]:
        return self.listings.get(directory, ())

    def node_paths(self, pattern: str) -> tuple[str, ...]:
        return self.nodes.get(pattern, ())


# The errnos with which the kernel rejects a value or a knob outright; 524 is the kernel's
# internal ENOTSUPP, which leaks to user space from a few handlers (proc_nmi_watchdog).
ENOTSUPP = 524
REFUSING_ERRNOS = frozenset({errno.EINVAL, errno.EOPNOTSUPP, ENOTSUPP})


def refusal(path: str, value: str, code: int | None) -> HostError:
    """The error of a failed write(2) to a kernel attribute: `Refused` for the errnos that say
    the kernel rejected it, a plain `HostError` for anything else (EIO, EBUSY...)."""
    reason = os.strerror(code) if code is not None else "write failed"
    message = f"{path}: the kernel refused {value!r} ({reason})."
    return Refused(message) if code in REFUSING_ERRNOS else HostError(message)


def normal(path: str) -> bool:
    """Absolute, with no `.` or `..` component: the path names what it says, so a path under a
    directory stays under it (symlinks aside)."""
    # A path built from a snapshot's text (its kernel release, a container's mount source) may
    # hold a NUL, which every os call refuses with ValueError, not OSError.
    return (
        path.startswith("/")
        and "\0" not in path
        # Without "/." no component can be "." or "..": the common case, a thousand times a
        # plan, needs no split.
        and ("/." not in path or not any(part in (".", "..") for part in path.split("/")))
    )


def checked(path: str) -> str:
    """`path` if it is `normal`; otherwise the refusal every engine gives, nothing read or
    written."""
    if not normal(path):
        raise HostError(f"{path}: refusing a path that is not absolute and normal.")
    return path


def within(pattern: str, path: str) -> bool:
    """Whether `path`, which `pattern` expanded to, lies under the pattern's literal prefix (its
    components before the first glob): the rule every engine applies to an expansion, after
    expanding. Python's glob never yields `.` or `..`, but a host's sh does (dash expands `.?`
    to `..`), and a pattern checked before expansion is only as good as the checker."""
    if not is_glob(pattern):
        return path == pattern and normal(path)
    return path.startswith(_literal_prefix(pattern)) and normal(path)


@functools.lru_cache(maxsize=1024)
def _literal_prefix(pattern: str) -> str:
    """A glob pattern's components before its first glob, with their slash."""
    parts = pattern.split("/")
    first = next(n for n, part in enumerate(parts) if is_glob(part))
    return "/".join(parts[:first]) + "/"


def may_match_dot(component: str) -> bool:
    """Whether a glob component could match a name that starts with `.` (`.` and `..` among
    them) in some POSIX shell: one that starts with `.` and holds a glob, or with a bracket
    expression that admits `.` (a negation without it, a range over it, a class). POSIX
    promises that `*` and `?` never match a leading `.`; for brackets it leaves it open."""
    if not is_glob(component):
        return False
    if component.startswith("."):
        return True
    end = bracket_end(component, 0) if component.startswith("[") else None
    if end is None:
        return False
    body = component[1:end]
    negated = body[:1] in ("!", "^")
    body = body[negated:]
    if "[" in body:  # [:class:], [.coll.], [=equiv=]: what they admit is the locale's
        return True
    return _admits_dot(body) != negated


def _admits_dot(body: str) -> bool:
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            if body[i] <= "." <= body[i + 2]:
                return True
            i += 3
            continue
        if body[i] == ".":
            return True
        i += 1
    return False


def bracket_end(pattern: str, start: int) -> int | None:
    """Where fnmatch ends the bracket expression opened at `start`, or None if it is literal."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    end = pattern.find("]", j)
    return None if end == -1 else end


def path_matches(pattern: str, path: str) -> bool:
    """Shell-glob semantics per path component: `*` never crosses a slash."""
    pat_parts = pattern.split("/")
    parts = path.split("/")
    return len(pat_parts) == len(parts) and all(
        fnmatch.fnmatchcase(p, q) for q, p in zip(pat_parts, parts, strict=True)
    )


@dataclass(frozen=True)
class Completed:
    """How a command ended."""

    returncode: int
    stdout: str = ""
    stderr: str = ""


class Host(ABC):
    """A machine to observe and (for apply and rollback only) to write: the local root, a
    snapshot, or SSH (`ssh.SshHost`, observation only for now).

    The write side is a handful of primitives that `reconciler.steps` describes as data; a host
    that cannot be written (an archive) keeps the defaults below, which refuse.
    """

    name: str

    @abstractmethod
    def fetch(self, request: Request) -> Files:
        """Read everything in `request` in one batch."""

    def describe(self) -> str:
        return self.name

    def _refuse(self) -> HostError:
        return HostError(f"{self.describe()} cannot be written; apply to a directory or a host.")

    def check_privileges(self) -> None:
        """Raise unless this process may change the host's settings."""
        raise self._refuse()

    def read_file(self, path: str) -> bytes | None:
        """A whole file of tune's own state (journals), up to one byte past MAX_STATE_BYTES;
        None when absent."""
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

    def owned(self, paths: Sequence[str]) -> tuple[int, dict[str, Owned | None]]:
        """The uid tune runs as on the host, and who owns each of `paths` and its mode (a link
        not followed; None when absent): what `trust.check` judges."""
        raise self._refuse()

    def private_dir(self, path: str) -> None:
        """Create the directory `path` and its missing parents mode 0700, whatever the umask."""
        raise self._refuse()

    def close(self) -> None:  # noqa: B027 - a hook: only hosts that connect hold anything
        """Release what reading the host holds open (an SSH connection); files hold nothing."""


class DirectoryHost(Host):
    """A host whose `/` is a directory: `/` itself, or a snapshot laid out like one."""

    def __init__(self, root: str | os.PathLike[str], name: str | None = None) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise HostError(f"{self.root}: no such directory to read the host from.")
        self.name = name or str(self.root)
        # Every lookup under a snapshot resolves beneath it (`reconciler.beneath`).
        self.paths = Rooted() if str(self.root) == "/" else Beneath(self.root)

    def _local(self, path: str, *, follow: bool = True) -> str:
        checked(path)
        try:
            return self.paths.local(path, follow=follow)
        except OSError as exc:
            raise HostError(f"{path}: {exc.strerror}.") from exc

    def local(self, path: str, *, follow: bool = True) -> str:
        """Where the host's `path` lies on this machine: in a snapshot, with every link
        resolved inside it (HostError for one that leads out)."""
        return self._local(path, follow=follow)

    def fetch(self, request: Request) -> Files:
        with self.paths.batch():
            return self._fetch(request)

    def _fetch(self, request: Request) -> Files:
        files = Files()
        paths = self.paths
        for pattern, keep, limit in request.reads():
            checked(pattern)
            if is_glob(pattern):
                found = sorted(p for p in paths.glob(pattern) if within(pattern, p))
            else:
                found = [pattern] if paths.lexists(pattern) else []
            found = last(found, keep)
            matched = []
            for path in found:
                if path not in files.contents and path not in files.errors:
                    self._read_into(files, path, limit)
                if path in files.contents or path in files.errors:
                    matched.append(path)
            files.matches[pattern] = tuple(matched)
        for directory in request.listed(paths.isfile):
            files.listings[directory] = tuple(sorted(paths.walk(directory)))
        for pattern in sorted(request.nodes):
            found = paths.glob(pattern) if is_glob(pattern) else [pattern]
            files.nodes[pattern] = tuple(
                sorted(
                    p + "/" * paths.isdir(p)
                    for p in found
                    if paths.lexists(p) and within(pattern, p)
                )
            )
        return files

    def _read_into(self, files: Files, path: str, limit: int | None) -> None:
        # A glob may match a directory: it is not a file to read. Asking open (not a stat
        # first) saves a system call per file, a thousand on a 128-CPU host.
        try:
            files.contents[path] = self.paths.read(
                path, MAX_STATE_BYTES + 1 if limit is None else limit
            )
        except IsADirectoryError:
            return
        except OSError as exc:
            files.errors[path] = exc.strerror or str(exc)

    # The write side: plain file operations inside the root, shared by a live host ("/") and a
    # snapshot. Commands and kernel-attribute semantics differ, so the subclasses supply them.

    def read_file(self, path: str) -> bytes | None:
        checked(path)
        try:
            # Whole reads stop one byte past the limit, for the reader to refuse (`journal`).
            return self.paths.read(path, MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HostError(f"{path}: cannot read ({exc.strerror}).") from exc

    def set_attr(self, path: str, value: str) -> None:
        try:
            fd = os.open(self._local(path), os.O_WRONLY)
        except OSError as exc:
            raise HostError(f"{path}: cannot open for writing ({exc.strerror}).") from exc
        try:
            # One write(2): the kernel parses the whole value at once and reports EINVAL here.
            os.write(fd, value.encode("utf-8"))
        except OSError as exc:
            raise refusal(path, value, exc.errno) from exc
        finally:
            os.close(fd)

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        # A link at the path is replaced, never written through.
        local = self._local(path, follow=False)
        directory = os.path.dirname(local)
        temporary = temporary_of(local)
        try:
            os.makedirs(directory, exist_ok=True)
            # The temporary name is tune's own: whatever is there (what a write cut short left,
            # or a FIFO, a device or a hard link to another file that a snapshot brought) is
            # removed, never opened; O_EXCL then creates a new file or fails.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temporary, flags, mode)
            try:
                write_all(fd, data)
                os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, local)
            _sync_directory(directory)
        except BaseException as exc:
            # A signal that rolls the run back (`apply.Interrupted`) as much as a failed write:
            # the temporary file never outlives the write.
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            if isinstance(exc, OSError):
                raise write_error(path, "write", exc) from exc
            raise

    def delete_file(self, path: str) -> None:
        local = self._local(path, follow=False)
        try:
            os.unlink(local)
            _sync_directory(os.path.dirname(local))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise HostError(f"{path}: cannot delete ({exc.strerror}).") from exc

    def missing_dirs(self, path: str) -> list[str]:
        # What put_file's makedirs creates: the directories missing above where the path
        # resolves, not above the path as named. `/etc/sysctl.d -> /opt/sysctl.d/current`, not
        # there yet, makes /opt/sysctl.d and its `current`, which a rollback must remove.
        local = os.path.dirname(self._local(path, follow=False))
        missing = []
        while not os.path.lexists(local):
            missing.append(local)
            local = os.path.dirname(local)
        return [self._host_path(directory) for directory in missing]

    def _host_path(self, local: str) -> str:
        """The host path of `local`, a path of this machine inside the host's root."""
        if isinstance(self.paths, Beneath):
            return "/" + os.path.relpath(local, self.paths.root)
        return local

    def remove_dir(self, path: str) -> None:
        local = self._local(path, follow=False)
        try:
            os.rmdir(local)
            _sync_directory(os.path.dirname(local))
        except OSError as exc:
            # Not empty (something not tune's is in it), gone, or no longer a directory: it
            # stays as it is.
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
                raise HostError(f"{path}: cannot remove ({exc.strerror}).") from exc

    def append(self, path: str, data: bytes, *, sync: bool = True) -> None:
        """`data` whole and (with `sync`) on disk, or nothing: a record a full device cut short
        is cut off again, so the journal holds whole records only, and the write that record
        announces does not happen."""
        local = self._local(path)
        try:
            os.makedirs(os.path.dirname(local), exist_ok=True)
            created = not os.path.exists(local)
            fd = open_regular(local, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                _append_whole(fd, data, sync)
            finally:
                os.close(fd)
            if created and sync:
                _sync_directory(os.path.dirname(local))
        except OSError as exc:
            raise write_error(path, "append", exc) from exc

    def writable(self, path: str) -> bool:
        local = self._local(path)
        while not os.path.lexists(local) and os.path.dirname(local) != local:
            local = os.path.dirname(local)
        return os.access(local, os.W_OK)

    def owned(self, paths: Sequence[str]) -> tuple[int, dict[str, Owned | None]]:
        found: dict[str, Owned | None] = {}
        for path in paths:
            try:
                found[path] = Owned.of(os.lstat(self._local(path, follow=False)))
            except FileNotFoundError:
                found[path] = None
            except OSError as exc:
                raise HostError(f"{path}: cannot read who owns it ({exc.strerror}).") from exc
        return os.geteuid(), found

    def private_dir(self, path: str) -> None:
        try:
            private_directory(Path(self._local(path)))
        except OSError as exc:
            raise HostError(f"{path}: cannot create the directory ({exc.strerror}).") from exc

    @contextlib.contextmanager
    def lock(self, path: str) -> Iterator[None]:
        import fcntl

        directory = os.path.dirname(path)
        self.private_dir(directory)
        # The directory, and whatever is at the path already: a link, a device or a FIFO (a
        # snapshot may hold anything) is refused unopened, since opening a device can act on it.
        check(*self.owned([directory, path]), [path])
        local = self._local(path, follow=False)
        try:
            # Never through a link: in a directory others could write, one planted at the lock
            # path made root truncate the file it pointed to.
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(local, flags, 0o600)
        except OSError as exc:
            raise HostError(f"{path}: cannot create the lock ({exc.strerror}).") from exc
        try:
            check(os.geteuid(), {path: Owned.of(os.fstat(fd))}, [path])
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                raise LockHeld(holder or None) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)


def _append_whole(fd: int, data: bytes, sync: bool) -> None:
    start = os.fstat(fd).st_size  # the only writer: the run holds the lock
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise


def _sync_directory(directory: str) -> None:
    """fsync a directory so a created, renamed or removed entry survives a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalHost(DirectoryHost):
    """The machine tune runs on. Never written by tests: they use snapshots."""

    def __init__(self) -> None:
        super().__init__("/", name=os.uname().nodename)

    def describe(self) -> str:
        return f"local ({self.name})"

    def check_privileges(self) -> None:
        if os.geteuid() != 0:
            raise HostError("tune apply changes kernel settings and must run as root (sudo).")

    def run(self, argv: Sequence[str]) -> Completed:
        import subprocess

        try:
            done = subprocess.run(
                list(argv), capture_output=True, text=True, check=False, timeout=120
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Completed(127, "", f"{argv[0]}: {exc}")
        return Completed(done.returncode, done.stdout, done.stderr)

    def has_command(self, name: str) -> bool:
        import shutil

        return shutil.which(name) is not None


class SnapshotHost(DirectoryHost):
    """A directory laid out like a host's `/`, written as the kernel and the tools would write
    the real files (see `reconciler.emulate`); no command ever runs on this machine."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        name: str | None = None,
        commands: Iterable[str] | None = None,
    ) -> None:
        super().__init__(root, name)
        # None: the commands `reconciler.emulate` knows (looked up when one runs: a plan never
        # pays for importing the emulation).
        self._commands = None if commands is None else frozenset(commands)

    @property
    def commands(self) -> frozenset[str]:
        from . import emulate

        return frozenset(emulate.COMMANDS) if self._commands is None else self._commands

    def describe(self) -> str:
        return f"snapshot {self.root}"

    def check_privileges(self) -> None:
        return None

    def set_attr(self, path: str, value: str) -> None:
        from . import emulate

        emulate.set_attr(self, path, value)

    def writable(self, path: str) -> bool:
        from . import emulate

        return emulate.writable(self, path)

    def run(self, argv: Sequence[str]) -> Completed:
        from . import emulate

        if not argv or argv[0] not in self.commands:
            name = argv[0] if argv else ""
            return Completed(127, "", f"{name}: command not found")
        return emulate.run(self, list(argv))

    def has_command(self, name: str) -> bool:
        return name in self.commands

    def defers(self, argv: Sequence[str]) -> bool:
        """Boot tools are not emulated: the run's journal records them instead."""
        return not argv or argv[0] not in self.commands


class ArchiveHost(Host):
    """A snapshot packed as `.tar.gz` (what `tune snapshot` writes)."""

    def __init__(self, archive: str | os.PathLike[str]) -> None:
        self.archive = Path(archive)
        self.name = str(self.archive)
        try:
            self._tree, self._directories = _read_archive(self.archive)
        except OSError as exc:
            raise HostError(f"{self.archive}: cannot read snapshot archive ({exc}).") from exc

    def describe(self) -> str:
        return f"snapshot {self.archive}"

    def fetch(self, request: Request) -> Files:
        files = Files()
        for pattern, keep, _limit in request.reads():
            found = last(
                sorted(_expand(pattern, self._tree))
                if is_glob(pattern)
                else [pattern] * (pattern in self._tree),
                keep,
            )
            for path in found:
                files.contents[path] = self._tree[path]
            files.matches[pattern] = tuple(found)
        for directory in request.listed(lambda path: path in self._tree):
            base = directory.rstrip("/") + "/"
            files.listings[directory] = tuple(sorted(p for p in self._tree if p.startswith(base)))
        for pattern in sorted(request.nodes):
            found = _expand(pattern, self._tree)
            found += [d + "/" for d in _expand(pattern, self._directories)]
            files.nodes[pattern] = tuple(sorted(found))
        return files


def _expand(pattern: str, paths: Iterable[str]) -> list[str]:
    """What `pattern` matches among an archive's `paths`, under the same rule as a shell's
    expansion (a member named `../x` is no match for `/.?/x`)."""
    return [p for p in paths if path_matches(pattern, p) and within(pattern, p)]


# Compression by magic number. Each decompressor checks its own CRC, so a truncated or
# corrupt archive is an error here rather than a snapshot with files silently missing.
_DECOMPRESS = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "lzma"),
)

# What a snapshot archive may unpack to. The example host of 128 CPUs and 8 GPUs
# (examples/hosts/rtx6000bw-untuned) is 2,233 files, 3.7 MB, the largest 181 KB: these limits
# are 70 to 90 times that. A few KB of gzip can unpack to gigabytes: the sizes are checked from
# the tar headers, before a member is read, and the stream is never unpacked past the total.
MAX_ARCHIVE_BYTES = 256 << 20
MAX_ARCHIVE_MEMBER_BYTES = 16 << 20
MAX_ARCHIVE_MEMBERS = 200_000


class ArchiveRefused(OSError):
    """An archive larger than tune reads; the text says which limit."""


class _Bounded:
    """The unpacked tar stream for `tarfile`, refused past MAX_ARCHIVE_BYTES: reads come in
    pieces (tarfile asks for a whole long-name header at once) and seeks stop at the cap. The
    last read is kept: it holds the header block where tarfile stopped."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.last: tuple[int, bytes] = (0, b"")

    def _check(self, position: int) -> None:
        if position > MAX_ARCHIVE_BYTES:
            limit = size_text(MAX_ARCHIVE_BYTES)
            raise ArchiveRefused(f"it unpacks to more than {limit}, the most tune reads")

    def read(self, size: int = -1) -> bytes:
        if size > MAX_ARCHIVE_MEMBER_BYTES:  # a long-name or pax header, read whole
            raise _one_file_too_large("one of its headers", size)
        start = self.tell()
        chunks = []
        while size != 0:
            chunk = self.stream.read(1 << 20 if size < 0 else min(size, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            size -= len(chunk) if size > 0 else 0
            self._check(self.stream.tell())
        self.last = (start, b"".join(chunks))
        return self.last[1]

    def rest_is_zeros(self, offset: int) -> bool:
        """Whether everything from `offset` (where tarfile stopped) to the end is zeros."""
        start, last = self.last
        if start <= offset <= start + len(last):
            tail = last[offset - start :]
        else:
            self.seek(offset)
            tail = b""
        zeros = not tail.strip(b"\0")
        # Read to the end all the same: the decompressor checks its CRC there, and a corrupt
        # stream is the better explanation of garbage where a header should be.
        while chunk := self.read(1 << 20):
            zeros = zeros and not chunk.strip(b"\0")
        return zeros

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._check(offset)
        return int(self.stream.seek(offset, whence))

    def tell(self) -> int:
        return int(self.stream.tell())


def _one_file_too_large(what: str, size: int) -> ArchiveRefused:
    limit = size_text(MAX_ARCHIVE_MEMBER_BYTES)
    return ArchiveRefused(
        f"{what} is {size_text(size)}, more than the {limit} tune reads of one file"
    )


def _read_archive(archive: Path) -> tuple[dict[str, bytes], set[str]]:
    """The archive's files, and its directories (named, or implied by a file below them)."""
    import lzma
    import tarfile  # only snapshots packed as archives need it
    import zlib

    tree: dict[str, bytes] = {}
    directories: set[str] = set()
    with open(archive, "rb") as raw:
        magic = raw.read(6)
        raw.seek(0)
        module = next((m for prefix, m in _DECOMPRESS if magic.startswith(prefix)), None)
        stream = importlib.import_module(module).open(raw) if module else raw
        bounded = _Bounded(stream)
        try:
            with tarfile.open(fileobj=bounded, mode="r:") as tar:  # type: ignore[call-overload]
                _members(tar, tree, directories)
                # tarfile ends quietly at a damaged header; what follows the last member must
                # be the zero blocks that end an archive.
                if not bounded.rest_is_zeros(tar.offset):
                    raise ArchiveRefused(f"damaged tar header at byte {tar.offset}")
        except ArchiveRefused:
            raise
        except tarfile.TarError as exc:
            raise OSError(f"not a tar archive: {exc}") from exc
        except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
            raise OSError(f"corrupt or truncated {module or 'tar'} data: {exc}") from exc
    for path in tree:
        parent = os.path.dirname(path)
        while parent not in directories and parent != "/":
            directories.add(parent)
            parent = os.path.dirname(parent)
    return tree, directories


def _members(tar: Any, tree: dict[str, bytes], directories: set[str]) -> None:
    """Each member, its size checked from its header before anything of it is read."""
    total = 0
    for count, member in enumerate(tar, 1):
        if count > MAX_ARCHIVE_MEMBERS:
            raise ArchiveRefused(f"more than {MAX_ARCHIVE_MEMBERS:,} members, the most tune reads")
        total += member.size
        if member.size > MAX_ARCHIVE_MEMBER_BYTES:
            raise _one_file_too_large(f"its member {member.name}", member.size)
        if total > MAX_ARCHIVE_BYTES:
            limit = size_text(MAX_ARCHIVE_BYTES)
            raise ArchiveRefused(f"its files hold more than {limit}, the most tune reads")
        path = "/" + os.path.normpath(member.name).lstrip("/")
        extracted = tar.extractfile(member) if member.isfile() else None
        if extracted is not None:
            tree[path] = extracted.read(MAX_FILE_BYTES)
        elif member.isdir():
            directories.add(path)


def open_host(root: str | None) -> Host:
    """`--root` as the CLI takes it: a directory, a `.tar.gz`, or nothing for this machine."""
    if root is None:
        return LocalHost()
    path = Path(root)
    if path.is_file():
        return ArchiveHost(path)
    if not path.exists():
        raise HostError(f"{root}: no such snapshot directory or archive.")
    return SnapshotHost(path)


def write_archive(files: Files, target: str | os.PathLike[str]) -> int:
    """Pack observed files into a snapshot archive; returns how many files went in. A device
    node goes in as an empty file (a directory of them as a directory): the name is what was
    observed, and the same layout in a snapshot directory reads back the same."""
    import tarfile
    import time

    now = int(time.time())
    nodes = {p for found in files.nodes.values() for p in found}
    entries = {**{p: b"" for p in nodes}, **files.contents}
    try:
        tar = tarfile.open(target, "w:gz")  # noqa: SIM115 - entered below, once it opened
    except OSError as exc:
        raise write_error(str(target), "write the snapshot", exc) from exc
    try:
        with tar:
            for path, data in sorted(entries.items()):
                info = tarfile.TarInfo(path.strip("/"))
                info.mtime = now
                if path.endswith("/"):
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                    continue
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
    except OSError as exc:  # a full device: no half an archive left behind
        with contextlib.suppress(OSError):
            os.unlink(target)
        raise write_error(str(target), "write the snapshot", exc) from exc
    return sum(not p.endswith("/") for p in entries)
