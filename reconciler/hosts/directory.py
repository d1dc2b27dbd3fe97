"""Hosts whose files are files on this machine: this machine itself, or a snapshot
directory laid out like a host's root.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ..core.errors import HostError, LockHeld
from ..core.files import (
    MAX_FILE_BYTES,
    MAX_STATE_BYTES,
    NOT_INSTALLED,
    CommandOutput,
    Files,
    Request,
    cap_rank,
    last,
    rooted_body,
)
from ..core.paths import checked, is_glob, within
from ..steps.ops import temporary as temporary_of
from . import lock, recorded
from .base import Completed, Host, write_error
from .beneath import Beneath, Rooted, append_whole, open_regular, write_all
from .trust import Owned, check, make_directories, private_directory
from .unreadable import UNREADABLE, apply_markers


class DirectoryHost(Host):
    """A host whose `/` is a directory: `/` itself, or a snapshot laid out like one."""

    def __init__(self, root: str | os.PathLike[str], name: str | None = None) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise HostError(f"{self.root}: no such directory to read the host from.")
        self.name = name or str(self.root)
        # Every lookup under a snapshot resolves beneath it (`reconciler.hosts.beneath`).
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
        caps: dict[str, int] = {}  # what each path was read with, as `cap_rank` ranks it
        for pattern, keep, limit in request.reads():
            checked(pattern)
            if is_glob(pattern):
                found = sorted(p for p in paths.glob(pattern) if within(pattern, p))
            else:
                found = [pattern] if paths.lexists(pattern) else []
            found = last(found, keep)
            matched = []
            for path in found:
                if path not in files.errors and caps.get(path, 0) < cap_rank(limit):
                    self._read_into(files, path, limit)
                    caps[path] = cap_rank(limit)
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
        for argv in sorted(request.commands):
            files.commands[argv] = self._output(argv)
        return files

    def _output(self, argv: tuple[str, ...]) -> CommandOutput:
        """A snapshot answers a command from what it recorded (`reconciler.hosts.recorded`)."""
        return recorded.answer(argv, self._recorded)

    def _recorded(self, path: str) -> bytes | None:
        try:
            return self.paths.read(path, MAX_FILE_BYTES)
        except (FileNotFoundError, IsADirectoryError):
            return None
        except OSError as exc:
            raise HostError(f"{path}: cannot read ({exc.strerror}).") from exc

    def _read_into(self, files: Files, path: str, limit: int | None) -> None:
        # A glob may match a directory: it is not a file to read. Asking open (not a stat
        # first) saves a system call per file, a thousand on a 128-CPU host.
        try:
            files.contents[path] = self.paths.read(path, cap_rank(limit))
        except IsADirectoryError:
            return
        except OSError as exc:
            files.errors[path] = exc.strerror or str(exc)

    # The write side: plain file operations inside the root. A snapshot's kernel attributes and
    # commands are its emulation's (`SnapshotHost`); this machine's are written by the sh
    # executor alone (`hosts.local`), so `LocalHost` has neither. What it keeps of these is for
    # tune's own state that a read-only command records (`drift.first_seen`).

    def read_file(self, path: str) -> bytes | None:
        checked(path)
        try:
            # Whole reads stop one byte past the limit, for the reader to refuse (`journal`).
            return self.paths.read(path, MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HostError(f"{path}: cannot read ({exc.strerror}).") from exc

    def file_size(self, path: str) -> int | None:
        try:
            return os.stat(self._local(path)).st_size
        except (OSError, HostError):
            return None

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        # A link at the path is replaced, never written through.
        local = self._local(path, follow=False)
        directory = os.path.dirname(local)
        temporary = temporary_of(local)
        try:
            make_directories(Path(directory), 0o755)
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
                append_whole(fd, data, sync)
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
            _wait_for(fd, path)
            os.ftruncate(fd, 0)
            os.pwrite(fd, lock.record(lock.this_command()), 0)
            yield
        finally:
            os.close(fd)


def _wait_for(fd: int, path: str) -> None:
    """flock `fd`, waiting `lock.WAIT` seconds at most, as lib.sh's `take_lock` does."""
    import fcntl

    deadline = time.monotonic() + lock.WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = lock.Holder.parse(os.pread(fd, lock.MAX_RECORD, 0))
                raise LockHeld(lock.held_message(path, holder)) from None
            time.sleep(0.05)


