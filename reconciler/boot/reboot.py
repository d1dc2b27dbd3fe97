"""After the boot a reboot-phase apply prepared: reboot, wait for the new boot, verify, then make
the new boot configuration the default or roll it back.

`tune apply --reboot -H HOST` and `tune verify` end in the same `conclude`; what differs is
where its writes go: `LocalTarget` writes through the host (this machine), `RemoteTarget` sends
each as one sh script over SSH (no Python on the target), so the round trips after the boot are
bounded: read pending.json, verify (two reads), promote or roll back, clear pending.json.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable

from ..apply.steps import DeleteFile, Step
from ..errors import ApplyFailed, HostError, HostKeyError, RebootTimeout
from ..facts.kernel import BOOT_ID
from ..hosts.base import Host
from ..hosts.files import Request
from ..hosts.shell import ShellHost
from .verify import PENDING, BootVerdict, PendingBoot, verify

# How often a rebooting host is asked for its boot id (each try may take the connect timeout).
POLL_S = 2.0


class BootTarget(ABC):
    """The writes that follow a boot, on one host."""

    host: Host

    @abstractmethod
    def promote(self, run_id: str, steps: tuple[Step, ...]) -> None:
        """Append `steps` to the run and make them; `ApplyFailed` when one fails."""

    @abstractmethod
    def rollback_boot(self, run_id: str) -> tuple[int, list[str]]:
        """Restore the run's boot configuration: (changes now at their prior value, failures)."""

    @abstractmethod
    def clear_pending(self) -> None: ...

    @abstractmethod
    def reboot(self) -> None:
        """Start a reboot that outlives this connection."""


class LocalTarget(BootTarget):
    def __init__(self, host: Host) -> None:
        self.host = host

    def promote(self, run_id: str, steps: tuple[Step, ...]) -> None:
        from ..apply.engine import extend

        extend(self.host, run_id, steps)

    def rollback_boot(self, run_id: str) -> tuple[int, list[str]]:
        from ..apply.engine import rollback

        done = rollback(self.host, run_id, boot_only=True)
        return done.result.restored + done.result.unchanged, done.result.failures

    def clear_pending(self) -> None:
        self.host.delete_file(PENDING)

    def reboot(self) -> None:
        done = self.host.run(["systemctl", "reboot"])
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()
            raise HostError(f"{self.host.describe()}: `systemctl reboot` failed: {said}.")


class RemoteTarget(BootTarget):
    def __init__(self, host: ShellHost) -> None:
        self.host: ShellHost = host

    def promote(self, run_id: str, steps: tuple[Step, ...]) -> None:
        from ..apply.sh_engine import extend_remote

        extend_remote(self.host, run_id, steps)

    def rollback_boot(self, run_id: str) -> tuple[int, list[str]]:
        from ..apply.sh_engine import rollback_remote

        done = rollback_remote(self.host, run_id, boot_only=True)
        return done.result.restored + done.result.unchanged, done.result.failures

    def clear_pending(self) -> None:
        from ..apply.sh_engine import run_ops

        run_ops(self.host, (DeleteFile(PENDING),), f"removing {PENDING}")

    def reboot(self) -> None:
        from ..apply.sh_engine import start_reboot

        start_reboot(self.host)
        # The old connection may hang across the reboot: the next read opens a new one.
        self.host.close()


def wait_for_new_boot(
    host: Host,
    before: str | None,
    timeout: float,
    *,
    interval: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Ask for the boot id until it differs from `before`; `RebootTimeout` after `timeout` s.
    While the host is down, connecting fails or a read breaks off: both mean "not yet"; a
    changed host key does not."""
    deadline = clock() + timeout
    while True:
        try:
            now = host.fetch(Request.of(BOOT_ID)).value(BOOT_ID)
            if now and now != before:
                return now
        except HostKeyError:
            raise
        except HostError:
            host.close()
        if clock() >= deadline:
            raise RebootTimeout(
                f"{host.describe()} did not come back with a new boot id within {timeout:g} s "
                "of the reboot; the run stays pending: once the host is up, `tune verify` "
                "checks the boot (and rolls the boot configuration back if it did not hold)."
            )
        sleep(interval)


# Runs after the boot checks, before the verdict is acted on: the probes measured again
# (`verify.probe_after_boot`); what it adds to `verdict.failed` rolls the boot back too.
AfterBoot = Callable[[PendingBoot, BootVerdict], object]


def conclude(
    target: BootTarget, pending: PendingBoot, after_boot: AfterBoot | None = None
) -> BootVerdict:
    """Verify the boot; then make a try-once configuration the default, or roll the run's boot
    configuration back (`ApplyFailed`, exit 3). pending.json is cleared either way."""
    verdict = verify(target.host, pending)
    if after_boot is not None:
        after_boot(pending, verdict)
    if not verdict.failed and pending.promote:
        try:
            target.promote(pending.run_id, pending.promote)
        except ApplyFailed as exc:
            verdict.failed.append(f"making the boot configuration the default failed: {exc}")
    if verdict.failed:
        undone_count, failures = target.rollback_boot(pending.run_id)
        target.clear_pending()
        undone = (
            f"{len(failures)} not restored: " + "; ".join(failures)
            if failures
            else f"its {undone_count} boot-configuration changes are rolled back"
        )
        raise ApplyFailed(
            f"after the boot, {len(verdict.failed)} things did not hold: "
            + "; ".join(verdict.failed)
            + f". Run {pending.run_id}: {undone}; reboot again to boot the prior configuration."
        )
    target.clear_pending()
    return verdict
