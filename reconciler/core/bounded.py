"""Files tune is pointed at on this machine (a profile and its parents, an inventory and its
variables, a private key, a saved plan), read so that the file cannot decide how long the read
takes or how much it holds: a FIFO would block `open` or `read` for ever, a device or a sparse
file never ends. Only a regular file is read, and at most one byte past its limit, which is how
a file too large is told apart from one exactly at the limit. Symlinks are followed: a profile
kept as a link is ordinary. A YAML document read from one is bounded too, by the values it
expands to (`counting_composer`).
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ruamel.yaml.composer import Composer

# A hand-written profile is a few KB (the largest shipped one is 2.5 KB); one that lists every
# attribute of eight GPUs and their switches is tens of KB. ruamel.yaml's round-trip parser
# reads about 100 KB a second on a busy core, so 256 KiB keeps the worst case (tiny keys) at a
# few seconds, where 2 MB of them took most of a minute.
MAX_PROFILE_BYTES = 256 << 10
# An Ansible inventory of thousands of hosts with their variables is a few MB.
MAX_INVENTORY_BYTES = 16 << 20
# ... and its variables, once YAML aliases are expanded: 10,000 hosts of 100 variables each.
MAX_INVENTORY_VALUES = 1_000_000
# A saved plan holds what it observed of its host: a 128-CPU host's plan is 86 KB.
MAX_SAVED_PLAN_BYTES = 16 << 20
# An OpenSSH private key is a few KB (RSA of 16,384 bits: 13 KB), its certificate less.
MAX_KEY_BYTES = 256 << 10


class Unreadable(OSError):
    """A file refused before it is read: not a regular file, or larger than tune reads. Its
    text (`str` and `strerror` alike) is the reason, ready to follow "cannot read ...: "."""

    def __str__(self) -> str:
        return self.strerror or ""


def size_text(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):g} {unit}"
    return f"{size} bytes"


def read_bounded(
    path: str | os.PathLike[str],
    limit: int,
    what: str,
    *,
    follow: bool = True,
    judge: Callable[[os.stat_result], None] | None = None,
) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them; `what` ("a profile") names
    the file in the refusal. With `follow` false a link at `path` is not opened (ELOOP);
    `judge` sees the opened file's fstat before a byte is read (and raises to refuse it).
    Raises OSError (`Unreadable` for a refusal)."""
    # O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer;
    # fstat then refuses it. On a regular file the flag changes nothing.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(errno.EINVAL, f"{kind_of(info.st_mode)} is not a regular file")
        if judge is not None:
            judge(info)
        too_large = Unreadable(
            errno.EFBIG, f"larger than {size_text(limit)}, the most tune reads for {what}"
        )
        if info.st_size > limit:  # a sparse file is refused without reading it
            raise too_large
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:  # the file grew past the limit while it was read
            raise too_large
        return b"".join(chunks)
    finally:
        os.close(fd)


def kind_of(mode: int) -> str:
    """What a file that is not a regular one is, for a sentence ("a FIFO")."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    )
    return next((name for test, name in kinds if test(mode)), "this")


class TooManyValues(Exception):
    """A YAML document that expands past `limit` values; `line` and `column` (1-based) are
    where the count ran over."""

    def __init__(self, line: int, column: int, limit: int) -> None:
        super().__init__(line, column, limit)
        self.line, self.column, self.limit = line, column, limit


@functools.cache
def counting_composer(limit: int) -> type[Composer]:
    """ruamel's composer, counting the values (keys, values, list items) the document expands
    to as it composes them, an alias counting what it repeats, and raising `TooManyValues`
    past `limit`: a YAML alias bomb (each anchor repeating the one before nine times), or a
    chain of merge keys (`<<: [*a, *a]`), holds billions in a few hundred bytes, and is
    refused before anything is expanded or merged."""
    from ruamel.yaml.composer import Composer
    from ruamel.yaml.events import AliasEvent

    class Counting(Composer):
        expanded = 0
        sizes: dict[int, int] | None = None  # id(node) -> what it expands to

        def compose_node(self, parent: Any, index: Any) -> Any:
            sizes = self.sizes = {} if self.sizes is None else self.sizes
            start = self.expanded
            alias = self.parser.check_event(AliasEvent)
            node = super().compose_node(parent, index)
            if alias:
                self.expanded += sizes.get(id(node), 1)
            else:
                self.expanded += 1
                sizes[id(node)] = self.expanded - start
            if self.expanded > limit:
                raise TooManyValues(node.start_mark.line + 1, node.start_mark.column + 1, limit)
            return node

    return Counting
