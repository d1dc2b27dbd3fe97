"""The run journal's records as types: one frozen dataclass per record type, each with the
JSON it is written as (`to_json`) and a strict reading of it (`from_json`).

Three writers produce these lines: the Python engine (`Journal.record`), the sh engine's
script (records rendered here by `render`) and the printf records of `apply/lib.sh`, which runs
where there is no Python (`tests/test_journal_shapes.py` reads back every shape it writes).
Every reader goes through `record_from_json`, so a record is either whole and typed or a
`RecordError` that says what is wrong with it.

The contract only grows: a record may carry fields this tune does not know (a newer tune wrote
them), which are ignored; a field it knows must have its type, and one without a default must
be there.
"""

from __future__ import annotations

import binascii
import dataclasses
import hashlib
import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, Union

from .ops import Step

# The journal format this tune writes (`RunStarted.format`).
JOURNAL_FORMAT = 2


class RecordError(ValueError):
    """A journal line that is JSON but not a record this tune can read; the message says why."""


# A check of one parsed JSON value against a field's annotation: the value as the field holds it
# (lists arrive where a tuple is declared: a record is frozen), or `RecordError`. Built once
# per annotation (`_checker`), since a journal holds hundreds of records of a few types.
Checker = Callable[[Any, str], Any]


def _checker(hint: Any) -> Checker:
    if hint not in _CHECKERS:
        _CHECKERS[hint] = _build(hint)
    return _CHECKERS[hint]


def _build(hint: Any) -> Checker:
    origin = typing.get_origin(hint)
    if hint is Any:
        return lambda value, where: value
    if origin in (Union, types.UnionType):
        options = [_checker(option) for option in typing.get_args(hint)]

        def one_of(value: Any, where: str) -> Any:
            for option in options:
                try:
                    return option(value, where)
                except RecordError:
                    continue
            raise _Wrong(value, hint, where)

        return one_of
    if origin is tuple:
        item = _checker(typing.get_args(hint)[0])

        def items(value: Any, where: str) -> Any:
            if not isinstance(value, list | tuple):
                raise _Wrong(value, hint, where)
            return tuple(item(v, f"{where}[{i}]") for i, v in enumerate(value))

        return items
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return lambda value, where: _conforming(value, hint, where)
    # JSON has no separate bool: true is no integer here, and an integer is a number.
    base = origin or hint  # dict[str, Any]: JSON object keys are text already
    accepted: tuple[type, ...] = {float: (int, float)}.get(base, (base,))
    refused = () if hint is bool else (bool,)

    def plain(value: Any, where: str) -> Any:
        if isinstance(value, accepted) and not isinstance(value, refused):
            return value
        raise _Wrong(value, hint, where)

    return plain


class _Wrong(RecordError):
    """A value of the wrong type; its message is made only when shown (a union tries each of
    its options, and all but one fail)."""

    def __init__(self, value: Any, hint: Any, where: str) -> None:
        super().__init__(where)
        self.value, self.hint, self.where = value, hint, where

    def __str__(self) -> str:
        return f"{self.where} is {_shown(self.value)}, not {_named(self.hint)}"


