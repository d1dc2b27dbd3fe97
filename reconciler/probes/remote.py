"""Probes on a -H host: each run of a probe is one sh script over the host's connection.

The argv is quoted word by word for the target's `sh` (no profile value is ever parsed by a
shell), stdin is /dev/null (the script itself arrives on sh's stdin), and `timeout -s KILL`
bounds it on the target: timeout runs the probe in its own process group and kills the whole
group, workers included, as `runner.run_argv` does locally. `setsid`, where the target has it,
detaches the probe from the SSH session, so a dropped connection leaves nothing behind but a
probe that its timeout still ends.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping

from ..hosts.shell import ShellHost
from .runner import NOT_FOUND, Executor, ProcessEnded

# GNU timeout: 124 after its signal when the command exits on it; 137 (128 + KILL) with -s KILL.
TIMED_OUT = frozenset({124, 137})


def probe_script(argv: list[str], timeout: float, env: Mapping[str, str]) -> str:
    command = shlex.quote(argv[0])
    assignments = "".join(f"{name}={shlex.quote(value)} " for name, value in env.items())
    words = " ".join(shlex.quote(a) for a in argv)
    return (
        "S=; command -v setsid >/dev/null 2>&1 && S=setsid\n"
        "command -v timeout >/dev/null 2>&1 || "
        "{ echo 'timeout (coreutils) is not installed on the host; tune bounds probes with it' >&2;"
        " exit 126; }\n"
        f"command -v {command} >/dev/null 2>&1 || "
        f"{{ echo {shlex.quote(f'{argv[0]}: not found on the host')} >&2; exit {NOT_FOUND}; }}\n"
        f"{assignments}$S timeout -s KILL {timeout:g} {words} </dev/null\n"
    )


def remote_executor(host: ShellHost, slack: float) -> Executor:
    """Run probes on `host`, one round trip per run; `slack`: seconds on top of the probe's own
    timeout that the answer may take (the connection's command timeout)."""

    def execute(argv: list[str], timeout: float, env: Mapping[str, str]) -> ProcessEnded:
        started = time.monotonic()
        done = host.run_script(probe_script(argv, timeout, env), timeout=timeout + slack)
        seconds = time.monotonic() - started
        # A probe that exits 124 or 137 by itself within its time is not a timeout.
        code = None if done.status in TIMED_OUT and seconds >= timeout else done.status
        return ProcessEnded(
            code,
            done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"),
            seconds,
        )

    return execute
