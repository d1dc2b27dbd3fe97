"""The rollout journal on the controller: which hosts of a rollout are done, in flight, failed,
rolled back or not started, so that `tune rollout resume` neither skips a host nor reboots one
twice after the controller died (Ctrl-C, a lost laptop, a dead bastion).

One JSON file per rollout under `<state dir>/rollouts/` (`$TUNE_STATE_DIR`, else
`$XDG_STATE_HOME/tune`, else `~/.local/state/tune`; the directories mode 0700: the options name
the operator's hooks, which resume runs). Its first line is the whole rollout, written when it
starts (replaced whole, `hosts.replaced.replace_file`); each transition after it appends one
line, fsynced (`{"host": NAME, "set": {FIELD: VALUE}}`, `{"stopped": WHY}`, or `{"options":
{GROUP: {OPTION: VALUE}}}` for the options a resume changed), so a transition
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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..core.bounded import read_bounded
from ..core.errors import JournalError, UsageError, reason
from ..hosts.replaced import append_file, replace_file
from ..hosts.targets import Identity
from ..hosts.trust import private_directory

VERSION = 1
MAX_BYTES = 16 * 1024 * 1024

NOT_STARTED = "not-started"
IN_FLIGHT = "in-flight"
DONE = "done"
FAILED = "failed"
ROLLED_BACK = "rolled-back"
STATES = (NOT_STARTED, IN_FLIGHT, DONE, FAILED, ROLLED_BACK)
CONFIGURATIONS = ("prior", "new", "pending", "unknown")

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
    why: str | None = None  # failed or rolled back: the one sentence; done: a note, if any
    exit_code: int | None = None  # failed: what this host alone would exit with
    configuration: str = "prior"  # prior | new | pending (a boot not yet verified) | unknown
    # The profile entries its run changes and the knobs it writes. None: journaled by a tune
    # that counted only the writes, and called them `changes` (`_written_before`).
    changes: int | None = 0
    writes: int = 0
    started: float | None = None  # time.time() of its first step in this rollout
    finished: float | None = None
    # Which machine it is, pinned when the rollout starts (ssh_config resolved), its host key
    # when it is first reached: resume refuses another machine under the same name.
    address: str | None = None
    port: int | None = None
    user: str | None = None
    host_key: str | None = None

    def identity(self) -> Identity | None:
        if self.address is None or self.port is None or self.user is None:
            return None  # a journal from before tune pinned hosts
        return Identity(self.address, self.port, self.user, self.host_key)


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
        """The journal's first line, every field of the type tune writes: one it does not
        know, or of another type, is a `JournalError` naming the file, never a crash later."""
        if data.get("format_version") != VERSION:
            raise JournalError(f"{path}: not a rollout journal of this tune's format.")
        fields(_TOP, {k: v for k, v in data.items() if k != "format_version"}, path, "")
        hosts = data["hosts"]
        if not isinstance(hosts, dict):
            raise unreadable(path, "its hosts are not a mapping")
        if not _ID.fullmatch(data["rollout"]):
            raise unreadable(path, "its rollout id is not one tune makes")
        rollout = cls(
            rollout_id=data["rollout"],
            profile=data["profile"],
            digest=data["digest"],
            options=data["options"],
            waves=data["waves"],
            hosts={
                name: HostEntry(**entry_fields(_written_before(entry), path, name))
                for name, entry in hosts.items()
            },
            created=data["created"],
            stopped=data["stopped"],
            path=path,
        )
        listed = [name for wave in rollout.waves for name in wave]
        if sorted(listed) != sorted(rollout.hosts):
            raise unreadable(path, "its waves and its hosts do not name the same hosts once each")
        for name, entry in rollout.hosts.items():
            _judge(entry, len(rollout.waves), path, name)
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

    def change_options(self, changes: dict[str, dict[str, Any]]) -> None:
        """Options a resume changed (`{"rollout": {"max_fail": "2"}}`), journaled: the next
        resume starts from them."""
        with self._lock:
            self.options = merged_options(self.options, changes)
            self._append({"options": changes})

    def state(self) -> str:
        """finished (no host left to start or in flight), stopped (before a wave: the
        failure budget, the canaries' question) or interrupted (hosts left, no stop journaled:
        the controller died, or it runs now)."""
        counts = self.counts()
        if not counts[NOT_STARTED] and not counts[IN_FLIGHT]:
            return "finished"
        return "stopped" if self.stopped else "interrupted"

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


def known() -> list[Path]:
    """The journals of every rollout this controller knows, newest first."""
    directory = rollouts_directory()
    if not directory.is_dir():
        return []
    found = [p for p in directory.glob("*.json") if _ID.fullmatch(p.stem)]
    return sorted(found, key=lambda p: p.stem, reverse=True)


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
    except RecursionError:
        raise unreadable(path, "a line nested too deep") from None
    if not isinstance(data, dict):
        raise JournalError(f"{path}: not a rollout journal.")
    return data


def _replay(rollout: Rollout, record: dict[str, Any], path: Path) -> None:
    """One transition `Rollout.update` or `Rollout.stop` appended."""
    if set(record) == {"stopped"}:
        rollout.stopped = fields({"stopped": _TOP["stopped"]}, record, path, "")["stopped"]
        return
    if set(record) == {"options"}:
        changes = record["options"]
        if not isinstance(changes, dict) or not all(
            key in OPTION_GROUPS and isinstance(value, dict) for key, value in changes.items()
        ):
            raise unreadable(path, "options changed on resume of a shape tune never writes")
        rollout.options = merged_options(rollout.options, changes)
        return
    if set(record) != {"host", "set"}:
        raise unreadable(path, "a transition of a shape tune never writes")
    name, changes = record["host"], record["set"]
    if not isinstance(name, str) or name not in rollout.hosts:
        raise unreadable(path, "a transition of a host not in the rollout")
    if not isinstance(changes, dict):
        raise unreadable(path, f"a transition of host {name} that is not a mapping")
    entry = dataclasses.asdict(rollout.hosts[name]) | _written_before(changes)
    rollout.hosts[name] = HostEntry(**entry_fields(entry, path, name))
    _judge(rollout.hosts[name], len(rollout.waves), path, name)


# The groups of a rollout's options (`options` of its first line): the apply's, the hosts',
# the waves'.
OPTION_GROUPS = ("job", "remote", "rollout")


def merged_options(options: dict[str, Any], changes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    merged = dict(options)
    for group, values in changes.items():
        kept = merged.get(group)
        merged[group] = (kept if isinstance(kept, dict) else {}) | values
    return merged


# The first line's fields (besides format_version) and their types, as `fields` reads them.
_TOP = {
    "rollout": "str",
    "created": "str",
    "profile": "str",
    "digest": "str",
    "options": "dict",
    "waves": "list[list[str]]",
    "stopped": "str | None",
    "hosts": "dict",
}
# What each annotation of a dataclass field tune journals admits of JSON's values.
_ADMITS: dict[str, Callable[[Any], bool]] = {
    "None": lambda v: v is None,
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "dict": lambda v: isinstance(v, dict),
    "dict[str, Any]": lambda v: isinstance(v, dict),
    "tuple[str, ...]": lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
    "list[list[str]]": lambda v: (
        isinstance(v, list)
        and all(isinstance(w, list) and all(isinstance(i, str) for i in w) for w in v)
    ),
}


def unreadable(path: Path, why: str) -> JournalError:
    return JournalError(f"{path}: a rollout journal tune cannot read ({why}).")


def fields(
    types: dict[str, str], data: Any, path: Path, of: str, required: bool = True
) -> dict[str, Any]:
    """`data`, a mapping of the fields `types` names (field -> its annotation), each of its
    type; `of` ("host gpu1") says whose fields they are in the refusal. With `required`, every
    field is there."""
    whose = f" of {of}" if of else ""
    if not isinstance(data, dict):
        raise unreadable(path, f"the fields{whose} are not a mapping")
    unknown = sorted(str(key) for key in data if key not in types)
    if unknown:
        raise unreadable(path, f"a field{whose} tune does not know: {unknown[0]}")
    missing = sorted(set(types) - set(data)) if required else []
    if missing:
        raise unreadable(path, f"no field {missing[0]}{whose}")
    for name, value in data.items():
        annotation = types[name]
        if not any(_ADMITS[part.strip()](value) for part in annotation.split("|")):
            raise unreadable(path, f"{name}{whose} is not {annotation}")
    return data


def dataclass_fields(cls: type, only: tuple[str, ...] | None = None) -> dict[str, str]:
    """A dataclass's fields and their annotations (as written: `from __future__ import
    annotations` keeps them text), or those of `only`."""
    return {
        f.name: str(f.type)
        for f in dataclasses.fields(cls)
        if f.init and (only is None or f.name in only)
    }


def _written_before(data: Any) -> Any:
    """A host's fields as a tune of 0.2 journaled them: its `changes` (a number) were the
    writes (a tune that knows both always journals both)."""
    if (
        isinstance(data, dict)
        and "writes" not in data
        and type(data.get("changes")) is int  # not a bool; another type is refused as it is
    ):
        return {k: v for k, v in data.items() if k != "changes"} | {
            "writes": data["changes"],
            "changes": None,
        }
    return data


def entry_fields(data: Any, path: Path, name: str) -> dict[str, Any]:
    types = dataclass_fields(HostEntry)
    return fields(types, data, path, f"host {name}", required=False)


def _judge(entry: HostEntry, waves: int, path: Path, name: str) -> None:
    if entry.state not in STATES:
        raise JournalError(f"{path}: a host of the rollout is in a state tune does not know.")
    if entry.configuration not in CONFIGURATIONS or not 0 <= entry.wave < waves:
        raise unreadable(path, f"host {name} has a configuration or wave tune never writes")