_CHECKERS: dict[Any, Checker] = {}


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except TypeError:  # an operation or a tuple, as a lenient `from_json` built it
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _named(hint: Any) -> str:
    names = {str: "text", int: "an integer", float: "a number", bool: "true or false"}
    if hint in names:
        return names[hint]
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) in (Union, types.UnionType):
        return " or ".join(_named(h) for h in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        return "a list"
    if typing.get_origin(hint) is dict:
        return "an object"
    return getattr(hint, "__name__", str(hint))


# A dataclass's fields: (name, required, checker), resolved once per class.
Fields = tuple[tuple[str, bool, Checker], ...]
_FIELDS: dict[type, Fields] = {}


def _fields(cls: type) -> Fields:
    if cls not in _FIELDS:
        hints = typing.get_type_hints(cls)
        _FIELDS[cls] = tuple(
            (
                f.name,
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                _checker(hints[f.name]),
            )
            for f in dataclasses.fields(cls)
        )
    return _FIELDS[cls]


def _conforming(obj: Any, cls: type, where: str) -> Any:
    if not isinstance(obj, cls):
        raise _Wrong(obj, cls, where)
    conforms(obj, where)
    return obj


def conforms(obj: Any, where: str) -> None:
    """Every field of the dataclass `obj` (and of those it holds) has its declared type: what a
    lenient `from_json` (`Step.from_json`) built from a record is checked with."""
    for name, _, check in _fields(type(obj)):
        check(getattr(obj, name), f"{where}.{name}")


def of_type(value: Any, hint: Any, where: str) -> Any:
    """`value` (parsed JSON) as a field annotated `hint` holds it, or `RecordError` naming
    `where`: what a record's own data is checked with, for data that is not one of its fields."""
    return _checker(hint)(value, where)


def _read_fields(cls: type, data: dict[str, Any], what: str) -> dict[str, Any]:
    """The fields of `cls` that `data` (one parsed record) holds, checked; RecordError names
    a required one it lacks."""
    values: dict[str, Any] = {}
    for name, required, check in _fields(cls):
        if name in data:
            values[name] = check(data[name], name)
        elif required:
            raise RecordError(f"the {what} record has no {name}")
    return values


@dataclass(frozen=True)
class Record:
    """One journal line. `TYPE` is its `type` field; the dataclass fields are the others."""

    TYPE: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        fields = {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}
        return {"type": self.TYPE, **fields}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls(**_read_fields(cls, data, cls.TYPE))


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class RunStarted(Record):
    """The first record of a run. `format` 2 and later seal each step record (`StepRecord`);
    a run journaled before (no `format`) is format 1."""

    TYPE = "run"
    run_id: str
    started: str
    profile: str
    phase: str
    host: str
    boot_id: str | None
    format: int = JOURNAL_FORMAT

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        run = super().from_json({"format": 1, **data})
        if not 1 <= run.format <= JOURNAL_FORMAT:
            raise RecordError(f"journal format {run.format} is not one this tune reads")
        return run


@dataclass(frozen=True)
class PlanRecord(Record):
    """The plan at the start (see `run_record.plan_record`): what a report says is still to do."""

    TYPE = "plan"
    changes: tuple[dict[str, Any], ...] = ()
    pending: tuple[dict[str, Any], ...] = ()
    failed_checks: tuple[dict[str, Any], ...] = ()
    # Knob ids the run left out, wholly or in part (`apply --skip-missing`: a module the kernel
    # lacks, and tune's boot-time files written without it); absent before this field existed.
    left_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepAbout:
    """Why a step was made, for `tune report` (`run_record.step_context`); a run journaled
    before tune kept these has none of them."""

    operations: tuple[str, ...] = ()
    priority: str | None = None
    reason: str = ""
    phase: str | None = None
    fix: str | None = None
    # The change's `setting` and `subject` (`Change`), so a report folds 128 CPUs' steps as
    # the plan folded their changes; only for changes that have a subject.
    setting: str = ""
    subject: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operations": list(self.operations)}
        if self.priority is not None:
            out |= {"priority": self.priority, "reason": self.reason, "phase": self.phase}
        if self.subject:
            out |= {"setting": self.setting, "subject": self.subject}
        return out | ({"fix": self.fix} if self.fix else {})


def seal(data: dict[str, Any]) -> str:
    """A step record's `check`: a digest of its other fields. A step record is what a rollback
    writes back, and a flipped byte inside one of its values (a path, a prior value, a module's
    name) can still be valid JSON of the right type: the seal is what tells it from the
    original. The markers that lib.sh writes carry none: they restore nothing."""
    fields = {k: v for k, v in data.items() if k != "check"}
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# What `Step.to_json` always writes: a step record without one of them was cut or altered.
STEP_FIELDS = (
    "id",
    "kind",
    "target",
    "prior",
    "desired",
    "probe",
    "expect",
    "restored",
    "do",
    "undo",
)


@dataclass(frozen=True)
class StepRecord(Record):
    """A step, journaled BEFORE its first write: everything `tune rollback` needs."""

    TYPE = "step"
    seq: int
    step: Step
    about: StepAbout = StepAbout()
    # Whether the record as read carried its seal (`check`); one a format 1 run wrote has none.
    sealed: bool = field(default=True, compare=False)

    def to_json(self) -> dict[str, Any]:
        out = {"type": self.TYPE, "seq": self.seq, **self.about.to_json(), **self.step.to_json()}
        return out | {"check": seal(out)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        seq = _checker(int)(data.get("seq"), "seq")
        missing = [k for k in STEP_FIELDS if k not in data]
        if missing:
            raise RecordError(f"the step record has no {missing[0]}")
        try:
            step = Step.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as exc:
            raise RecordError(f"step {data.get('id')!r} cannot be read ({exc})") from None
        conforms(step, "step")
        if "check" in data and data["check"] != seal(data):
            raise RecordError("the step record does not match its check: it was altered")
        about = StepAbout(**_read_fields(StepAbout, data, cls.TYPE))
        return cls(seq, step, about, sealed="check" in data)


@dataclass(frozen=True)
class Mkdir(Record):
    """The directories step `seq`'s file write is about to create, deepest first."""

    TYPE = "mkdir"
    seq: int
    paths: tuple[str, ...]


@dataclass(frozen=True)
class Written(Record):
    TYPE = "written"
    seq: int


@dataclass(frozen=True)
class Verified(Record):
    TYPE = "verified"
    seq: int


@dataclass(frozen=True)
class StepUnsupported(Record):
    """An optional step whose write the kernel refused: skipped, nothing to restore."""

    TYPE = "unsupported"
    seq: int
    error: str


@dataclass(frozen=True)
class Deferred(Record):
    """A boot tool a snapshot apply journals instead of running."""

    TYPE = "deferred"
    argv: tuple[str, ...]
    step: str


@dataclass(frozen=True)
class Failed(Record):
    TYPE = "failed"
    error: str
    at: str


@dataclass(frozen=True)
class StepRestored(Record):
    TYPE = "restored"
    seq: int


@dataclass(frozen=True)
class StepUnchanged(Record):
    """A step found at its prior value when it was to be restored."""

    TYPE = "unchanged"
    seq: int


@dataclass(frozen=True)
class RestoreFailed(Record):
    TYPE = "restore-failed"
    seq: int
    error: str


@dataclass(frozen=True)
class RollbackStarted(Record):
    TYPE = "rollback"
    started: str


@dataclass(frozen=True)
class ProfileReplaced(Record):
    """The text profile.yaml had before this run replaced it (null: there was none)."""

    TYPE = "profile"
    prior: str | None


@dataclass(frozen=True)
class ProbesMeasured(Record):
    """One measurement of the profile's probes (`probes.runner.ProbeResult.to_json` each)."""

    TYPE = "probes"
    when: str
    phase: str
    results: tuple[dict[str, Any], ...]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        measured = super().from_json(data)
        for i, result in enumerate(measured.results):
            for key in ("name", "metric"):
                if not isinstance(result.get(key), str):
                    raise RecordError(f"results[{i}] has no {key}")
        return measured


@dataclass(frozen=True)
class GateJudged(Record):
    TYPE = "gate"
    probe: str
    phase: str
    when: str
    ok: bool
    message: str
    before: float | None
    after: float | None
    kept: bool


@dataclass(frozen=True)
class ContainerRan(Record):
    """A command `tune verify` ran to restart a container after the boot, and what it said."""

    TYPE = "container"
    container: str
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class ServiceRan(Record):
    """A command `tune apply --restart-services` ran to restart a service after the apply,
    and what it said."""

    TYPE = "service"
    unit: str
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class End(Record):
    """The run's outcome so far: the LAST `end` of a file is the run's."""

    TYPE = "end"
    outcome: str
    finished: str


RECORD_TYPES: dict[str, type[Record]] = {
    cls.TYPE: cls
    for cls in (
        RunStarted,
        PlanRecord,
        StepRecord,
        Mkdir,
        Written,
        Verified,
        StepUnsupported,
        Deferred,
        Failed,
        StepRestored,
        StepUnchanged,
        RestoreFailed,
        RollbackStarted,
        ProfileReplaced,
        ProbesMeasured,
        GateJudged,
        ContainerRan,
        ServiceRan,
        End,
    )
}

# The records that speak of one step by its seq.
STEP_MARKERS = (
    Mkdir,
    Written,
    Verified,
    StepUnsupported,
    StepRestored,
    StepUnchanged,
    RestoreFailed,
)


def record_from_json(data: Any) -> Record:
    """The typed record of one parsed journal line; `RecordError` says what is wrong."""
    if not isinstance(data, dict):
        raise RecordError("a journal record is a JSON object")
    kind = data.get("type")
    cls = RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise RecordError(f"unknown record type {_shown(kind)}")
    return cls.from_json(data)


def render(record: Record) -> str:
    """One journal line, without its newline: as the Python engine appends it, and as the sh
    engine's script does (`sh_engine`)."""
    return json.dumps(record.to_json(), separators=(",", ":"))


def parse_line(line: bytes) -> Record:
    """One journal line (UTF-8 JSON) as its record."""
    # json and the field checks recurse per level of nesting: no record tune writes nests
    # deeper than a few levels.
    deep = RecordError("not a record tune writes (nested too deeply to read)")
    try:
        data = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise RecordError("not UTF-8 text") from None
    except ValueError as exc:
        raise RecordError(f"not a JSON record ({exc})") from None
    except RecursionError:
        raise deep from None
    try:
        return record_from_json(data)
    except RecursionError:
        raise deep from None
