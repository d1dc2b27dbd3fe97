"""The profile this host is pinned to, for the programs an engine runs without arguments
(Slurm's RebootProgram and HealthCheckProgram, a DaemonSet's check, an Ansible task): the
`PROFILE_URL` and `PROFILE_DIGEST` of `/etc/tune/pull.env`, the file the pull units read
(`EnvironmentFile=`), so a host has one pin whoever calls tune. Read only when root or the
caller wrote it (`config.trusted_text`), as tune's config files are."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError
from ..core.printable import printable
from .config import trusted_text

PULL_ENV = Path("/etc/tune/pull.env")
_LINE = re.compile(r"(PROFILE_URL|PROFILE_DIGEST)=(.*)")


@dataclass(frozen=True)
class Pinned:
    profile: str  # a path or a file:// URL, as `tune apply` takes it
    digest: str  # "sha256:...", as `tune validate` prints it


def _unquoted(value: str) -> str:
    """A systemd EnvironmentFile value: one pair of surrounding quotes removed."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def pinned(path: Path = PULL_ENV) -> Pinned:
    """The pinned profile, or UsageError in one sentence: there is no pin, or it lacks a key."""
    text = trusted_text(path)
    if text is None:
        raise UsageError(
            f"{path} does not exist: pin the profile there (PROFILE_URL, PROFILE_DIGEST) or "
            "give --profile and --profile-digest."
        )
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.fullmatch(line.strip())
        if match:
            values[match[1]] = _unquoted(match[2].strip())
    missing = [key for key in ("PROFILE_URL", "PROFILE_DIGEST") if not values.get(key)]
    if missing:
        raise UsageError(f"{path}: no {' or '.join(missing)}; tune needs both to pin a profile.")
    return Pinned(printable(values["PROFILE_URL"]), values["PROFILE_DIGEST"])
