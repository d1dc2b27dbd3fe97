"""The engines that write a host: one interface, `Engine`, and its two implementations.

`ShellEngine` writes every live kernel: it sends its work as POSIX sh scripts
(`apply.sh_engine`) to a host reached over SSH, which needs no Python, or to this machine's own
`sh` (`LocalEngine`, `hosts.local`), so a local, a pushed and a pulled apply are one code path.
An apply runs detached there, so a dropped connection cannot stop it halfway, and the round
trips are bounded by the phases, never by the number of knobs. `PythonEngine` is the contained
snapshot simulator: it writes a snapshot directory from this process, every path resolved
inside it (`hosts.beneath`), never this machine.

Everything above them (`flow.orchestration`: prepare, confirm, probes around the phase, the
pending record, the reboot, rollback chains) is written once against `Engine`; `engine_for` is
the only place that looks at what kind of host it is.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, ClassVar

from ..core.errors import HostError
from ..hosts.base import Completed, Host
from ..hosts.directory import LocalHost
from ..hosts.local import LocalShell
from ..hosts.shell import ShellHost
from ..steps.ops import DeleteFile, PutFile, Skipped, Step
from .journal import LOCK, Run, read_run

if TYPE_CHECKING:
    from ..probes.phase import PhaseProbes
    from ..probes.runner import Executor
    from ..profile.load import LoadedProfile
    from .pending import PendingBoot
    from .restored import RollbackResult
    from .work import Work


@dataclass(frozen=True)
class ApplyResult:
    """What an apply came to on one host."""

    run_id: str | None  # None: the host was already in sync, no run was started
    writes: int  # the knobs written: optional knobs the kernel refused are not counted
    unsupported: tuple[str, ...] = ()  # a line for each optional knob the kernel refused
    skipped: tuple[Skipped, ...] = ()  # --skip-missing: changes left out, the host lacking


class Engine(ABC):
    """How tune's work reaches one host: a run's steps, the promotion of a one-time boot, the
    restore of a run, pending.json, the reboot, and where the profile's probes run."""

    host: Host
    # Whether this process outlives the host's reboot, to wait for the new boot and verify it
    # (over SSH); on this machine `tune verify` runs after the boot instead.
    outlives_reboot: ClassVar[bool]

    @abstractmethod
    def session(self) -> contextlib.AbstractContextManager[None]:
        """Hold the host for one command that writes: the lock, held here for the whole
        command, or nothing where each script takes the lock on the target."""

    @abstractmethod
    def wait_for_lock(self) -> None:
        """Before a run where a run without its end may still be going: wait for the lock as
        a run would (`lock.WAIT` seconds at most), `LockHeld` naming its holder if it stays
        held; nothing where `session` holds it already."""

    @abstractmethod
    def preflight(self, steps: tuple[Step, ...]) -> list[str]:
        """Every unmet requirement of `steps` (the run's and its promotion's), found before the
        first write; none here when the target checks them itself before it starts the run."""

    @abstractmethod
    def unloadable(self, modules: tuple[str, ...]) -> Mapping[str, str]:
        """The modules among `modules` that the host cannot load, each with the first line
        `modprobe --dry-run` printed (--skip-missing leaves out those it does not have)."""

    @abstractmethod
    def apply(
        self,
        work: Work,
        loaded: LoadedProfile,
        *,
        phase: str,
        run_id: str,
        around: PhaseProbes | None = None,
        after: tuple[PutFile, ...] = (),
    ) -> ApplyResult:
        """Run `work.steps` as run `run_id`; `ApplyFailed` (exit 3) after rolling back.
        `after`: files written once every step holds, inside the run (pending.json)."""

    @abstractmethod
    def store_profile(
        self, loaded: LoadedProfile, stored: bytes | None, also: tuple[PutFile, ...] = ()
    ) -> None:
        """profile.yaml after an apply with nothing to change, when `stored` differs; `also`:
        files written with it (status.json), in one go."""

    @abstractmethod
    def promote(self, run_id: str, steps: tuple[Step, ...]) -> None:
        """Append `steps` to the run and make them; `ApplyFailed` when one fails."""

    @abstractmethod
    def rollback(self, run: Run, *, boot_only: bool = False) -> RollbackResult:
        """Restore one run from its journal; `boot_only`: only its boot configuration."""

    @abstractmethod
    def clear_pending(self, also: tuple[PutFile, ...] = ()) -> None:
        """Remove pending.json; `also`: files written with it (status.json), in one go."""

    @abstractmethod
    def write_files(self, files: tuple[PutFile, ...], doing: str) -> None:
        """Replace `files` (tune's own state: status.json) outside any run, each atomically;
        `HostError` saying what it was `doing` when one cannot be written."""

    @abstractmethod
    def reboot(self, pending: PendingBoot) -> None:
        """Start a reboot that outlives this connection. The request itself first marks
        pending.json, fsynced, with the boot id it asks from (`PendingBoot.reboot_asked`), in
        the same step as the ask: a controller that journaled the reboot and died before this
        left no mark, and its resume asks then (`rollout.run`), exactly once."""

    @abstractmethod
    def probe_executor(self) -> tuple[Executor, dict[str, str]]:
        """Where the profile's probes run, and the environment they get."""

    @abstractmethod
    def run_command(self, argv: Sequence[str]) -> Completed:
        """Run `argv` on the host (a container's restart, `ls /dev` inside it)."""

    def verify_command(self) -> str:
        """What the operator runs after a reboot they make themselves."""
        return "tune verify"


