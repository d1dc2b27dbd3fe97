"""The work `tune apply` does, as plain data: what to record, what to write, what to read back.

Knob kinds turn a `Change` into a `Step`; the engine (`apply.py`) executes steps against a
`Host` and the journal stores them verbatim, so `tune rollback` needs neither the profile nor
the kinds. Everything here is deliberately primitive (write this value to this file, put these
bytes at this path, run this argv; read this file back and compare it one of five ways) so
that an SSH target without Python can run the same steps from a POSIX sh script:

- `Read.TEXT`: the file's exact text (`cat`), absent when it does not exist;
- `Read.WORDS`: whitespace collapsed (`tr -s '[:space:]' ' '`), integers in decimal
  (`normalize_words`: `0x10` reads as 16, as the plan reads it);
- `Read.CHOICE`: the bracketed option (`sed 's/.*\\[\\(.*\\)\\].*/\\1/'`), else WORDS;
- `Read.MODULE`: "loaded" when a line of the file lists `arg` live (its first field `arg`, its
  fifth neither `Loading` nor `Unloading`: `awk`);
- `Read.MRRS`: Max_Read_Request_Size in bytes from the little-endian u16 at byte `arg` of a
  binary PCI config file (`od -An -tu2 -j ARG -N2`, then shell arithmetic);
- `Read.GPU`: the field `arg` of the GPU whose PCI bus id is `path`, from the output of
  `facts.nvidia_smi.QUERY`, or `CLOCKS_QUERY` for an application clocks field (run, not read:
  no file holds a GPU's state; `awk` in sh); `clocks.applications` is the pair
  `MEMORY,GRAPHICS`.
- `Read.BITS`: the bits `MASK` of the little-endian u16 at byte `OFFSET` of a binary PCI config
  file, `arg` being `OFFSET:MASK` (decimal, hex), as four hex digits: a flag of a register (ACS
  control's redirect bits, Device Control's Relaxed Ordering) read the way setpci writes it.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..core.changes import Change, Value, jsonable
from ..facts import modules, numbers, nvidia_smi, pcie

_SELECTED = re.compile(r"\[([^\]]+)\]")


def kernel_integer(word: str) -> str:
    """`word` in decimal where the kernel parses it as an integer (`0x10` and `020` read as
    16, `+5` as 5), any other word as it is (lib.sh's `kint` says the same)."""
    number = numbers.kernel_integer(word)
    return word if number is None else str(number)


def normalize_words(raw: str | None) -> str | None:
    """Multi-value kernel files: whitespace and tabs collapse; integers in any notation the
    kernel accepts become decimal, as it prints them back (tcp_rmem comes back tab-separated).
    The plan reads a knob so, and a step's probe reads it the same (`Read.WORDS`)."""
    if raw is None:
        return None
    return " ".join(kernel_integer(word) for word in raw.split())


class Read(StrEnum):
    TEXT = "text"
    WORDS = "words"
    CHOICE = "choice"
    MODULE = "module"
    MRRS = "mrrs"
    GPU = "gpu"
    BITS = "bits"


@dataclass(frozen=True)
class Probe:
    """Where a step's effect shows, and how to read it."""

    path: str
    read: Read
    arg: str = ""

    def value(self, raw: bytes | None) -> str | None:
        """The normalised reading of `raw` (the file's bytes, None when it does not exist; for
        `Read.GPU`, the query's output, None when it failed)."""
        if raw is None:
            return None
        if self.read is Read.GPU:
            return nvidia_smi.value_of(raw, self.path, self.arg)
        if self.read in (Read.MRRS, Read.BITS):
            at, _, mask = self.arg.partition(":")
            offset = int(at)
            if len(raw) < offset + 2:
                return None
            control = pcie.u16(raw, offset)
            if self.read is Read.BITS:
                return f"{control & int(mask, 16):04x}"
            return str(pcie.max_read_request(control))
        text = raw.decode("utf-8", "replace")
        if self.read is Read.TEXT:
            return text
        if self.read is Read.MODULE:
            live = any(modules.is_live(line, self.arg) for line in text.splitlines())
            return "loaded" if live else "absent"
        if self.read is Read.CHOICE:
            selected = _SELECTED.search(text)
            if selected:
                return selected.group(1)
        return normalize_words(text)

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "read": self.read.value, "arg": self.arg}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Probe:
        return cls(data["path"], Read(data["read"]), data.get("arg", ""))


@dataclass(frozen=True)
class SetAttr:
    """One write(2) of `value` to an existing kernel attribute (sysctl, sysfs, cpufreq)."""

    path: str
    value: str

    def describe(self) -> str:
        return f"write {self.path}: {self.value}"


def temporary(path: str) -> str:
    """Where a `PutFile` writes its bytes before the rename, in both engines: beside the file
    (a rename is atomic only within one file system), hidden, and named after it, so a
    rollback knows which one a write cut short left behind."""
    directory, name = path.rsplit("/", 1)
    return f"{directory}/.{name}.tune-new"


