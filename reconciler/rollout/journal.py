"""The rollout journal on the controller: which hosts of a rollout are done, in flight, failed,
rolled back or not started, so that `tune rollout resume` neither skips a host nor reboots one
twice after the controller died (Ctrl-C, a lost laptop, a dead bastion).

One JSON file per rollout under `<state dir>/rollouts/` (`$TUNE_STATE_DIR`, else
`$XDG_STATE_HOME/tune`, else `~/.local/state/tune`; the directories mode 0700: the options name
the operator's hooks, which resume runs). Its first line is the whole rollout, written when it
starts (replaced whole, `hosts.replaced.replace_file`); each transition after it appends one
line, fsynced (`{"host": NAME, "set": {FIELD: VALUE}}` or `{"stopped": WHY}`), so a transition
costs one short write however many hosts the rollout has. A reader replays the lines in order:
it sees the state before a transition or after it; a last line cut short (the controller died
in its write) was never acknowledged, so the step it announced never began, and is left out.

A host in flight records the run id its apply uses and the boot id it had before, written
before the apply starts, and `rebooting` before the reboot is asked for: resume asks the host
which of these it reached (`rollout.run`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..apply.trust import private_directory
from ..errors import JournalError, UsageError, reason
from ..hosts.bounded import read_bounded
from ..hosts.replaced import append_file, replace_file

VERSION = 1
MAX_BYTES = 16 * 1024 * 1024

NOT_STARTED = "not-started"
IN_FLIGHT = "in-flight"
DONE = "done"
FAILED = "failed"
ROLLED_BACK = "rolled-back"
STATES = (NOT_STARTED, IN_FLIGHT, DONE, FAILED, ROLLED_BACK)

_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}")


def state_directory() -> Path:
    configured = os.environ.get("TUNE_STATE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "tune"


def rollouts_directory() -> Path:
    return state_directory() / "rollouts"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_rollout_id(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


@dataclass
class HostEntry:
    """One host's place in the rollout."""

    wave: int
    state: str = NOT_STARTED
    run_id: str | None = None  # the run its apply uses, chosen before the apply starts
    boot_id: str | None = None  # before the reboot
    rebooting: bool = False  # the reboot was asked for (resume waits, never asks twice)
    why: str | None = None  # failed or rolled back: the one sentence
    exit_code: int | None = None  # failed: what this host alone would exit with
    configuration: str = "prior"  # prior | new | pending (a boot not yet verified) | unknown
    changes: int = 0
    started: float | None = None  # time.time() of its first step in this rollout
    finished: float | None = None


