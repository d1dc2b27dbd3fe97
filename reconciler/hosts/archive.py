"""Snapshot archives: a `.tar.gz` of observed files, read whole and bounded, and
written by `tune snapshot`.
"""

from __future__ import annotations

import importlib
import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from ..core.bounded import size_text
from ..core.errors import HostError, reason
from ..core.files import EDITED_READ, MAX_FILE_BYTES, Files, Request, cap_rank, last
from ..core.paths import is_glob, path_matches, within
from . import recorded
from .base import Host, write_error
from .replaced import write_output
from .unreadable import UNREADABLE, apply_markers, kept


class ArchiveHost(Host):
    """A snapshot packed as `.tar.gz` (what `tune snapshot` writes)."""

    def __init__(self, archive: str | os.PathLike[str]) -> None:
        self.archive = Path(archive)
        self.name = str(self.archive)
        # Members longer than MAX_FILE_BYTES, held cut there until a request reads one whole.
        self._long: set[str] = set()
        self._tree, self._directories = self._read(frozenset())

    def _read(self, whole: frozenset[str]) -> tuple[dict[str, bytes], set[str]]:
        try:
            return _read_archive(self.archive, whole, set() if whole else self._long)
        except OSError as exc:
            said = f"{self.archive}: cannot read snapshot archive ({reason(exc)})."
            raise HostError(said) from exc

    def describe(self) -> str:
        return f"snapshot {self.archive}"

    def fetch(self, request: Request) -> Files:
        wanted = {
            path
            for pattern, _, limit in request.reads()
            if cap_rank(limit) > MAX_FILE_BYTES
            for path in self._long
            if path_matches(pattern, path)
        }
        if wanted:
            # A file read whole that the archive holds past the usual cap (a large container
            # config): the archive is read again for it, rather than every member held whole.
            whole, _ = self._read(frozenset(wanted))
            self._tree.update((path, whole[path]) for path in wanted if path in whole)
            self._long -= wanted
        files = Files()
        for pattern, keep, limit in request.reads():
            found = last(
                sorted(_expand(pattern, self._tree))
                if is_glob(pattern)
                else [pattern] * (pattern in self._tree),
                keep,
            )
            for path in found:
                # Cut as DirectoryHost reads it: with the largest cap a pattern asks of it.
                read = self._tree[path][: cap_rank(limit)]
                if len(read) > len(files.contents.get(path, b"")):
                    files.contents[path] = read
                files.contents.setdefault(path, read)
            files.matches[pattern] = tuple(found)
        for directory in request.listed(lambda path: path in self._tree):
            base = directory.rstrip("/") + "/"
            files.listings[directory] = tuple(sorted(p for p in self._tree if p.startswith(base)))
        for pattern in sorted(request.nodes):
            found = _expand(pattern, self._tree)
            found += [d + "/" for d in _expand(pattern, self._directories)]
            files.nodes[pattern] = tuple(sorted(found))
        for argv in sorted(request.commands):
            files.commands[argv] = recorded.answer(argv, self._tree.get)
        markers = {p: data for p, data in self._tree.items() if p.startswith(UNREADABLE + "/")}
        apply_markers(files, markers)
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
# A member may be one byte past MAX_EDITED_BYTES: what `tune snapshot` keeps of a file tune
# edits that is too large to edit, which the apply then refuses by its size.
MAX_ARCHIVE_MEMBER_BYTES = EDITED_READ
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


def _read_archive(
    archive: Path, whole: frozenset[str], long: set[str]
) -> tuple[dict[str, bytes], set[str]]:
    """The archive's files, and its directories (named, or implied by a file below them):
    those in `whole` whole, the others cut at MAX_FILE_BYTES (each path cut added to
    `long`)."""
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
                _members(tar, tree, directories, whole, long)
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


def _members(
    tar: Any, tree: dict[str, bytes], directories: set[str], whole: frozenset[str], long: set[str]
) -> None:
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
            if path in whole:
                tree[path] = extracted.read()
            else:
                tree[path] = extracted.read(MAX_FILE_BYTES)
                if member.size > MAX_FILE_BYTES:
                    long.add(path)
        elif member.isdir():
            directories.add(path)


def write_archive(files: Files, target: str | os.PathLike[str] | BinaryIO) -> int:
    """Pack observed files into a snapshot archive (a path, or a stream such as standard
    output); returns how many files went in. A device node goes in as an empty file (a
    directory of them as a directory): the name is what was observed, and the same layout in
    a snapshot directory reads back the same. A kernel file that could not be read goes in
    empty, with its marker (`reconciler.hosts.unreadable`); a command's output as
    `reconciler.hosts.recorded` lays it out."""
    import time

    now = int(time.time())
    nodes = {p for found in files.nodes.values() for p in found}
    unreadable = dict(kept(files))
    entries = {
        **{p: b"" for p in nodes},
        **files.contents,
        **{m.removeprefix(UNREADABLE): b"" for m in unreadable},
        **unreadable,
        **{
            p: data
            for argv, out in files.commands.items()
            for p, data in recorded.record(argv, out).items()
        },
    }
    if isinstance(target, str | os.PathLike):
        # Replaced whole like every file tune writes for the operator, or written through a
        # device or a FIFO: a file that does not fit leaves no half archive behind.
        write_output(target, lambda handle: _pack(entries, handle, str(target), now), _DOING)
    else:
        _pack(entries, target, "standard output", now)
    return sum(not p.endswith("/") for p in entries) - len(unreadable)


_DOING = "write the snapshot"


def _pack(entries: dict[str, bytes], stream: BinaryIO, name: str, now: int) -> None:
    """`entries` as a gzipped tar, written forward only ("w|gz"): a pipe cannot seek back."""
    import tarfile

    try:
        with tarfile.open(fileobj=stream, mode="w|gz") as tar:
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
    except OSError as exc:
        raise write_error(name, _DOING, exc) from exc
