"""Kernel files that exist but cannot be read, kept in a snapshot.

On a live host `vm.compact_memory` (mode 0200) refuses reads with EACCES and `stable_secret`
with EIO until one is set: the plan says such a key exists and cannot be read, and a write may
still be made. A snapshot holds files, and root reads any file, so the kernel's refusal is kept
beside it: an empty file at the path, and at `UNREADABLE` + the path a file holding the errno
(`/.tune-emulate/unreadable/proc/sys/vm/compact_memory` containing `13`), outside every path a
profile reads, as `reconciler.hosts.emulate.REFUSES` keeps a refused write.

A snapshot is untrusted: a marker counts only for a file under /proc or /sys that the snapshot
holds and the observation read (never tune's own state), and holds nothing but the number of an
errno this system knows, whose text tune prints itself; anything else in a marker is an error.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Mapping

from ..core.errors import HostError
from ..core.files import Files
from ..facts.numbers import unsigned

UNREADABLE = "/.tune-emulate/unreadable"
KERNEL_TREES = ("/proc/", "/sys/")
# The texts `strerror` gives, as a host reports a failed read (head's messages say the same).
_ERRNO_OF = {os.strerror(number): number for number in sorted(errno.errorcode, reverse=True)}


def marker(path: str) -> str:
    return UNREADABLE + path


def kept(files: Files) -> Iterator[tuple[str, bytes]]:
    """The markers that keep `files`' unreadable kernel files in a snapshot: (marker path, its
    contents). A reason that is no errno's text (an SSH host's odd message) is kept as EIO. A
    dangling link (ENOENT) is left out: it is no file, and the snapshot says there is none."""
    for path, reason in sorted(files.errors.items()):
        number = _ERRNO_OF.get(reason, errno.EIO)
        if path.startswith(KERNEL_TREES) and number != errno.ENOENT:
            yield marker(path), f"{number}\n".encode()


def apply_markers(files: Files, markers: Mapping[str, bytes]) -> None:
    """Turn each file read into `files` that a marker names into the read error it records."""
    for where, data in markers.items():
        path = where.removeprefix(UNREADABLE)
        if not path.startswith(KERNEL_TREES) or path not in files.contents:
            continue
        text = data.decode("ascii", "replace").strip()
        code = unsigned(text)
        if code is None or code not in errno.errorcode:
            raise HostError(
                f"{where}: holds {text[:40]!r}, not the number of an errno; a snapshot marks "
                f"a file it could not read with the errno the read failed with."
            )
        del files.contents[path]
        files.errors[path] = os.strerror(code)
