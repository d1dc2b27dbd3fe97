"""What every knob kind shares: the long-form entry, safe-value types, the `Kind` interface."""

from __future__ import annotations

import posixpath
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Generic, TypeVar, cast

from ..core.changes import Change, Outcome, Phase, Priority, Value
from ..core.errors import HostError
from ..core.files import Files, Request
from ..core.paths import may_match_dot
from ..core.schema import After, Before, Constrain, Strict, invalid, pattern_check
from ..facts.cmdline import Edit
from ..steps.ops import (
    DeleteFile,
    Need,
    Op,
    Probe,
    PutFile,
    Read,
    Require,
    SetAttr,
    Step,
    normalize_words,
)

if TYPE_CHECKING:
    from ..steps.persist import Persisted

V = TypeVar("V")
SpecT = TypeVar("SpecT")

__all__ = [
    "BootCheck",
    "Entry",
    "Kind",
    "Meta",
    "Strict",
    "entry",
    "host_path",
    "safe",
    "safe_scalar",
]


@dataclass(frozen=True, kw_only=True)
class Meta(Strict):
    """Why an entry exists and how urgent it is; shown with every change it causes."""

    priority: Priority = Priority.P1
    reason: str = ""
    optional: bool = field(
        default=False,
        metadata={
            "description": "a kernel that refuses the write (EINVAL, EOPNOTSUPP, ENOTSUPP) "
            "skips this entry instead of failing the run"
        },
    )
    required: bool = field(
        default=False,
        metadata={
            "description": "a host without this knob (no such file or device) is an error "
            "that stops apply, instead of a note and a skipped entry"
        },
    )


@dataclass(frozen=True, kw_only=True)
class Entry(Meta, Generic[V]):
    """The long form `{value, priority, reason}` of any profile entry."""

    value: V


# The one rule for a knob the host does not have, said after why it is missing.
SKIPPED = (
    "Skipped: not a change, apply leaves it and check does not count it as drift "
    "(`required: true` on the entry makes it an error)."
)
REQUIRED = "The entry is `required: true`: tune apply refuses to run without it."


def missing_note(reason: str, meta: Meta) -> str:
    """`reason` (a sentence: why the knob is not there) and what tune does about it."""
    return f"{reason} {REQUIRED if meta.required else SKIPPED}"


def _long_form(data: Any) -> Any:
    return data if isinstance(data, dict) else {"value": data}


def entry(value_type: Any, model: Any = None) -> Any:
    """`Entry[value_type]` (or a subclass `model`) that also accepts the short form: the bare
    value."""
    long = model if model is not None else Entry[value_type]
    return Annotated[long, Before(_long_form, accepts=value_type | long)]


def safe(pattern: str, what: str, example: str) -> Any:
    """A string type that must match `pattern` entirely: values that could reach a shell or a
    path are never free text."""
    check = pattern_check(pattern, what, example)
    return Annotated[str, Constrain(json_schema_extra={"pattern": pattern}), After(check)]


def host_path(pattern: str, what: str, example: str, tree: str) -> Any:
    """Like `safe`, for a path (or glob) on the host under `tree`: no component may match a
    name that starts with `.`, since the host's shell expands globs and its readdir lists `.`
    and `..` (dash expands `.?` to `..`): the glob would lead out of the tree."""
    check = pattern_check(pattern, what, example)

    def inside(value: str) -> str:
        for component in check(value).split("/"):
            if may_match_dot(component):
                raise invalid(
                    "path_leaves_tree",
                    "{value} could lead out of {tree}: its component {component} could match "
                    "a name that starts with a dot, and a shell expands .? to ..",
                    value=repr(value),
                    tree=tree,
                    component=repr(component),
                )
        return value

    return Annotated[str, Constrain(json_schema_extra={"pattern": pattern}), After(inside)]


def safe_scalar(pattern: str, what: str, example: str, optional: bool = False) -> Any:
    """Like `safe`, for values YAML may give as integers (`vm.swappiness: 10`); kept as text."""
    check = pattern_check(pattern, what, example)

    def text(value: Any) -> str | None:
        return None if value is None and optional else check(scalar_text(value))

    pattern_only = Constrain(json_schema_extra={"pattern": pattern})
    schema_type = int | str | None if optional else int | str
    return Annotated[
        str | None if optional else str,
        pattern_only,
        Before(text, accepts=Annotated[schema_type, pattern_only]),
    ]


_NOT_SCALAR = {
    "bool": "a boolean (write 1 or 0)",
    "float": "a fraction",
    "list": "a list",
    "dict": "a mapping",
    "date": "a date",
    "datetime": "a date",
    "bytes": "binary data",
}


