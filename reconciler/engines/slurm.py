"""tune under Slurm: the programs slurmd runs on a node, and the drains tune owns there.

Slurm owns draining, rebooting and scheduling; tune is the on-host step it calls:

- `RebootProgram` (`reboot_program`): arm the pinned profile's reboot phase (a try-once boot),
  note the reboot in `REBOOT_RECORD`, ask systemd for the reboot without waiting, return.
- `HealthCheckProgram` (`health_check`): `tune verify` after a reboot with a pending run, else
  `tune check` of the pinned profile; drain on failure with a reason that starts with `tune:`,
  noted in `DRAIN_RECORD`; resume only a node whose reason is still the one tune noted.
- the node-features helper (`active_features`, `set_feature`): a profile is a feature.

Every scontrol call and every tune run has a timeout, so that a health check ends well inside
the 60 s slurmd gives it, and a reboot program returns within seconds (slurmd runs it while
holding its configuration lock and only logs its exit code).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..apply.pending import PENDING
from ..core.errors import ExitCode
from ..facts.kernel import BOOT_ID
from ..hosts.directory import DirectoryHost, SnapshotHost
from ..steps.records import RecordError
from ..steps.state import LOCK, STATE
from ..steps.status import STATUS, Status

DRAIN_RECORD = f"{STATE}/slurm-drain.json"  # the drain tune set: node, reason, when
REBOOT_RECORD = f"{STATE}/slurm-reboot.json"  # the reboot tune asked for: reason, boot id, when
CHOSEN = f"{STATE}/slurm-profile.json"  # the profile a feature chose: profile, digest
PREFIX = "tune:"
FEATURE_PREFIX = "tune_"
# Each scontrol or sinfo call; a controller that does not answer in this time is one failure.
SLURM_TIMEOUT = 8.0
# The tune run of a health check: with two slurm calls after it, well inside slurmd's 60 s.
TUNE_TIMEOUT = 35.0
# Arming a reboot phase, in a RebootProgram that must return within seconds.
ARM_TIMEOUT = 30.0
# `tune verify` when the boot it verifies has not happened yet (the arm-status contract).
NOT_REBOOTED = 10
# What slurmctld appends to a node's reason when a reboot asked with `nextstate=DOWN` ends
# (22.05: "REASON : reboot issued : reboot complete"); a reboot past ResumeTimeout ends in
# " : reboot timed out" instead, which tune never resumes.
REBOOT_COMPLETE = " : reboot complete"
MAX_REASON = 200

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class Ran:
    code: int
    output: str  # stdout then stderr, as printed

    def last_line(self) -> str:
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def run_bounded(argv: Sequence[str], timeout: float, run: Runner = subprocess.run) -> Ran:
    """A process run to its end or killed at `timeout`; never raises for how it ended."""
    try:
        done = run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Ran(124, f"{argv[0]}: no answer within {timeout:g} s")
    except OSError as exc:
        return Ran(127, f"{argv[0]}: {exc.strerror}")
    return Ran(done.returncode, (done.stdout or "") + (done.stderr or ""))


@dataclass(frozen=True)
class Node:
    """A node as slurmctld has it: its state (sinfo's `%T`, e.g. idle, drained, down) and the
    reason an administrator, a reboot or tune gave, without its user and time."""

    state: str
    reason: str | None

    @property
    def held(self) -> bool:
        """Out of service: drained, draining or down, whoever did it."""
        base = self.state.rstrip("*~#!%$@^-")
        return base in ("drained", "draining", "drain", "down") or "drain" in base


class SlurmError(Exception):
    pass


@dataclass(frozen=True)
class Slurm:
    """The controller, through scontrol and sinfo (SLURM_CONF picks which one), for one node."""

    node: str
    timeout: float = SLURM_TIMEOUT
    run: Runner = subprocess.run

    def _call(self, argv: list[str]) -> str:
        ran = run_bounded(argv, self.timeout, self.run)
        if ran.code != 0:
            raise SlurmError(f"{' '.join(argv[:2])} failed ({ran.last_line() or ran.code})")
        return ran.output

    def show(self) -> Node:
        out = self._call(["sinfo", "--noheader", "--Node", "--nodes", self.node, "-o", "%T %E"])
        line = out.strip().splitlines()[0] if out.strip() else ""
        if not line:
            raise SlurmError(f"sinfo does not know node {self.node}")
        state, _, reason = line.partition(" ")
        reason = reason.strip()
        return Node(state, None if reason in ("", "none", "(null)") else reason)

    def drain(self, reason: str) -> None:
        self._call(
            ["scontrol", "update", f"nodename={self.node}", "state=drain", f"reason={reason}"]
        )

    def resume(self) -> None:
        self._call(["scontrol", "update", f"nodename={self.node}", "state=resume"])


@dataclass(frozen=True)
class Tune:
    """tune's own commands, run as a process (as an engine runs them): `argv` is how to start
    tune, `root` a snapshot directory for tests and labs (None: this machine)."""

    argv: tuple[str, ...]
    root: str | None = None
    run: Runner = subprocess.run

    def _root(self) -> list[str]:
        return ["--root", self.root] if self.root else []

    def check(self, profile: str, digest: str) -> Ran:
        argv = [*self.argv, "check", profile, "--profile-digest", digest, "--quiet", *self._root()]
        return run_bounded(argv, TUNE_TIMEOUT, self.run)

    def verify(self) -> Ran:
        return run_bounded([*self.argv, "verify", *self._root()], TUNE_TIMEOUT, self.run)

    def arm(self, profile: str, digest: str | None) -> Ran:
        """The one call that arms a reboot phase (`tune apply --reboot-phase --arm`, the
        arm-status part of the engines' contract): the try-once boot and pending.json, no
        reboot."""
        pin = ["--profile-digest", digest] if digest else []
        argv = [*self.argv, "apply", profile, *pin, "--reboot-phase", "--arm", "--yes"]
        return run_bounded([*argv, *self._root()], ARM_TIMEOUT, self.run)


@dataclass(frozen=True)
class ProgramEnd:
    code: int
    message: str  # one line, for slurmd's log


class NodeFiles:
    """tune's files on the host (this machine, or a snapshot directory)."""

    def __init__(self, root: str | None) -> None:
        self.host = DirectoryHost(root or "/")

    def read_json(self, path: str) -> dict[str, Any] | None:
        data = self.host.read_file(path)
        if data is None:
            return None
        try:
            value = json.loads(data)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def write_json(self, path: str, value: dict[str, Any]) -> None:
        self.host.private_dir(os.path.dirname(path))
        self.host.put_file(path, (json.dumps(value, sort_keys=True) + "\n").encode(), 0o600)

    def delete(self, path: str) -> None:
        if self.host.read_file(path) is not None:
            self.host.delete_file(path)

    def exists(self, path: str) -> bool:
        return self.host.read_file(path) is not None

    def boot_id(self) -> str | None:
        data = self.host.read_file(BOOT_ID)
        return data.decode(errors="replace").strip() or None if data else None

    def status(self) -> Status | None:
        data = self.host.read_file(STATUS)
        if data is None:
            return None
        try:
            return Status.from_json(data)
        except RecordError:
            return None

    def lock_held(self) -> bool:
        """Whether a tune run holds the host's lock now. Asked without waiting and without
        taking it for longer than the question: a run that starts meanwhile waits at most an
        instant (`hosts.lock.WAIT`)."""
        path = self.host.local(LOCK)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return False
        except OSError:
            return True  # a lock tune cannot open is not one it may ignore
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def one_line(text: str) -> str:
    """A reason scontrol takes as one argument and sinfo prints back unchanged."""
    flat = re.sub(r"\s+", " ", text).strip()
    return flat[:MAX_REASON]


def _verification_failed(status: Status | None, boot: str | None) -> bool:
    """Whether tune's status says this boot failed its verification, or the host is out of
    sync (written on this boot): then no success of a later command resumes the node."""
    if status is None or boot is None:
        return False
    last = status.last_verification
    if last is not None and last.boot_id == boot and last.verdict == "failed":
        return True
    return status.boot_id == boot and status.in_sync is False and status.updated_by != "apply"


def health_check(
    records: NodeFiles, tune: Tune, slurm: Slurm, profile: str, digest: str
) -> ProgramEnd:
    """One health check of this node: see the module's docstring."""
    if records.lock_held():
        return ProgramEnd(ExitCode.IN_SYNC, f"tune: a tune run holds {LOCK}; nothing done")
    boot = records.boot_id()
    what = "check"
    if records.exists(PENDING):
        what, ran = "verify", tune.verify()
        if ran.code == NOT_REBOOTED:
            what, ran = "check", tune.check(profile, digest)
    else:
        ran = tune.check(profile, digest)
    try:
        node = slurm.show()
        if ran.code == ExitCode.IN_SYNC:
            return _healthy(records, slurm, node, boot, what)
        return _unhealthy(records, slurm, node, boot, what, ran)
    except SlurmError as exc:
        return ProgramEnd(ExitCode.HOST_ERROR, f"tune: {exc}")


def _healthy(
    records: NodeFiles, slurm: Slurm, node: Node, boot: str | None, what: str
) -> ProgramEnd:
    done = "verified" if what == "verify" else "in sync"
    if _verification_failed(records.status(), boot):
        return ProgramEnd(ExitCode.IN_SYNC, f"tune: {done}, but status.json disagrees; not resumed")
    drained = records.read_json(DRAIN_RECORD)
    if drained is not None and drained.get("what") == "verify" and drained.get("boot_id") == boot:
        # A boot that failed its verification was rolled back for the next boot: a check that
        # passes now says nothing of that boot, only the next boot's verification does.
        return ProgramEnd(
            ExitCode.IN_SYNC, f"tune: {done}, but this boot failed its verification; not resumed"
        )
    if drained is not None:
        if node.held and node.reason == drained.get("reason"):
            slurm.resume()
            records.delete(DRAIN_RECORD)
            return ProgramEnd(ExitCode.IN_SYNC, f"tune: {done}; resumed {slurm.node}")
        # Someone else changed the node since: the drain is theirs now.
        records.delete(DRAIN_RECORD)
    rebooted = records.read_json(REBOOT_RECORD)
    if rebooted is not None and rebooted.get("boot_id") != boot:
        asked = rebooted.get("reason")
        if asked and node.reason == asked:
            # slurmd runs this check as it starts, before it registers: slurmctld still has
            # the reboot as issued. The next check, after the registration, resumes.
            return ProgramEnd(
                ExitCode.IN_SYNC, f"tune: {done} after the reboot; not registered yet"
            )
        records.delete(REBOOT_RECORD)
        if node.held and asked and node.reason == f"{asked}{REBOOT_COMPLETE}":
            slurm.resume()
            return ProgramEnd(
                ExitCode.IN_SYNC, f"tune: {done} after the reboot; resumed {slurm.node}"
            )
    return ProgramEnd(ExitCode.IN_SYNC, f"tune: {done}")


def _unhealthy(
    records: NodeFiles, slurm: Slurm, node: Node, boot: str | None, what: str, ran: Ran
) -> ProgramEnd:
    if what == "verify":
        said = "verification failed" if ran.code == ExitCode.APPLY_FAILED else "verify failed"
    elif ran.code == ExitCode.CHANGES:
        said = "drift"
    else:
        said = "check failed"
    detail = ran.last_line().removeprefix("tune: ")
    reason = one_line(f"{PREFIX} {said} (exit {ran.code})" + (f": {detail}" if detail else ""))
    drained = records.read_json(DRAIN_RECORD)
    ours = drained is not None and node.reason == drained.get("reason")
    rebooted = records.read_json(REBOOT_RECORD)
    asked = rebooted.get("reason") if rebooted is not None else None
    # The reboot tune ran, before slurmd registered (its reason as asked) or after (completed).
    after_our_reboot = bool(asked) and node.reason in (asked, f"{asked}{REBOOT_COMPLETE}")
    if what == "verify" and rebooted is not None:
        # That reboot failed: no later success on this boot may resume the node through it.
        records.delete(REBOOT_RECORD)
    if node.held and not ours and not after_our_reboot:
        return ProgramEnd(
            ExitCode.CHANGES, f"{reason}; {slurm.node} is held by someone else, left as it is"
        )
    if node.reason != reason:
        slurm.drain(reason)
        records.write_json(
            DRAIN_RECORD,
            {"node": slurm.node, "reason": reason, "what": what, "boot_id": boot, "at": now_utc()},
        )
    return ProgramEnd(ExitCode.CHANGES, f"{reason}; drained {slurm.node}")


def reboot_program(
    records: NodeFiles,
    tune: Tune,
    slurm: Slurm,
    profile: str,
    digest: str | None,
    reboot: Callable[[], Ran],
) -> ProgramEnd:
    """Arm, note the reboot slurmctld asked for, ask systemd to reboot; never wait for it."""
    armed = tune.arm(profile, digest)
    try:
        reason = slurm.show().reason
    except SlurmError:
        reason = None
    records.write_json(
        REBOOT_RECORD,
        {
            "node": slurm.node,
            "reason": reason,
            "boot_id": records.boot_id(),
            "at": now_utc(),
            "armed": armed.code == 0,
        },
    )
    asked = reboot()
    if asked.code != 0:
        return ProgramEnd(
            ExitCode.HOST_ERROR, f"tune: could not ask for the reboot: {asked.last_line()}"
        )
    if armed.code != 0:
        return ProgramEnd(
            ExitCode.APPLY_FAILED,
            f"tune: arming failed (exit {armed.code}: {armed.last_line()}); rebooting unarmed",
        )
    return ProgramEnd(ExitCode.IN_SYNC, "tune: armed; reboot asked")


def systemd_reboot(run: Runner = subprocess.run) -> Ran:
    """The reboot, asked of systemd without waiting for it (`--no-block`)."""
    return run_bounded(["systemctl", "--no-block", "reboot"], 10.0, run)


def snapshot_reboot(root: str) -> Callable[[], Ran]:
    """The same request sent to a snapshot directory's emulated systemctl."""

    def reboot() -> Ran:
        done = SnapshotHost(root, commands=["systemctl"]).run(["systemctl", "--no-block", "reboot"])
        return Ran(done.returncode, done.stdout + done.stderr)

    return reboot


def feature_of(profile: str) -> str:
    """`tune_<name>` for a profile file `<name>.yaml`: Slurm's feature names are words."""
    name = os.path.basename(profile.removeprefix("file://"))
    name = name.removesuffix(".yaml").removesuffix(".yml")
    return FEATURE_PREFIX + re.sub(r"[^A-Za-z0-9_]", "_", name)
