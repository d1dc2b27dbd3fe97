"""One exception hierarchy. Only the CLI turns these into messages and exit codes."""

from __future__ import annotations

from dataclasses import dataclass

from .words import counted


class ExitCode:
    IN_SYNC = 0
    HOST_ERROR = 1
    CHANGES = 2
    APPLY_FAILED = 3
    REBOOT_TIMEOUT = 4
    UNFINISHED_RUN = 5
    JOURNAL = 6  # a run journal tune cannot read or understand (damaged, unreadable, too large)
    NOT_CONFIRMED = 7  # the operator said no, or could not be asked: nothing was written
    BOOT_CONFIG_UNKNOWN = 8  # the configured kernel command line cannot be known exactly
    HOST_CHANGED = 9  # a pushed apply found the host changed since it read it: nothing written
    NOT_REBOOTED = 10  # `tune verify` before the boot an apply prepared: nothing was checked
    NO_TRY_ONCE = 11  # `tune apply --arm` on a host whose boot loader cannot boot a line once
    USAGE = 64
    INVALID_PROFILE = 65
    INTERNAL = 70  # sysexits' EX_SOFTWARE: a bug of tune's
    NO_SPACE = 74  # sysexits' EX_IOERR: the device (or the quota) is full
    INTERRUPTED = 130  # the shells' 128 + SIGINT


# The one list of what each exit code means: `tune --help` prints it, and a test holds the
# documentation's table of exit codes (docs/reference/exit-codes.md) to it, word for word.
EXIT_CODES: dict[int, str] = {
    ExitCode.IN_SYNC: "in sync (nothing to change, every check passes; a parameter waiting "
    "for a reboot does not count), or the command did what it was asked",
    ExitCode.HOST_ERROR: "the host could not be read or written (or tune's state there is "
    "not root's)",
    ExitCode.CHANGES: "changes to make, drift, failed checks or actionable findings",
    ExitCode.APPLY_FAILED: "an apply or a verification failed and was rolled back, or a "
    "rollback left changes not restored",
    ExitCode.REBOOT_TIMEOUT: "a host rebooted by `tune apply --reboot` did not come back in time",
    ExitCode.UNFINISHED_RUN: "an earlier run was interrupted and awaits `tune rollback` (or "
    "`tune apply --after-interrupted`)",
    ExitCode.JOURNAL: "a run journal is damaged or cannot be read (the message names the file "
    "and line, and what can still be rolled back)",
    ExitCode.NOT_CONFIRMED: "not confirmed: the answer was no, or there was no terminal to ask "
    "and no `--yes`; nothing was written",
    ExitCode.BOOT_CONFIG_UNKNOWN: "the configured kernel command line cannot be known exactly "
    "(the message names the file and line tune cannot evaluate); nothing was written",
    ExitCode.HOST_CHANGED: "the host changed between the read and the pushed apply (a pull "
    "or another run wrote it meanwhile); nothing was written: run again",
    ExitCode.NOT_REBOOTED: "not rebooted yet: `tune verify` ran in the same boot as the apply "
    "that prepared the next one; nothing was checked, the boot stays pending",
    ExitCode.NO_TRY_ONCE: "`tune apply --arm` found no one-time boot on the host (the message "
    "says why); nothing was written",
    ExitCode.USAGE: "usage error",
    ExitCode.INVALID_PROFILE: "invalid profile, or not the one `--profile-digest` pins "
    "(`FILE:LINE:COL: message` on stderr)",
    ExitCode.INTERNAL: "internal error, a bug of tune's (`TUNE_DEBUG=1` shows the traceback)",
    ExitCode.NO_SPACE: "no space left on a device (nothing was changed, or the run was rolled "
    "back)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C) before anything was written; an interrupted "
    "run rolls back and exits 3",
}


