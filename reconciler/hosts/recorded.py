"""Command output as a snapshot records it: what `tune snapshot` captured from a host's
commands, answered again by a snapshot directory or archive, which never runs anything.

Each command has a directory under `RECORDED` named after its program and a digest of its
words (argv can be longer than a file name may be): `argv` holds the words NUL-terminated (for
people reading the snapshot), `status` the exit status in decimal, `stdout` what it printed.
No directory: the command was not installed on the host. A snapshot can only give output this
way, never get anything run: the files are read, bounded as any other.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

from ..core.errors import HostError
from ..core.files import MAX_FILE_BYTES, NOT_INSTALLED, CommandOutput
from ..facts.numbers import unsigned

RECORDED = "/.tune-observed/commands"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def where(argv: tuple[str, ...]) -> str:
    """The directory that records `argv`'s output."""
    digest = hashlib.sha256("\0".join(argv).encode("utf-8", "surrogateescape")).hexdigest()
    program = _UNSAFE.sub("_", argv[0].rsplit("/", 1)[-1])[:64]
    return f"{RECORDED}/{program}-{digest[:16]}"


def record(argv: tuple[str, ...], output: CommandOutput) -> dict[str, bytes]:
    """The files that record `output` (none for a command that is not installed)."""
    if output.status is None:
        return {}
    base = where(argv)
    return {
        f"{base}/argv": b"".join(w.encode("utf-8", "surrogateescape") + b"\0" for w in argv),
        f"{base}/status": f"{output.status}\n".encode(),
        f"{base}/stdout": output.stdout[:MAX_FILE_BYTES],
    }


def answer(argv: tuple[str, ...], read: Callable[[str], bytes | None]) -> CommandOutput:
    """`argv`'s recorded output, from `read` (a snapshot's file, None when absent)."""
    base = where(argv)
    status = read(f"{base}/status")
    if status is None:
        return NOT_INSTALLED
    text = status.decode("ascii", "replace").strip()
    code = unsigned(text)
    if code is None or code > 255:
        raise HostError(f"{base}/status: {text[:20]!r} is not an exit status (0 to 255).")
    return CommandOutput(code, (read(f"{base}/stdout") or b"")[:MAX_FILE_BYTES])
