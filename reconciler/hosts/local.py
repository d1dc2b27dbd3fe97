"""This machine as a live host: written by the POSIX sh scripts every live host runs
(`apply.sh_engine`), here through a local `sh` process instead of an SSH session, so that a
local, a pushed and a pulled apply take one code path, byte for byte.

Reads stay in this process (`directory.LocalHost`): they build the same `Files` the one-script
observation builds (tests/test_shell_read.py holds the two alike), without a process per read.
What writes is the script alone: `LocalHost` has no write of a kernel left.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from ..core.errors import HostError
from ..core.files import Files, Request
from .directory import LocalHost
from .shell import ScriptResult, ShellHost
from .trust import Owned

# What names a snapshot for lib.sh (tune's test lab): never this machine's. A live host's
# scripts run from `/` whatever the environment tune was started with says.
LAB_VARIABLES = frozenset({"TUNE_ROOT", "TUNE_LAB"})


class LocalShell(ShellHost):
    """This machine: its scripts fed to a local `sh` (`shell`), its reads made by `files`."""

    pushed = False  # the lock names this machine's own command, not a push

    def __init__(self, files: LocalHost | None = None, shell: str = "/bin/sh") -> None:
        self.files = files if files is not None else LocalHost()
        self.name = self.files.name
        self.shell = shell

    def describe(self) -> str:
        return self.files.describe()

    def check_privileges(self) -> None:
        if os.geteuid() != 0:
            raise HostError("tune apply changes kernel settings and must run as root (sudo).")

    def fetch(self, request: Request) -> Files:
        return self.files.fetch(request)

    def read_file(self, path: str) -> bytes | None:
        return self.files.read_file(path)

    def file_size(self, path: str) -> int | None:
        return self.files.file_size(path)

    def owned(self, paths: Sequence[str]) -> tuple[int, dict[str, Owned | None]]:
        return self.files.owned(paths)

    def run_script(self, script: str, timeout: float | None = None) -> ScriptResult:
        """`script` run by `sh` from `/`, without a lab's variables; `timeout` only where the
        caller gives one (a probe, a wait): a script of tune's never loses its connection
        here, and one that restores must not be killed halfway."""
        env = {k: v for k, v in os.environ.items() if k not in LAB_VARIABLES}
        data = script.encode("utf-8", "surrogateescape")  # file names as the host gave them
        try:
            done = subprocess.run(
                [self.shell], input=data, capture_output=True, env=env, cwd="/", timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise HostError(f"{self.name}: sh gave no answer within {timeout:g} s.") from None
        except OSError as exc:
            raise HostError(f"{self.name}: cannot run {self.shell} ({exc.strerror}).") from exc
        return ScriptResult(done.stdout, done.stderr, done.returncode)