def scalar_text(value: Any) -> str:
    """Profile scalars (integers or strings) as the text a kernel file holds; one clear error
    for anything else, instead of one per member of a union."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise invalid(
        "scalar_type",
        "expected a number or a string, not {kind}",
        kind=_NOT_SCALAR.get(type(value).__name__, type(value).__name__),
    )


# A value written into a kernel file: no quotes, no shell or glob metacharacters.
KernelValue = safe_scalar(
    r"[A-Za-z0-9 \t_.,:=/@%+\[\]-]*",
    "kernel value (letters, digits, spaces, _.,:=/@%+[]-)",
    "madvise",
)


_SELECTED = re.compile(r"\[([^\]]+)\]")


def normalize_choice(raw: str | None) -> str | None:
    """Choice files print every option with the active one in brackets: `always [madvise] never`."""
    if raw is None:
        return None
    selected = _SELECTED.search(raw)
    return selected.group(1) if selected else normalize_words(raw)


@dataclass
class BootCheck:
    """What `tune verify` found of one kind's expectations after the boot: a sentence for each
    that held and each that did not."""

    held: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


class Kind(ABC, Generic[SpecT]):
    """A knob kind: which files it reads, how it compares desired with observed (pure), and for
    `tune apply` how to make, undo and persist a change, as data (`reconciler.steps.ops`).

    Registered by a line of `reconciler.kinds.LINES`, a kind owns the profile section `section` (of
    type `spec_type`; a mapping or a list is empty when absent, anything else None), its row of
    the knob table in docs/kinds/index.md (`reads`, `compared`), and the hooks below that the rest
    of tune asks instead of testing kind names.
    """

    section: ClassVar[str]  # the profile key, e.g. "sysctl"; "" for a kind derived from it all
    parent_section: ClassVar[str] = ""  # the section a derived kind reads (`modules` for nvreg)
    spec_type: ClassVar[Any]  # the section's type in the profile schema
    kind: ClassVar[str]  # the change kind, e.g. "sysctl"
    phase: ClassVar[Phase]
    reads: ClassVar[str] = ""  # the knob table (docs/kinds/index.md): where it reads
    compared: ClassVar[str] = ""  # the knob table (docs/kinds/index.md): how it compares
    noun: ClassVar[str] = "targets"  # its subjects, in a folded line ("on 128 CPUs")
    # Each subject is a profile entry of its own (a container), not a CPU or device of one
    # entry: its changes never fold together, and a view counts (and a metric names) each.
    entry_per_subject: ClassVar[bool] = False
    # tune's boot-time files: derived from the whole profile, planned after every knob, left
    # out by --no-persist.
    persistence: ClassVar[bool] = False
    whole_file: ClassVar[bool] = False  # its values are whole files: shown by their size
    # Its changes are what a one-time boot tries before they become the default (`boot.tryonce`).
    try_once: ClassVar[bool] = False
    # What makes a change of this reboot-phase kind take effect, once configured.
    takes_effect: ClassVar[str] = "reboot the host"

    @property
    def summary(self) -> str:
        """The first line of the kind's module docstring: its description in the schema."""
        module = sys.modules[type(self).__module__]
        return (module.__doc__ or "").strip().split("\n", 1)[0]

    def spec_of(self, profile: Any) -> SpecT | None:
        """What this kind works from in `profile`: its section, None when empty; the whole
        profile for persistence."""
        if self.persistence:
            return cast(SpecT, profile)
        return getattr(profile, self.section) or None

    @abstractmethod
    def request(self, spec: SpecT) -> Request:
        """Every path this kind needs for `spec`, to be read with all other kinds in one batch."""

    @abstractmethod
    def compare(self, spec: SpecT, files: Files) -> Outcome:
        """Desired against observed, for every concrete target; pure."""

    def change(
        self,
        target: str,
        current: Value,
        desired: Value,
        meta: Meta,
        *,
        setting: str = "",
        subject: str = "",
        fix: str = "",
        missing: bool = False,
    ) -> Change:
        """`missing`: the host has no such knob (`missing_note` says so in the plan)."""
        return Change(
            kind=self.kind,
            target=target,
            current=current,
            desired=desired,
            phase=self.phase,
            priority=meta.priority,
            reason=meta.reason,
            setting=setting or target,
            subject=subject,
            fix=fix,
            optional=meta.optional,
            missing=missing and not meta.required,
        )

    def step(self, spec: SpecT, change: Change, files: Files) -> Step:
        """How to make `change` and undo it, from the observation; raises `HostError` (nothing
        written yet) when it cannot be made on this host."""
        raise HostError(
            f"{change.id}: tune apply does not write {self.kind} settings yet "
            "(reboot phase); use --runtime-only."
        )

    def persist(self, spec: SpecT, files: Files) -> list[Persisted]:
        """Lines in tune's own boot-time files that make `spec` survive a reboot."""
        return []

    def asks_kernel_options(self, spec: SpecT) -> bool:
        """Whether `spec` wants kernel command-line options derived from the observation
        (`kernel_options`): the `cmdline` kind then plans them with the profile's own."""
        return False

    def kernel_options(self, spec: SpecT, files: Files) -> list[tuple[Edit, Meta]]:
        """The command-line edits `spec` needs on this host, with the entry that asks for each;
        made by the `cmdline` kind in the same reboot-phase change as the profile's."""
        return []

    def explain(self, step: Step, output: str) -> str | None:
        """A clearer sentence for a command of `step` that failed with `output`, if known."""
        return None

    def read_back_words(self, step: Step) -> tuple[str, str] | None:
        """What a message says before and after the value `step`'s probe read back when it is
        not what was written, where this kind knows better than "refused or clamped"."""
        return None

    # The reboot (`tune verify`): a kind declares what each of its steps expects of the next
    # boot as JSON data by target (`after_boot`), kept in pending.json under the kind's name,
    # and checks it itself against the new boot (`after_boot_request`, read in the one batch
    # of every kind's, then `verify_after_boot`). Nothing else in tune names the kind for it.
    # The type of one expected value, checked when pending.json is read (a damaged file is a
    # message, never an error deep in `verify_after_boot`).
    after_boot_value: ClassVar[Any] = str
    # The field of pending.json where tune before the registry kept this kind's expectations,
    # so that a reboot prepared by that version is verified the same.
    pending_field: ClassVar[str] = ""

    def after_boot(self, step: Step) -> dict[str, Any]:
        """What `step` (of this reboot-phase kind) expects of the next boot, by target, as JSON
        data: {} when there is nothing `tune verify` can check."""
        return {}

    def after_boot_request(self, expected: Mapping[str, Any]) -> Request:
        """What `verify_after_boot` reads of the new boot for `expected` (this kind's part of
        pending.json), read in one batch with every other kind's."""
        return Request()

    def verify_after_boot(self, expected: Mapping[str, Any], files: Files) -> BootCheck:
        """Whether the new boot (`files`, read as `after_boot_request` asked) brought
        `expected`: one sentence per target, held or failed."""
        return BootCheck(failed=[f"tune cannot check {self.kind} settings after the boot"])

    def containers_to_restart(self, spec: SpecT) -> list[str]:
        """The container configs `--restart-containers` restarts once the boot is verified."""
        return []

    # Its compare may find services whose main process still runs with what their
    # configuration set before (`Pending.restart`): `--restart-services` reads it for them.
    waits_for_restarts: ClassVar[bool] = False

    def services_to_restart(self, steps: Sequence[Step]) -> list[str]:
        """Units `--restart-services` restarts because `steps` (of this kind) changed what they
        read only when they start, and cannot be read back from a file."""
        return []