def _sync_directory(directory: str) -> None:
    """fsync a directory so a created, renamed or removed entry survives a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Seconds a command observation may take on this machine (`nvidia-smi` on eight GPUs answers in
# about one); past it the command counts as failed, with the status `timeout(1)` gives.
COMMAND_TIMEOUT = 60.0
TIMED_OUT = 124


class LocalHost(DirectoryHost):
    """The machine tune runs on, as this process reads it. It neither writes a kernel attribute
    nor runs a command that changes anything: an apply, a rollback, a verification or a reboot
    of this machine is the sh executor's (`hosts.local.LocalShell`). Never written by tests:
    they use snapshots."""

    def __init__(self) -> None:
        super().__init__("/", name=os.uname().nodename)

    def describe(self) -> str:
        return f"local ({self.name})"

    def _output(self, argv: tuple[str, ...]) -> CommandOutput:
        import shutil
        import subprocess

        if shutil.which(argv[0]) is None:
            return NOT_INSTALLED
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                check=False,
                timeout=COMMAND_TIMEOUT,
            )
        except subprocess.TimeoutExpired as exc:
            return CommandOutput(TIMED_OUT, (exc.stdout or b"")[:MAX_FILE_BYTES])
        except OSError:  # gone or not executable since `which` found it
            return NOT_INSTALLED
        # A signal (negative here) reads as the shell reports it, as over SSH.
        status = done.returncode if done.returncode >= 0 else 128 - done.returncode
        return CommandOutput(status, done.stdout[:MAX_FILE_BYTES])


class SnapshotHost(DirectoryHost):
    """A directory laid out like a host's `/`, written as the kernel and the tools would write
    the real files (see `reconciler.hosts.emulate`); no command ever runs on this machine."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        name: str | None = None,
        commands: Iterable[str] | None = None,
    ) -> None:
        super().__init__(root, name)
        # None: what the snapshot lists, else the commands `reconciler.hosts.emulate` knows
        # (looked up when one runs: a plan never pays for importing the emulation).
        self._commands = None if commands is None else frozenset(commands)

    @property
    def commands(self) -> frozenset[str]:
        from . import emulate

        return emulate.commands(self) if self._commands is None else self._commands

    def describe(self) -> str:
        return f"snapshot {self.root}"

    def fetch(self, request: Request) -> Files:
        with self.paths.batch():
            files = self._fetch(request)
            # One walk finds the few markers a snapshot holds, not a lookup a file read.
            found = self.paths.walk(UNREADABLE)
            markers = {}
            for where in (m for m in found if m.removeprefix(UNREADABLE) in files.contents):
                try:
                    markers[where] = self.paths.read(where, 64)
                except OSError as exc:
                    raise HostError(f"{where}: cannot read the marker ({exc.strerror}).") from exc
        apply_markers(files, markers)
        return files

    def _output(self, argv: tuple[str, ...]) -> CommandOutput:
        """What `tune snapshot` recorded; else, for tune's own rooted scripts, what they print
        computed from the snapshot's files (`reconciler.hosts.emulate.observe`)."""
        answer = super()._output(argv)
        if answer.installed or rooted_body(argv) is None:
            return answer
        from . import emulate

        return emulate.observe(self._fetch, argv)

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


def open_host(root: str | None) -> Host:
    """`--root` as the CLI takes it: a directory, a `.tar.gz`, or nothing for this machine."""
    if root is None:
        return LocalHost()
    path = Path(root)
    if path.is_file():
        from .archive import ArchiveHost  # only an archive's plan pays for reading one

        return ArchiveHost(path)
    if not path.exists():
        raise HostError(f"{root}: no such snapshot directory or archive.")
    return SnapshotHost(path)