@dataclass
class Rollout:
    """A rollout: what was asked (to resume it the same way) and where each host is."""

    rollout_id: str
    profile: str  # the profile's path, absolute
    digest: str  # of the resolved profile: resume refuses another one
    options: dict[str, Any]
    waves: list[list[str]]
    hosts: dict[str, HostEntry]
    created: str = field(default_factory=now_iso)
    stopped: str | None = None  # why the rollout stopped before its last wave, if it did
    path: Path | None = field(default=None, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": VERSION,
            "rollout": self.rollout_id,
            "created": self.created,
            "profile": self.profile,
            "digest": self.digest,
            "options": self.options,
            "waves": self.waves,
            "stopped": self.stopped,
            "hosts": {name: dataclasses.asdict(entry) for name, entry in self.hosts.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path) -> Rollout:
        if data.get("format_version") != VERSION:
            raise JournalError(f"{path}: not a rollout journal of this tune's format.")
        try:
            hosts = {name: HostEntry(**entry) for name, entry in data["hosts"].items()}
            rollout = cls(
                rollout_id=str(data["rollout"]),
                profile=str(data["profile"]),
                digest=str(data["digest"]),
                options=dict(data["options"]),
                waves=[[str(n) for n in wave] for wave in data["waves"]],
                hosts=hosts,
                created=str(data["created"]),
                stopped=data.get("stopped"),
                path=path,
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise JournalError(f"{path}: a rollout journal tune cannot read ({exc}).") from None
        if any(entry.state not in STATES for entry in hosts.values()):
            raise JournalError(f"{path}: a host of the rollout is in a state tune does not know.")
        return rollout

    def save(self) -> None:
        """The whole journal in one line, replacing the file, fsynced: when the rollout
        starts."""
        with self._lock:
            self._save()

    def _save(self) -> None:
        directory = rollouts_directory()
        private_directory(directory)
        self.path = directory / f"{self.rollout_id}.json"
        text = json.dumps(self.to_json(), sort_keys=True) + "\n"
        replace_file(self.path, text, "write the rollout journal", mode=0o600)

    def _append(self, record: dict[str, Any]) -> None:
        if self.path is None:  # never saved: the whole of it, this transition included
            self._save()
            return
        text = json.dumps(record, sort_keys=True) + "\n"
        append_file(self.path, text, "write the rollout journal")

    def update(self, name: str, **changes: Any) -> HostEntry:
        """One host's transition, journaled before this returns."""
        with self._lock:
            entry = dataclasses.replace(self.hosts[name], **changes)
            self.hosts[name] = entry
            self._append({"host": name, "set": changes})
            return entry

    def stop(self, why: str | None) -> None:
        with self._lock:
            self.stopped = why
            self._append({"stopped": why})

    def counts(self) -> dict[str, int]:
        return {state: sum(e.state == state for e in self.hosts.values()) for state in STATES}


def _owned(info: os.stat_result) -> None:
    """Resume runs the journal's hooks: only a journal this user wrote and nobody else can
    change is read (as ssh treats ~/.ssh)."""
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        mode = info.st_mode & 0o777
        raise OSError(f"it is not this user's alone (owner {info.st_uid}, mode {mode:o})")


def newest() -> Rollout | None:
    """The newest rollout journaled, None when there is none."""
    directory = rollouts_directory()
    if not directory.is_dir() or not any(_ID.fullmatch(p.stem) for p in directory.glob("*.json")):
        return None
    return load(None)


def load(rollout_id: str | None) -> Rollout:
    """The rollout `rollout_id`, or the newest; `UsageError` when there is none."""
    directory = rollouts_directory()
    if rollout_id is not None:
        if not _ID.fullmatch(rollout_id):
            raise UsageError(
                f"{rollout_id!r} is not a rollout id (tune rollout status lists them)."
            )
        path = directory / f"{rollout_id}.json"
        if not path.exists():
            raise UsageError(f"no rollout {rollout_id} in {directory}.")
    else:
        found = (
            sorted(p for p in directory.glob("*.json") if _ID.fullmatch(p.stem))
            if directory.is_dir()
            else []
        )
        if not found:
            raise UsageError(f"no rollout journaled in {directory}.")
        path = found[-1]
    try:
        lines = read_bounded(str(path), MAX_BYTES, "a rollout journal", judge=_owned).splitlines()
    except ValueError as exc:
        raise JournalError(f"{path}: a damaged rollout journal ({exc}).") from None
    except OSError as exc:
        raise JournalError(f"{path}: the rollout journal cannot be read ({reason(exc)}).") from None
    if not lines:
        raise JournalError(f"{path}: an empty rollout journal.")
    rollout = Rollout.from_json(_record(path, lines[0]), path)
    for number, line in enumerate(lines[1:], start=1):
        try:
            record = _record(path, line)
        except JournalError:
            if number == len(lines) - 1:
                break  # cut short as the controller died: never acknowledged
            raise
        _replay(rollout, record, path)
    return rollout


def _record(path: Path, line: bytes) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise JournalError(f"{path}: a damaged rollout journal ({exc}).") from None
    if not isinstance(data, dict):
        raise JournalError(f"{path}: not a rollout journal.")
    return data


def _replay(rollout: Rollout, record: dict[str, Any], path: Path) -> None:
    """One transition `Rollout.update` or `Rollout.stop` appended."""
    if "stopped" in record:
        rollout.stopped = record["stopped"]
        return
    try:
        entry = dataclasses.replace(rollout.hosts[record["host"]], **record["set"])
    except (KeyError, TypeError) as exc:
        raise JournalError(f"{path}: a rollout journal tune cannot read ({exc}).") from None
    if entry.state not in STATES:
        raise JournalError(f"{path}: a host of the rollout is in a state tune does not know.")
    rollout.hosts[record["host"]] = entry
