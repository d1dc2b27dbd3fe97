"""The operator's own commands around each host's reboot: `--before-reboot` (drain: take the
node out of the load balancer) and `--after-verify` (undrain).

They run on the controller, as the operator typed them, through `/bin/sh -c`: they are the
operator's commands from the command line (never a profile's or a host's text), and what they
learn about the host comes in the environment, never spliced into the command: `TUNE_HOST`,
`TUNE_WAVE`, `TUNE_ROLLOUT` and `TUNE_HOST_JSON` (host, address, run id, changes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from ..errors import HostError


@dataclass(frozen=True)
class HookContext:
    """What a hook is told about the host it runs for."""

    host: str
    address: str
    wave: int  # 1-based, as the table shows it
    rollout_id: str
    run_id: str | None
    changes: tuple[dict[str, str], ...] = ()

    def environment(self) -> dict[str, str]:
        described: dict[str, Any] = {
            "host": self.host,
            "address": self.address,
            "wave": self.wave,
            "rollout": self.rollout_id,
            "run": self.run_id,
            "changes": list(self.changes),
        }
        return {
            "TUNE_HOST": self.host,
            "TUNE_WAVE": str(self.wave),
            "TUNE_ROLLOUT": self.rollout_id,
            "TUNE_HOST_JSON": json.dumps(described, sort_keys=True),
        }


def run_hook(option: str, command: str, context: HookContext, timeout: float) -> None:
    """`command` through /bin/sh -c with the host's environment; its output goes to standard
    error once it ends (standard output may hold JSON). `HostError` naming `option` when it
    fails or runs past `timeout` s."""
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", command],
            env=os.environ | context.environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise HostError(f"{option} for {context.host} ran past {timeout:g} s.") from None
    except OSError as exc:
        raise HostError(f"{option} for {context.host} could not start: {exc.strerror}.") from None
    if done.stdout:
        sys.stderr.write(done.stdout.decode(errors="replace"))
        sys.stderr.flush()
    if done.returncode != 0:
        raise HostError(f"{option} for {context.host} exited {done.returncode}.")
