"""Hosts: where observation reads from.

Every knob kind says which files it needs as a `Request` (glob patterns and directories whose
names it lists); a host answers the whole request at once with `Files`. That single batch is what
lets an SSH host later observe in one round trip, and what makes every knob testable against a
snapshot directory: knobs parse `Files`, never the host.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import tarfile
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import HostError

# sysfs and procfs files report 4096 bytes or 0 whatever they hold; cap reads so a profile glob
# that matches something large (a log, a firmware blob) cannot balloon the observation.
MAX_FILE_BYTES = 1 << 16
GLOB_CHARS = frozenset("*?[")


def is_glob(pattern: str) -> bool:
    return any(c in GLOB_CHARS for c in pattern)


@dataclass(frozen=True)
class Request:
    """Absolute paths or glob patterns to read, and directories whose file names to list."""

    patterns: frozenset[str] = frozenset()
    listings: frozenset[str] = frozenset()

    @classmethod
    def of(cls, *patterns: str, listings: Iterable[str] = ()) -> Request:
        return cls(frozenset(patterns), frozenset(listings))

    def __or__(self, other: Request) -> Request:
        return Request(self.patterns | other.patterns, self.listings | other.listings)


@dataclass
class Files:
    """The answer to a `Request`: plain data, no host access."""

    contents: dict[str, bytes] = field(default_factory=dict)
    matches: dict[str, tuple[str, ...]] = field(default_factory=dict)
    listings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Paths that exist but could not be read (EACCES, EIO), with the reason.
    errors: dict[str, str] = field(default_factory=dict)

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


def path_matches(pattern: str, path: str) -> bool:
    """Shell-glob semantics per path component: `*` never crosses a slash."""
    pat_parts = pattern.split("/")
    parts = path.split("/")
    return len(pat_parts) == len(parts) and all(
        fnmatch.fnmatchcase(p, q) for q, p in zip(pat_parts, parts, strict=True)
    )


class Host(ABC):
    """A machine to observe: the local root, a snapshot, or SSH (`ssh.SshHost`)."""

    name: str

    @abstractmethod
    def fetch(self, request: Request) -> Files:
        """Read everything in `request` in one batch."""

    def describe(self) -> str:
        return self.name

    def close(self) -> None:  # noqa: B027 - a hook: only hosts that connect hold anything
        """Release what reading the host holds open (an SSH connection); files hold nothing."""


class DirectoryHost(Host):
    """A host whose `/` is a directory: `/` itself, or a snapshot laid out like one."""

    def __init__(self, root: str | os.PathLike[str], name: str | None = None) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise HostError(f"{self.root}: no such directory to read the host from.")
        self.name = name or str(self.root)

    def _local(self, path: str) -> str:
        return str(self.root) + path if str(self.root) != "/" else path

    def fetch(self, request: Request) -> Files:
        files = Files()
        prefix = len(str(self.root)) if str(self.root) != "/" else 0
        for pattern in sorted(request.patterns):
            if is_glob(pattern):
                found = sorted(p[prefix:] for p in glob.glob(self._local(pattern)))
            else:
                found = [pattern] if os.path.lexists(self._local(pattern)) else []
            matched = []
            for path in found:
                if path not in files.contents and path not in files.errors:
                    self._read_into(files, path)
                if path in files.contents or path in files.errors:
                    matched.append(path)
            files.matches[pattern] = tuple(matched)
        for directory in sorted(request.listings):
            files.listings[directory] = tuple(self._walk(directory, prefix))
        return files

    def _read_into(self, files: Files, path: str) -> None:
        local = self._local(path)
        if os.path.isdir(local):
            return
        try:
            with open(local, "rb") as handle:
                files.contents[path] = handle.read(MAX_FILE_BYTES)
        except OSError as exc:
            files.errors[path] = exc.strerror or str(exc)

    def _walk(self, directory: str, prefix: int) -> list[str]:
        names: list[str] = []
        for base, _dirs, filenames in os.walk(self._local(directory)):
            names.extend(os.path.join(base, f)[prefix:] for f in filenames)
        return sorted(names)


class LocalHost(DirectoryHost):
    """The machine tune runs on. Observation only reads."""

    def __init__(self) -> None:
        super().__init__("/", name=os.uname().nodename)

    def describe(self) -> str:
        return f"local ({self.name})"


class SnapshotHost(DirectoryHost):
    def describe(self) -> str:
        return f"snapshot {self.root}"


class ArchiveHost(Host):
    """A snapshot packed as `.tar.gz` (what `tune snapshot` writes)."""

    def __init__(self, archive: str | os.PathLike[str]) -> None:
        self.archive = Path(archive)
        self.name = str(self.archive)
        self._tree: dict[str, bytes] = {}
        try:
            with tarfile.open(self.archive, "r:*") as tar:
                for member in tar.getmembers():
                    if not member.isfile():
                        continue
                    extracted = tar.extractfile(member)
                    if extracted is not None:
                        path = "/" + os.path.normpath(member.name).lstrip("/")
                        self._tree[path] = extracted.read(MAX_FILE_BYTES)
        except (OSError, tarfile.TarError) as exc:
            raise HostError(f"{self.archive}: cannot read snapshot archive ({exc}).") from exc

    def describe(self) -> str:
        return f"snapshot {self.archive}"

    def fetch(self, request: Request) -> Files:
        files = Files()
        for pattern in sorted(request.patterns):
            found = (
                sorted(p for p in self._tree if path_matches(pattern, p))
                if is_glob(pattern)
                else [pattern] * (pattern in self._tree)
            )
            for path in found:
                files.contents[path] = self._tree[path]
            files.matches[pattern] = tuple(found)
        for directory in sorted(request.listings):
            base = directory.rstrip("/") + "/"
            files.listings[directory] = tuple(sorted(p for p in self._tree if p.startswith(base)))
        return files


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
    """Pack observed files into a snapshot archive; returns how many files went in."""
    import io
    import time

    now = time.time()
    with tarfile.open(target, "w:gz") as tar:
        for path, data in sorted(files.contents.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(data)
            info.mtime = int(now)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return len(files.contents)