def reason(exc: BaseException) -> str:
    """Why an operation failed, to end a sentence that already names the file: an OSError's
    text as the C library gives it (`Read-only file system`), never Python's
    `[Errno 30] Read-only file system: '/x'`, which repeats the path in a repr."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
    return str(exc)


class TuneError(Exception):
    """An error the user can act on: one sentence (or one a problem), one exit code."""

    exit_code = ExitCode.HOST_ERROR

    def __str__(self) -> str:
        return "\n".join(self.problems())

    def problems(self) -> list[str]:
        """One sentence a problem (`HostError(*problems)`), as the CLI prints one a line."""
        return [str(arg) for arg in self.args]


class UsageError(TuneError):
    exit_code = ExitCode.USAGE


class NotConfirmed(TuneError):
    """A command that writes to a host was not confirmed: the operator declined, or there was
    no terminal to ask on and no `--yes` (cron, CI, `ssh host tune apply`)."""

    exit_code = ExitCode.NOT_CONFIRMED


class HostError(TuneError):
    """The host could not be read (missing snapshot, unreadable file, unreachable)."""

    exit_code = ExitCode.HOST_ERROR


class JournalError(HostError):
    """A run journal that exists but cannot be read or understood: the message names the file
    (and the line) and says what can still be rolled back."""

    exit_code = ExitCode.JOURNAL


class BootConfigUnknown(HostError):
    """The boot configuration's command line cannot be known exactly (a GRUB file tune cannot
    evaluate, a drop-in after tune's that overrides it): writing from a guess could drop
    parameters nobody asked to drop, so nothing is written."""

    exit_code = ExitCode.BOOT_CONFIG_UNKNOWN


class NoSpace(HostError):
    """A write that found the device full (ENOSPC) or the user's quota spent (EDQUOT): nothing
    a retry fixes, and nothing tune itself got wrong."""

    exit_code = ExitCode.NO_SPACE


class Refused(HostError):
    """The kernel rejected a write to an attribute it has: EINVAL, EOPNOTSUPP, or ENOTSUPP (524,
    e.g. `kernel.nmi_watchdog` without perf counters). Unlike a value read back different, this
    knob cannot be set on this host at all."""


class OutputError(TuneError):
    """A report or metrics file that could not be written."""

    exit_code = ExitCode.HOST_ERROR


class LockHeld(HostError):
    """Another `tune apply` or `tune rollback` held the target's lock for as long as tune waits
    (`apply.lock`); the message names the holder."""


class StalePlan(HostError):
    """A saved plan whose observed values no longer hold on the host."""


class UnfinishedRun(TuneError):
    """The newest run stopped without an end (killed, the power lost): a new apply waits
    until it is rolled back or the operator chooses to apply over it."""

    exit_code = ExitCode.UNFINISHED_RUN

    def __init__(self, run_id: str, writes: int, host: str) -> None:
        self.run_id = run_id
        # Said only once the host's lock was found free (`journal.before_apply`): a run still
        # going is `LockHeld`, never work the operator is told to roll back.
        super().__init__(
            f"run {run_id} on {host} was interrupted after {counted(writes, 'write')} and was "
            "never rolled back: `tune rollback` restores them, or `tune apply --after-interrupted` "
            "applies over them (one `tune rollback` then undoes both runs)."
        )


class RunKilled(UnfinishedRun):
    """A pushed run whose script died on the target (kill -9, the OOM killer) without its
    `end`: nothing rolled it back, and the controller says so as soon as the script is gone."""

    def __init__(self, run_id: str, message: str) -> None:
        self.run_id = run_id
        TuneError.__init__(self, message)


class ApplyFailed(TuneError):
    """A write or read-back failed (or the run was interrupted); done steps were rolled back."""

    exit_code = ExitCode.APPLY_FAILED


class HostChanged(ApplyFailed):
    """A pushed run, holding the host's lock, found a value other than the one its
    observation read (a pull ran in between): it stopped before its first write."""

    exit_code = ExitCode.HOST_CHANGED


class NotRebooted(HostError):
    """`tune verify` in the same boot the apply was made in (the same boot id): the reboot has
    not happened yet, which an engine that owns the reboot must tell apart from a host it
    cannot read."""

    exit_code = ExitCode.NOT_REBOOTED


class NoTryOnce(HostError):
    """`tune apply --arm` where the boot loader offers no one-time boot for the new command
    line (the message says why): arming would write it as the default, with no fallback."""

    exit_code = ExitCode.NO_TRY_ONCE


class RebootTimeout(HostError):
    """A rebooted host did not come back with a new boot id within the timeout."""

    exit_code = ExitCode.REBOOT_TIMEOUT


class ConnectError(HostError):
    """An SSH host could not be reached, refused us, or did not answer in time."""


class HostKeyError(HostError):
    """An SSH host presented a key known_hosts does not vouch for."""


class InventoryError(UsageError):
    """An inventory file tune cannot read, or a --limit that selects no host."""


@dataclass(frozen=True)
class Diagnostic:
    """A problem at a place in a profile file; line and column are 1-based."""

    file: str
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.message}"


class ProfileError(TuneError):
    """A profile that cannot be used; carries every diagnostic found, not just the first."""

    exit_code = ExitCode.INVALID_PROFILE

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        super().__init__(*(str(d) for d in diagnostics))
