"""The operator's own commands around each host's reboot: `--before-reboot` (drain: take the
node out of the load balancer) and `--after-verify` (undrain).

They run on the controller, as the operator typed them, through `/bin/sh -c`: they are the
operator's commands from the command line (never a profile's or a host's text), and what they
learn about the host comes in the environment, never spliced into the command: `TUNE_HOST`,
`TUNE_WAVE`, `TUNE_ROLLOUT`, and the host described as JSON (host, address, wave, rollout, run
id, changes) in the file `TUNE_HOST_JSON_FILE` names and, when it is small enough for the
environment, in `TUNE_HOST_JSON` itself.

A hook runs in a session of its own: when it runs past its time, the whole session is killed,
what it started in the background included, not the shell alone.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..core.errors import HostError, reason
from ..core.printable import printable_lines

# Linux refuses to start a program (E2BIG) given one environment string longer than
# MAX_ARG_STRLEN (32 pages, 128 KiB), or an environment and arguments together past ARG_MAX: a
# host's description with ~1,100 changes was one, and every host was rolled back. Past this
# size the description is in the file alone.
MAX_ENVIRONMENT_JSON = 32 << 10


@dataclass(frozen=True)
class HookContext:
    """What a hook is told about the host it runs for."""

    host: str
    address: str
    wave: int  # 1-based, as the table shows it
    rollout_id: str
    run_id: str | None
    changes: tuple[dict[str, str], ...] = ()

    def document(self) -> str:
        """The host, as the JSON `TUNE_HOST_JSON_FILE` holds."""
        described: dict[str, Any] = {
            "host": self.host,
            "address": self.address,
            "wave": self.wave,
            "rollout": self.rollout_id,
            "run": self.run_id,
            "changes": list(self.changes),
        }
        return json.dumps(described, sort_keys=True)

    def environment(self, described: str, path: str) -> dict[str, str]:
        """The variables a hook gets: `described` (the `document`) is in the file at `path`,
        and in `TUNE_HOST_JSON` too while it is small."""
        variables = {
            "TUNE_HOST": self.host,
            "TUNE_WAVE": str(self.wave),
            "TUNE_ROLLOUT": self.rollout_id,
            "TUNE_HOST_JSON_FILE": path,
        }
        if len(described.encode()) <= MAX_ENVIRONMENT_JSON:
            variables["TUNE_HOST_JSON"] = described
        return variables


def run_hook(option: str, command: str, context: HookContext, timeout: float) -> None:
    """`command` through /bin/sh -c with the host's environment; its output goes to standard
    error once it ends (standard output may hold JSON). `HostError` naming `option` when it
    fails or runs past `timeout` s (then its whole session is killed)."""
    described = context.document()
    with _described_in_a_file(described, f"{option} for {context.host}") as path:
        environment = os.environ | context.environment(described, path)
        try:
            hook = subprocess.Popen(
                ["/bin/sh", "-c", command],
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            said = exc.strerror or str(exc)
            raise HostError(f"{option} for {context.host} could not start: {said}.") from None
        with _running(hook.pid):
            try:
                output, _ = hook.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_session(hook.pid)
                hook.wait()
                if hook.stdout is not None:
                    hook.stdout.close()
                raise HostError(f"{option} for {context.host} ran past {timeout:g} s.") from None
    if output:
        # The operator's command, but what it prints may quote a host's text.
        sys.stderr.write(printable_lines(output.decode(errors="replace")))
        sys.stderr.flush()
    if hook.returncode != 0:
        raise HostError(f"{option} for {context.host} exited {hook.returncode}.")


@contextlib.contextmanager
def _described_in_a_file(described: str, hook: str) -> Iterator[str]:
    """A new file (O_EXCL, mode 0600: the description names hosts and their changes) holding
    `described`, removed once the hook ends. A file that cannot be written (a full or
    read-only temporary directory) fails that host's hook, as a hook that fails to start does,
    so the rollout undoes that host and goes on with the others."""
    try:
        fd, path = tempfile.mkstemp(prefix="tune-hook-", suffix=".json")
    except OSError as exc:
        raise HostError(f"{hook}: cannot write TUNE_HOST_JSON_FILE ({reason(exc)}).") from None
    try:
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(described)
        except OSError as exc:
            raise HostError(f"{hook}: cannot write {path} ({reason(exc)}).") from None
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


# Hooks running now, by session id: a rollout interrupted (Ctrl-C) ends its process while hook
# threads still wait, and a hook's session does not get the terminal's signal.
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()


@contextlib.contextmanager
def _running(session: int) -> Iterator[None]:
    _kill_live_at_exit()
    with _LIVE_LOCK:
        _LIVE.add(session)
    try:
        yield
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(session)


@functools.cache
def _kill_live_at_exit() -> None:
    atexit.register(_kill_live)


def _kill_live() -> None:
    with _LIVE_LOCK:
        sessions = list(_LIVE)
    for session in sessions:
        _kill_session(session)


def _kill_session(session: int) -> None:
    # The hook's shell leads its own session and process group (start_new_session): its
    # process group id is its pid, and what it started in the background is in that group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session, signal.SIGKILL)
