"""One exception hierarchy. Only the CLI turns these into messages and exit codes."""

from __future__ import annotations

from dataclasses import dataclass


class ExitCode:
    IN_SYNC = 0
    HOST_ERROR = 1
    CHANGES = 2
    APPLY_FAILED = 3
    USAGE = 64
    INVALID_PROFILE = 65


class TuneError(Exception):
    """An error the user can act on: one sentence, one exit code."""

    exit_code = ExitCode.HOST_ERROR


class UsageError(TuneError):
    exit_code = ExitCode.USAGE


class HostError(TuneError):
    """The host could not be read (missing snapshot, unreadable file, unreachable)."""

    exit_code = ExitCode.HOST_ERROR


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
        super().__init__("\n".join(str(d) for d in diagnostics))