class PythonEngine(Engine):
    """A snapshot directory (`root`) written from this process, as its kernel and tools would
    write it (`hosts.emulate`); an archive, which refuses every write. Never this machine."""

    outlives_reboot = False

    def __init__(self, host: Host, root: str | None = None) -> None:
        if isinstance(host, LocalHost):
            raise HostError(f"{host.describe()}: a live kernel is written by the sh executor.")
        self.host = host
        self.root = root

    def session(self) -> contextlib.AbstractContextManager[None]:
        self.host.check_privileges()
        return self.host.lock(LOCK)

    def wait_for_lock(self) -> None:
        pass  # `session` holds it for the whole command

    def preflight(self, steps: tuple[Step, ...]) -> list[str]:
        from .preflight import preflight

        return preflight(self.host, steps)

    def unloadable(self, modules: tuple[str, ...]) -> Mapping[str, str]:
        from .preflight import unloadable_here

        return unloadable_here(self.host, modules)

    def apply(
        self,
        work: Work,
        loaded: LoadedProfile,
        *,
        phase: str,
        run_id: str,
        around: PhaseProbes | None = None,
        after: tuple[PutFile, ...] = (),
    ) -> ApplyResult:
        from .python_engine import execute

        execute(self.host, work, loaded, phase=phase, around=around, run_id=run_id, after=after)
        run = read_run(self.host, run_id)
        unsupported = tuple(run.unsupported) if run is not None else ()
        return ApplyResult(run_id, len(work.steps) - len(unsupported), unsupported, work.skipped)

    def store_profile(
        self, loaded: LoadedProfile, stored: bytes | None, also: tuple[PutFile, ...] = ()
    ) -> None:
        from .python_engine import store_profile

        store_profile(self.host, None, loaded)  # a local read: it compares what is there now
        self.write_files(also, "")

    def promote(self, run_id: str, steps: tuple[Step, ...]) -> None:
        from .python_engine import extend

        extend(self.host, run_id, steps)

    def rollback(self, run: Run, *, boot_only: bool = False) -> RollbackResult:
        from .python_engine import restore_run

        return restore_run(self.host, run, boot_only=boot_only)

    def clear_pending(self, also: tuple[PutFile, ...] = ()) -> None:
        from .pending import PENDING

        self.host.delete_file(PENDING)
        self.write_files(also, "")

    def write_files(self, files: tuple[PutFile, ...], doing: str) -> None:
        for op in files:
            self.host.put_file(op.path, op.data, op.mode)

    def run_command(self, argv: Sequence[str]) -> Completed:
        return self.host.run(argv)

    def reboot(self, pending: PendingBoot) -> None:
        from .pending import PENDING

        self.host.put_file(PENDING, pending.reboot_asked().to_json().encode(), 0o600)
        done = self.host.run(["systemctl", "reboot"])
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()
            raise HostError(f"{self.host.describe()}: `systemctl reboot` failed: {said}.")

    def probe_executor(self) -> tuple[Executor, dict[str, str]]:
        """On this machine, with TUNE_ROOT naming the snapshot, to measure it."""
        from ..probes.runner import run_argv

        return run_argv, {"TUNE_ROOT": str(Path(self.root).resolve())} if self.root else {}