def attribute_step(
    change: Change,
    path: str,
    files: Files,
    read: Read,
    written: Callable[[str], str] = str,
) -> Step:
    """The step for a knob that is one kernel file: write the desired value, restore the prior.

    `written` turns a plan value into the text the file takes (`disabled` -> `1` for cpuidle).
    """
    if not isinstance(change.desired, str):
        raise HostError(f"{change.id}: nothing to write.")
    if not isinstance(change.current, str):
        why = f"cannot be read ({files.errors[path]})" if path in files.errors else "does not exist"
        raise HostError(f"{change.id} cannot be set: {path} {why} on this host.")
    probe = Probe(path, read)
    desired, prior = written(change.desired), written(change.current)
    return Step.of(
        change,
        probe=probe,
        expect=probe.value(desired.encode()),
        restored=probe.value(prior.encode()),
        do=(SetAttr(path, desired),),
        undo=(SetAttr(path, prior),),
        requires=(Require(Need.WRITABLE, path),),
    )


def file_op(path: str, data: bytes | None, mode: int = 0o644) -> PutFile | DeleteFile:
    return DeleteFile(path) if data is None else PutFile(path, data, mode)


def file_step(
    change: Change,
    path: str,
    before: bytes | None,
    after: bytes | None,
    tool: tuple[Op, ...],
    mode: int = 0o644,
) -> Step:
    """The step that gives the whole file `path` the bytes `after` (None: no file) and back
    `before`, each followed by `tool` (the command that makes the file take effect); `mode`:
    the file's permissions (0o755 for a script a daemon executes)."""
    probe = Probe(path, Read.TEXT)
    return Step.of(
        change,
        probe=probe,
        expect=probe.value(after),
        restored=probe.value(before),
        do=(file_op(path, after, mode), *tool),
        undo=(file_op(path, before, mode), *tool),
        requires=(Require(Need.WRITABLE, posixpath.dirname(path)),),
    )
