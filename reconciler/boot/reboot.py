"""After the boot a reboot-phase apply prepared: reboot, wait for the new boot, verify, then make
the new boot configuration the default or roll it back.

`tune apply --reboot -H HOST` and `tune verify` end in the same `conclude`; what differs is
where its writes go, which the host's `Engine` decides: through the host from this process (this
machine), or as one sh script each over SSH (no Python on the target), so the round trips after
the boot are bounded: read pending.json, verify (two reads), promote or roll back, clear
pending.json.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..apply.engines import Engine
from ..apply.journal import rolled_back_run
from ..apply.pending import PendingBoot
from ..core.errors import ApplyFailed, HostError, HostKeyError, RebootTimeout
from ..core.few import LINE, cut, first_few
from ..core.files import Request
from ..core.words import counted
from ..facts.kernel import BOOT_ID
from ..hosts.base import Host
from ..steps.ops import PutFile
from .verify import BootVerdict, verify

if TYPE_CHECKING:
    from ..profile.load import LoadedProfile

# How often a rebooting host's boot id is read: on the host while it is up, else by a reconnect.
POLL_S = 2.0
# The longest one try waits on the host for the boot id to change (`value_unlike`): long enough
# that a host's reboot costs a few round trips, short enough that a connection left open by a
# host that went down without closing it (NAT, QEMU's user networking) is given up soon.
LONG_POLL_S = 10.0


def wait_for_new_boot(
    host: Host,
    before: str | None,
    timeout: float,
    *,
    interval: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] | None = None,
) -> str:
    """Ask for the boot id until it differs from `before`; `RebootTimeout` after `timeout` s.
    Each try waits on the host (`value_unlike`, every `interval` s) while it stays up; while it
    is down, connecting fails or a read breaks off: both mean "not yet"; a changed host key
    does not. `progress` hears how long it has waited, after each try. (A rollout waits
    for many hosts on a few threads: `rollout.pool`.)"""
    start = clock()
    deadline = start + timeout
    while True:
        within = max(0.0, min(LONG_POLL_S, deadline - clock()))
        tried = clock()
        now = poll_boot_id(host, before, within, interval)
        if now is not None:
            return now
        if clock() >= deadline:
            raise reboot_timed_out(host, timeout)
        if progress is not None:
            progress(
                f"Waiting for {host.describe()} to boot: {clock() - start:.0f} of {timeout:g} s"
            )
        # A try that waited on the host has waited already: only what is left of `interval`.
        sleep(max(0.0, interval - (clock() - tried)))


def poll_boot_id(host: Host, before: str | None, within: float, interval: float) -> str | None:
    """One try: the host's new boot id, or None when it is not up yet or still on `before`
    (waited on the host for up to `within` s, read every `interval` s; 0: one read). A host
    that is down fails to connect or breaks off a read: its connection is closed, "not yet";
    a changed host key is raised."""
    try:
        now = host.value_unlike(BOOT_ID, before, within, interval)
    except HostKeyError:
        raise
    except HostError:
        host.close()
        return None
    return now if now and now != before else None


def reboot_timed_out(host: Host, timeout: float) -> RebootTimeout:
    return RebootTimeout(
        f"{host.describe()} did not come back with a new boot id within {timeout:g} s "
        "of the reboot; the run stays pending: once the host is up, `tune verify` "
        "checks the boot (and rolls the boot configuration back if it did not hold)."
    )


def boot_id_of(host: Host) -> str | None:
    """The host's boot id now (one round trip)."""
    return host.fetch(Request.of(BOOT_ID)).value(BOOT_ID)


# Runs after the boot checks, before the verdict is acted on: the probes measured again
# (`verify.probe_after_boot`); what it adds to `verdict.failed` rolls the boot back too.
AfterBoot = Callable[[PendingBoot, BootVerdict], object]

# The files that say what the verification came to (status.json), from the verdict ("held" or
# "failed") and the boot id verified: written with pending.json's removal, in one go.
Said = Callable[[str, "str | None"], tuple[PutFile, ...]]


def conclude(
    engine: Engine,
    pending: PendingBoot,
    after_boot: AfterBoot | None = None,
    said: Said | None = None,
    applied: LoadedProfile | None = None,
) -> BootVerdict:
    """Verify the boot; then make a try-once configuration the default, or roll the run's boot
    configuration back (`ApplyFailed`, exit 3). pending.json is cleared either way, and the
    files of `said` written with that. `applied`: the profile the run stored, if known
    (`verify`: its runtime knobs read in the same batch)."""
    verdict = verify(engine.host, pending, applied)
    if after_boot is not None:
        after_boot(pending, verdict)
    if not verdict.failed and pending.promote:
        try:
            engine.promote(pending.run_id, pending.promote)
        except ApplyFailed as exc:
            verdict.failed.append(f"making the boot configuration the default failed: {exc}")
    if verdict.failed:
        run = rolled_back_run(engine.host, pending.run_id)
        done = engine.rollback(run, boot_only=True).result
        engine.clear_pending(said("failed", verdict.boot_id) if said else ())
        writes = done.restored + done.unchanged
        undone = (
            f"{len(done.failures)} not restored: " + first_few(done.failures)
            if done.failures
            else f"its {counted(writes, 'write')} to the boot configuration "
            + ("is" if writes == 1 else "are")
            + " rolled back"
        )
        raise BootFailed(verdict, pending.run_id, undone)
    engine.clear_pending(said("held", verdict.boot_id) if said else ())
    return verdict


class BootFailed(ApplyFailed):
    """A boot that did not bring what the run configured for it, whose boot configuration was
    then rolled back. Two lines of a few hundred characters whatever the host's size: what did
    not hold (the first few, and how many: `reason`, a rollout's reason for the host), then
    what was rolled back; `verdict.failed` is the whole list (`tune verify --format json`)."""

    def __init__(self, verdict: BootVerdict, run_id: str, undone: str) -> None:
        self.verdict = verdict
        self.run_id = run_id
        self.undone = undone
        failed = verdict.failed
        things = "thing" if len(failed) == 1 else "things"
        said = f"after the boot, {len(failed)} {things} did not hold: "
        # The things named get what is left of a line (an item alone may take all of it).
        self.reason = f"{said}{first_few(failed, width=LINE - len(said) - 20)}."
        super().__init__(
            self.reason,
            f"Run {run_id}: {cut(undone, 200)}; reboot again to boot the prior configuration.",
        )
