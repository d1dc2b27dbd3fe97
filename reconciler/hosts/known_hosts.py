"""known_hosts as OpenSSH reads it (sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT"), as plain data.

A line is `[marker] patterns keytype base64-key [comment]`. Patterns are comma-separated, with
`*` and `?` wildcards, `[host]:port` for a port other than 22, `|1|salt|hash` for a hashed
name, and `!pattern`: a host that matches a negated pattern is not matched by the line at all,
whatever else on it matches. `@revoked` marks a key that must never be accepted, even where
another line vouches for it; `@cert-authority` marks a CA key, which vouches only for
certificates (tune's SSH library checks plain host keys, so such a line never matches one).
A line OpenSSH cannot read is skipped, not fatal: one bad line must not lock every host out.

paramiko reads none of this: its own parser stops at the first line it cannot decode and
takes `!host` as a name to match. `reconciler.hosts.ssh` builds its host keys from `parse` instead.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass
from functools import lru_cache

REVOKED = "@revoked"
CERT_AUTHORITY = "@cert-authority"
MARKERS = (REVOKED, CERT_AUTHORITY)


@dataclass(frozen=True)
class KnownKey:
    """One usable line: `key` is the decoded blob of a key of type `key_type`."""

    marker: str | None
    patterns: tuple[str, ...]
    key_type: str
    key: bytes
    where: str  # FILE:LINE

    def matches(self, host: str) -> bool:
        return matches(self.patterns, host)


@dataclass(frozen=True)
class Parsed:
    keys: tuple[KnownKey, ...]
    skipped: tuple[str, ...]  # "FILE:LINE: why", for lines OpenSSH would skip too


# OpenSSH ends a line at "\n" only and splits it at spaces and tabs (a CRLF line's "\r" is
# trailing whitespace). Python's splitlines and split also break at a form feed, U+0085,
# U+2028 and more: a comment holding one (`# rack 4\x85host ssh-ed25519 KEY`) became a line
# that vouched for a key OpenSSH never reads.
_FIELD_GAP = re.compile(r"[ \t\r]+")


def parse(text: str, name: str) -> Parsed:
    keys: list[KnownKey] = []
    skipped: list[str] = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip(" \t\r")
        if not line or line.startswith("#"):
            continue
        fields = _FIELD_GAP.split(line)
        marker = fields.pop(0) if fields[0].startswith("@") else None
        where = f"{name}:{number}"
        if marker is not None and marker not in MARKERS:
            skipped.append(f"{where}: unknown marker {marker!r}")
            continue
        if len(fields) < 3:
            skipped.append(f"{where}: not `patterns keytype key`")
            continue
        patterns, key_type, blob = fields[:3]
        try:
            key = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError):
            skipped.append(f"{where}: the key is not base64")
            continue
        keys.append(KnownKey(marker, tuple(patterns.split(",")), key_type, key, where))
    return Parsed(tuple(keys), tuple(skipped))


def matches(patterns: tuple[str, ...], host: str) -> bool:
    """OpenSSH's match_hostname: `host` (`name`, or `[name]:port` off port 22) against a line's
    patterns, case-insensitively; a negated pattern that matches rules the line out."""
    host = host.lower()
    positive = False
    for pattern in patterns:
        if pattern.startswith("|1|"):
            positive = positive or _hashed(pattern, host)
            continue
        negated = pattern.startswith("!")
        if _wildcards(pattern.removeprefix("!").lower()).fullmatch(host):
            if negated:
                return False
            positive = True
    return positive


@lru_cache(maxsize=256)
def _wildcards(pattern: str) -> re.Pattern[str]:
    """`*` any run of characters, `?` any one; everything else (`[`, `.`) is itself."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.DOTALL)


def _hashed(entry: str, host: str) -> bool:
    """`|1|salt|hash`: HMAC-SHA1 of the name keyed with the salt (`HashKnownHosts yes`)."""
    parts = entry.split("|")
    if len(parts) != 4:
        return False
    try:
        salt, digest = base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except (binascii.Error, ValueError):
        return False
    mac = hmac.new(salt, host.encode("utf-8", "surrogateescape"), hashlib.sha1).digest()
    return hmac.compare_digest(mac, digest)
