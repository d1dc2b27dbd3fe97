"""Where a profile comes from on the command line: a path, a bundled name, or a `file://` URL,
and the digest that pins its content (`--profile-digest sha256:HEX`).

Pull mode (each host checks or applies a profile its own timer finds in a directory that the
operator's tooling keeps in sync) needs both: a URL names the file the way that tooling does, and
the digest says which content the operator released, so a half-synced or edited directory is
refused before anything is read from the host. tune never fetches: any scheme but `file` is a
usage error, and the operator's git, package or config management brings the file there.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from ..core.errors import UsageError

# RFC 3986's scheme, then `:`: `https://`, `s3://`, but not a relative path such as `./a:b`.
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
ALGORITHM = "sha256"
PINNED = re.compile(r"sha256:([0-9a-f]{64})")


def is_url(spec: str) -> bool:
    return URL.match(spec) is not None


def path_of_url(spec: str) -> str:
    """The local path a `file://` URL names (`file:///srv/tune/gpu.yaml`, or with the host
    `localhost`, as RFC 8089 allows); any other URL is a usage error."""
    parts = urlsplit(spec)
    if parts.scheme.lower() != "file":
        raise UsageError(
            f"{spec}: tune reads profiles from files only (a path or a file:// URL), never "
            f"over {parts.scheme}://; have your tooling sync the profile to a path on the host."
        )
    if parts.netloc not in ("", "localhost"):
        raise UsageError(
            f"{spec}: a file:// URL names a file on this machine; {parts.netloc!r} is another "
            "host (write file:///PATH)."
        )
    if parts.query or parts.fragment:
        raise UsageError(
            f"{spec}: a profile URL takes no query or fragment; pin its content with "
            "--profile-digest sha256:HEX."
        )
    path = unquote(parts.path)
    if not path.startswith("/") or "\0" in path:
        raise UsageError(f"{spec}: a file:// URL needs an absolute path (file:///PATH).")
    return path


def pinned(value: str) -> str:
    """The hex digest `--profile-digest` pins, from `sha256:HEX` (hex case does not matter)."""
    found = PINNED.fullmatch(value.strip().lower())
    if found is None:
        raise UsageError(
            f"{value!r} is not sha256: and 64 hexadecimal digits "
            "(`tune validate PROFILE` prints the profile's digest)."
        )
    return found.group(1)


def set_digest(contents: Iterable[str]) -> str:
    """The digest of a profile and every parent it extends: the sha256 of each file's sha256
    (hex, one a line) in the order tune reads them, the profile first, then each parent as
    `extends` lists it, its own parents before the next. One digest covers the whole set, so
    neither an edited parent nor a sync that has brought the new profile but not yet its new
    parent passes as the profile released; `sha256sum FILES | cut -d' ' -f1 | sha256sum`
    computes it in that order."""
    lines = "".join(f"{content}\n" for content in contents)
    return hashlib.sha256(lines.encode()).hexdigest()


def shown(digest: str) -> str:
    return f"{ALGORITHM}:{digest}"