class ShellEngine(Engine):
    """A host reached over SSH, written by sh scripts; `timeout`: the command timeout, how long
    a run may take to answer a poll (and a probe on top of its own timeout)."""

    outlives_reboot = True

    def __init__(self, host: ShellHost, timeout: float = 60.0) -> None:
        self.host: ShellHost = host
        self.timeout = timeout

    def session(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # each script takes the lock on the target

    def wait_for_lock(self) -> None:
        from .sh_engine import wait_for_lock

        wait_for_lock(self.host)

    def preflight(self, steps: tuple[Step, ...]) -> list[str]:
        return []  # the script that starts the run checks them on the target, before any write

    def unloadable(self, modules: tuple[str, ...]) -> Mapping[str, str]:
        from .sh_engine import unloadable_remote

        return unloadable_remote(self.host, modules)

    def apply(
        self,
        work: Work,
        loaded: LoadedProfile,
        *,
        phase: str,
        run_id: str,
        around: PhaseProbes | None = None,
        after: tuple[PutFile, ...] = (),
    ) -> ApplyResult:
        from .sh_engine import apply_remote

        done = apply_remote(
            self.host,
            work,
            loaded,
            phase=phase,
            timeout=self.timeout,
            around=around,
            run_id=run_id,
            after=after,
        )
        return ApplyResult(
            done.run_id, done.writes - len(done.unsupported), done.unsupported, work.skipped
        )

    def store_profile(
        self, loaded: LoadedProfile, stored: bytes | None, also: tuple[PutFile, ...] = ()
    ) -> None:
        from .sh_engine import run_ops, store_profile_remote
        from .work import profile_text

        text = profile_text(loaded)
        if stored is None or stored.decode("utf-8", "replace") != text:
            store_profile_remote(self.host, text, also)
        elif also:
            run_ops(self.host, also, "writing " + ", ".join(op.path for op in also))

    def promote(self, run_id: str, steps: tuple[Step, ...]) -> None:
        from .sh_engine import extend_remote

        extend_remote(self.host, run_id, steps)

    def rollback(self, run: Run, *, boot_only: bool = False) -> RollbackResult:
        from .sh_engine import restore_remote

        return restore_remote(self.host, run, boot_only=boot_only)

    def clear_pending(self, also: tuple[PutFile, ...] = ()) -> None:
        from .pending import PENDING
        from .sh_engine import run_ops

        run_ops(self.host, (DeleteFile(PENDING), *also), f"removing {PENDING}")

    def write_files(self, files: tuple[PutFile, ...], doing: str) -> None:
        from .sh_engine import run_ops

        run_ops(self.host, files, doing)  # one round trip for all of them

    def run_command(self, argv: Sequence[str]) -> Completed:
        from .sh_engine import run_remote

        return run_remote(self.host, argv)

    def reboot(self, pending: PendingBoot) -> None:
        from .sh_engine import start_reboot

        start_reboot(self.host, pending.reboot_asked())
        # The old connection may hang across the reboot: the next read opens a new one.
        self.host.close()

    def probe_executor(self) -> tuple[Executor, dict[str, str]]:
        """On the target itself, one round trip per run of a probe."""
        from ..probes.remote import remote_executor

        return remote_executor(self.host, self.timeout), {}

    def verify_command(self) -> str:
        return f"tune verify -H {self.host.name}"


class LocalEngine(ShellEngine):
    """This machine, written by the same scripts as a host over SSH, run by a local `sh`
    (`hosts.local.LocalShell`). Where it differs: only root may write it; the reboot ends
    this process (`tune verify` follows the boot); the probes run from this process, as
    `tune probe` runs them; the run is waited for as long as it takes; and Ctrl-C or SIGTERM
    reaches the detached run, which rolls back as a run does on either (exit 3)."""

    outlives_reboot = False

    def __init__(self, host: LocalShell, timeout: float = 60.0) -> None:
        super().__init__(host, timeout)
        self.host: LocalShell = host

    def session(self) -> contextlib.AbstractContextManager[None]:
        self.host.check_privileges()
        return contextlib.nullcontext()  # each script takes the lock, as over SSH

    def apply(
        self,
        work: Work,
        loaded: LoadedProfile,
        *,
        phase: str,
        run_id: str,
        around: PhaseProbes | None = None,
        after: tuple[PutFile, ...] = (),
    ) -> ApplyResult:
        from .sh_engine import apply_remote

        try:
            with _sigterm_interrupts():
                done = apply_remote(
                    self.host,
                    work,
                    loaded,
                    phase=phase,
                    timeout=self.timeout,
                    around=around,
                    run_id=run_id,
                    after=after,
                    patience=math.inf,
                )
        except KeyboardInterrupt:
            self._stop(run_id, len(work.steps))
            raise
        return ApplyResult(
            done.run_id, done.writes - len(done.unsupported), done.unsupported, work.skipped
        )

    def _stop(self, run_id: str, steps: int) -> None:
        """Ctrl-C or SIGTERM while the run goes on detached: SIGTERM to its script, which
        restores every step it journaled; its journal's end then says how it ended (a run
        not yet started, or ended already, is left as it is)."""
        from .sh_engine import outcome_error, pid_path, wait

        data = self.host.read_file(pid_path(run_id))
        pid = (data or b"").decode("ascii", "replace").strip()
        if not pid.isdigit():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGTERM)
        run = wait(self.host, run_id, math.inf, steps=steps)
        if run.outcome != "applied":
            raise outcome_error(run, self.host.describe())

    def probe_executor(self) -> tuple[Executor, dict[str, str]]:
        from ..probes.runner import run_argv

        return run_argv, {}

    def verify_command(self) -> str:
        return "tune verify"


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM to tune stops the run as Ctrl-C does (`LocalEngine._stop`)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: signals are not this thread's to handle
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def engine_for(host: Host, *, root: str | None = None, timeout: float = 60.0) -> Engine:
    """The engine that writes `host`: sh scripts for every live host (SSH, or this machine
    through a local `sh`), this process for a snapshot or an archive. `root`: the snapshot
    directory `host` reads, if any (its probes measure it); `timeout`: a remote host's command
    timeout (this machine's: how long a probe's result may take to reach its run)."""
    if isinstance(host, ShellHost):
        return ShellEngine(host, timeout)
    if isinstance(host, LocalHost):
        return LocalEngine(LocalShell(host), timeout)
    return PythonEngine(host, root)
