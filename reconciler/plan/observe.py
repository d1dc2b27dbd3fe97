"""Observation: everything a profile needs from a host, in one batched read."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.changes import HostFacts
from ..core.files import Files, Request
from ..facts.kernel import BOOT_ID, HOSTNAME, OSRELEASE
from ..hosts.base import ReadableHost
from ..profile.load import Profile

IDENTITY = Request.of(HOSTNAME, OSRELEASE, BOOT_ID)


@dataclass(frozen=True)
class Observation:
    host: HostFacts
    files: Files


def request(profile: Profile, with_persistence: bool = True) -> Request:
    wanted = IDENTITY
    for kind, spec in profile.work(with_persistence):
        wanted |= kind.request(spec)
    return wanted


def observe(host: ReadableHost, profile: Profile, with_persistence: bool = True) -> Observation:
    return observation(host, host.fetch(request(profile, with_persistence)))


def observation(host: ReadableHost, files: Files) -> Observation:
    """An observation from files already fetched, e.g. in one batch with other reads."""
    facts = HostFacts(
        name=files.value(HOSTNAME) or host.name,
        source=host.describe(),
        kernel=files.value(OSRELEASE),
        boot_id=files.value(BOOT_ID),
    )
    return Observation(facts, files)
