"""A real Slurm for tests: munged, slurmctld and one slurmd on loopback, configuration and state
in a temporary directory, each daemon started and stopped by PID. A node's reboot is faked as
Slurm's own test suite fakes it: slurmd stopped, then started again with `-b` (report a boot).

Every scontrol and sinfo call of a test, and of the tune programs slurmd runs, reaches only this
controller: SLURM_CONF names the temporary configuration."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NODE = "node1"
SBIN = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
TOOLS = ("scontrol", "sinfo", "sbatch")
INSTALL = "apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge"


def require_slurm() -> None:
    missing = [p for p in SBIN if not os.access(p, os.X_OK)]
    missing += [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"a real Slurm is not installed ({', '.join(missing)}): {INSTALL}")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs its programs as root here: the tests need root")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def python_program(path: Path, *args: str) -> Path:
    """An executable wrapper for slurm.conf (which takes a path, not arguments): this tune.
    slurmd runs a HealthCheckProgram with an empty environment: SLURM_CONF is set here so that
    its scontrol reaches this controller (a real node reads /etc/slurm/slurm.conf)."""
    env = f"PYTHONPATH={REPO} SLURM_CONF={path.parent}/slurm.conf"
    words = " ".join(f"'{a}'" for a in args)
    log = f"{path}.log"  # what each run printed, for a failing test's message
    path.write_text(
        f'#!/bin/sh\n{{ date; env {env} {sys.executable} {words} "$@"; }} >>{log} 2>&1\n'
        f"rc=$?\ntail -n 2 {log}\nexit $rc\n"
    )
    path.chmod(0o755)
    return path


@dataclass
class Cluster:
    dir: Path
    root: Path  # the node's snapshot host
    extra: str = ""  # more slurm.conf lines
    helpers: str | None = None  # helpers.conf, for NodeFeaturesPlugins=node_features/helpers
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")}

    def conf(self) -> str:
        d = self.dir
        return "\n".join(
            [
                "ClusterName=tunetest",
                "SlurmctldHost=localhost(127.0.0.1)",
                f"SlurmctldPort={self.ctld_port}",
                f"SlurmdPort={self.d_port}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                f"AuthInfo=socket={d}/munge.sock",
                "CredType=cred/munge",
                f"StateSaveLocation={d}/state",
                f"SlurmdSpoolDir={d}/spool",
                f"SlurmctldPidFile={d}/slurmctld.pid",
                f"SlurmdPidFile={d}/slurmd.pid",
                f"SlurmctldLogFile={d}/slurmctld.log",
                f"SlurmdLogFile={d}/slurmd.log",
                "ProctrackType=proctrack/pgid",
                "TaskPlugin=task/none",
                "SelectType=select/linear",
                "JobCompType=jobcomp/none",
                "AccountingStorageType=accounting_storage/none",
                "MailProg=/bin/true",
                "ReturnToService=1",
                "SlurmctldTimeout=10",
                "SlurmdTimeout=30",
                f"RebootProgram={d}/reboot-program",
                f"HealthCheckProgram={d}/health-check",
                "HealthCheckInterval=3600",  # and once as slurmd starts
                self.extra,
                f"NodeName={NODE} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 "
                "CPUs=1 State=UNKNOWN",
                f"PartitionName=debug Nodes={NODE} Default=YES State=UP",
                "",
            ]
        )

    def start(self) -> None:
        d = self.dir
        self.ctld_port, self.d_port = free_port(), free_port()
        (d / "state").mkdir()
        (d / "spool").mkdir()
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        python_program(
            d / "reboot-program",
            "-m",
            "reconciler.cli",
            "slurm",
            "reboot-program",
            "--root",
            str(self.root),
            "--node",
            NODE,
        )
        python_program(
            d / "features",
            "-m",
            "reconciler.cli",
            "slurm",
            "features",
            "--root",
            str(self.root),
            "--profiles",
            str(self.root / "etc/tune/profiles"),
        )
        python_program(
            d / "health-check",
            "-m",
            "reconciler.cli",
            "slurm",
            "health-check",
            "--root",
            str(self.root),
            "--node",
            NODE,
        )
        (d / "slurm.conf").write_text(self.conf())
        if self.helpers is not None:
            (d / "helpers.conf").write_text(self.helpers.format(dir=d))
        self._daemon(
            "munged",
            [
                SBIN[0],
                f"--socket={d}/munge.sock",
                f"--key-file={key}",
                f"--pid-file={d}/munged.pid",
                f"--log-file={d}/munged.log",
                f"--seed-file={d}/munge.seed",
                "--force",
            ],
            d / "munged.pid",
        )
        self._daemon("slurmctld", [SBIN[1], "-i"], d / "slurmctld.pid")
        self.start_slurmd()

    def _daemon(self, name: str, argv: list[str], pidfile: Path) -> None:
        pidfile.unlink(missing_ok=True)
        subprocess.run(argv, env=self.env, check=True, timeout=30)
        self.pids[name] = self._pid(pidfile)

    @staticmethod
    def _pid(pidfile: Path) -> int:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            text = pidfile.read_text().strip() if pidfile.exists() else ""
            if text.isdigit():
                return int(text)
            time.sleep(0.1)
        raise AssertionError(f"{pidfile} was not written")

    def start_slurmd(self, *, rebooted: bool = False) -> None:
        argv = [SBIN[2], "-N", NODE] + (["-b"] if rebooted else [])
        self._daemon("slurmd", argv, self.dir / "slurmd.pid")

    def stop(self, name: str) -> None:
        pid = self.pids.pop(name, None)
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)

    def stop_all(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            self.stop(name)

    def fake_reboot(self, booted: Callable[[Path], None] | None = None) -> None:
        """slurmd down, a new boot id on the host (and what `booted` changes of the host as the
        new boot finds it), slurmd up reporting a boot."""
        self.stop("slurmd")
        if booted is not None:
            booted(self.root)
        boot_id = self.root / "proc/sys/kernel/random/boot_id"
        boot_id.parent.mkdir(parents=True, exist_ok=True)
        boot_id.write_text(f"{uuid.uuid4()}\n")
        self.start_slurmd(rebooted=True)

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def scontrol(self, *args: str) -> str:
        done = self.run("scontrol", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def node(self) -> tuple[str, str]:
        """sinfo's state (e.g. idle, drained, down) and reason of the node."""
        out = self.run("sinfo", "-h", "-N", "-n", NODE, "-o", "%T %E").stdout.strip()
        state, _, reason = out.partition(" ")
        reason = reason.strip()
        return state, "" if reason == "none" else reason

    def wait_for(self, *states: str, timeout: float = 40) -> tuple[str, str]:
        deadline = time.monotonic() + timeout
        seen = self.node()
        while seen[0] not in states and time.monotonic() < deadline:
            time.sleep(0.5)
            seen = self.node()
        assert seen[0] in states, f"{NODE} is {seen}, not {states}\n{self.logs()}"
        return seen

    def wait_for_reason(self, reason: str, timeout: float = 40) -> tuple[str, str]:
        deadline = time.monotonic() + timeout
        seen = self.node()
        while seen[1] != reason and time.monotonic() < deadline:
            time.sleep(0.5)
            seen = self.node()
        assert seen[1] == reason, f"{NODE} is {seen}, not {reason!r}\n{self.logs()}"
        return seen

    def health_check(self) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.dir / "health-check"), timeout=60)

    def logs(self) -> str:
        tails = []
        for name in ("slurmctld.log", "slurmd.log", "health-check.log", "reboot-program.log"):
            path = self.dir / name
            if path.exists():
                tails.append(f"--- {name}\n" + "\n".join(path.read_text().splitlines()[-15:]))
        return "\n".join(tails)


@contextmanager
def cluster(root: Path, extra: str = "", helpers: str | None = None) -> Iterator[Cluster]:
    require_slurm()
    # A short directory: munged's socket path must fit a sockaddr_un.
    d = Path(tempfile.mkdtemp(prefix="tune-slurm-", dir="/tmp"))
    c = Cluster(d, root, extra, helpers)
    try:
        c.start()
        c.wait_for("idle", "down", "drained", timeout=30)
        yield c
    finally:
        c.stop_all()
        if os.environ.get("TUNE_KEEP_SLURM") is None:
            shutil.rmtree(d, ignore_errors=True)