@dataclass(frozen=True)
class PutFile:
    """Replace a whole file atomically (temporary file, fsync, rename), creating its
    directory; the engine journals the directories it creates (`mkdir`) before it does."""

    path: str
    data: bytes
    mode: int = 0o644

    def describe(self) -> str:
        lines = self.data.decode("utf-8", "replace").splitlines()
        body = "".join(f"\n        | {line}" for line in lines)
        return f"write file {self.path} (mode {self.mode:04o}, {len(self.data)} bytes):{body}"


@dataclass(frozen=True)
class DeleteFile:
    path: str

    def describe(self) -> str:
        return f"delete file {self.path}"


@dataclass(frozen=True)
class Command:
    """A command as an argv list: no shell ever sees it."""

    argv: tuple[str, ...]

    def describe(self) -> str:
        import shlex

        return f"run {shlex.join(self.argv)}"


@dataclass(frozen=True)
class BootTool:
    """A command that regenerates boot configuration (`update-grub`, `proxmox-boot-tool
    refresh`): run on a live host; on a snapshot, recorded in the run's journal instead, since
    it would act on the machine tune runs on."""

    argv: tuple[str, ...]

    def describe(self) -> str:
        import shlex

        return f"run {shlex.join(self.argv)} (boot tool; journaled, not run, on a snapshot)"


Op = SetAttr | PutFile | DeleteFile | Command | BootTool


def op_to_json(op: Op) -> dict[str, Any]:
    if isinstance(op, SetAttr):
        return {"op": "set", "path": op.path, "value": op.value}
    if isinstance(op, PutFile):
        out: dict[str, Any] = {"op": "put", "path": op.path, "mode": op.mode}
        try:
            out["text"] = op.data.decode("utf-8")
        except UnicodeDecodeError:
            out["base64"] = base64.b64encode(op.data).decode("ascii")
        return out
    if isinstance(op, DeleteFile):
        return {"op": "delete", "path": op.path}
    if isinstance(op, BootTool):
        return {"op": "boot", "argv": list(op.argv)}
    return {"op": "run", "argv": list(op.argv)}


def op_from_json(data: dict[str, Any]) -> Op:
    kind = data["op"]
    if kind == "set":
        return SetAttr(data["path"], data["value"])
    if kind == "put":
        raw = (
            data["text"].encode("utf-8") if "text" in data else binascii.a2b_base64(data["base64"])
        )
        return PutFile(data["path"], raw, int(data.get("mode", 0o644)))
    if kind == "delete":
        return DeleteFile(data["path"])
    if kind == "run":
        return Command(tuple(data["argv"]))
    if kind == "boot":
        return BootTool(tuple(data["argv"]))
    raise ValueError(f"unknown operation {kind!r}")


class Need(StrEnum):
    WRITABLE = "writable"  # the path accepts writes (a read-only sysctl inside a container)
    COMMAND = "command"  # the program is installed (setpci)
    MODULE = "module"  # the kernel module exists for the running kernel


@dataclass(frozen=True)
class Require:
    """Checked for every step before the first write, so a doomed run writes nothing."""

    need: Need
    arg: str


@dataclass(frozen=True)
class Step:
    """One change: its prior and desired values (plan JSON form), how to make and undo it,
    and what the probe must read after each."""

    id: str
    kind: str
    target: str
    prior: Value
    desired: Value
    probe: Probe
    expect: str | None  # the probe's reading after `do`
    restored: str | None  # the probe's reading after `undo` (the prior state)
    do: tuple[Op, ...]
    undo: tuple[Op, ...]
    requires: tuple[Require, ...] = field(default=())
    optional: bool = False  # a write the kernel refuses skips the step (`Refused`)

    @classmethod
    def of(cls, change: Change, **how: Any) -> Step:
        """The step for `change`: its identity and values come from the change, `how` says
        how to make it (probe, expect, restored, do, undo, requires)."""
        return cls(
            id=change.id,
            kind=change.kind,
            target=change.target,
            prior=change.current,
            desired=change.desired,
            optional=change.optional,
            **how,
        )

    def to_json(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "prior": jsonable(self.prior),
            "desired": jsonable(self.desired),
            "probe": self.probe.to_json(),
            "expect": self.expect,
            "restored": self.restored,
            "do": [op_to_json(op) for op in self.do],
            "undo": [op_to_json(op) for op in self.undo],
        }
        return out | {"optional": True} if self.optional else out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Step:
        return cls(
            id=data["id"],
            kind=data["kind"],
            target=data["target"],
            prior=_value(data.get("prior")),
            desired=_value(data.get("desired")),
            probe=Probe.from_json(data["probe"]),
            expect=data.get("expect"),
            restored=data.get("restored"),
            do=tuple(op_from_json(op) for op in data.get("do", ())),
            undo=tuple(op_from_json(op) for op in data.get("undo", ())),
            optional=bool(data.get("optional", False)),
        )


def _value(data: Any) -> Value:
    return tuple(data) if isinstance(data, list) else data


@dataclass(frozen=True)
class Skipped:
    """A change `apply --skip-missing` left out: the host lacks what it needs (`reason`, in the
    host's words)."""

    id: str
    reason: str

    @property
    def line(self) -> str:
        return f"{self.id} skipped (--skip-missing): {self.reason}."

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "reason": self.reason}
