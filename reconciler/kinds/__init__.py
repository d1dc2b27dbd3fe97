"""Knob kinds, one module each. Adding a kind is a module and a line here: the registry is the
list every other part of tune reads (the profile's sections and schema, observation, plan, apply,
rollback, the docs' knob table and the tests).

A line names the kind's module, which is imported the first time the kind is used: a run pays
for the kinds its profile has, not for every kind tune knows (`tests/test_lazy_kinds.py`)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from ..core.changes import Phase
from ..steps.ops import Step
from .base import Kind


class Line(NamedTuple):
    """A kind as the registry knows it before its module is imported."""

    module: str  # its module in this package
    kind: str  # its change kind (`Kind.kind`)
    section: str = ""  # the profile section it owns (`Kind.section`)
    parent: str = ""  # a kind derived from a section: the section it reads (`Kind.parent_section`)


# Plan order within a phase and priority: the order operators read an audit in. Sections
# appear in the profile and its schema in this order too. A line with neither a section nor a
# parent is derived from the whole profile (tune's boot-time files).
LINES: tuple[Line, ...] = (
    Line("sysctl", "sysctl", "sysctl"),
    Line("sysfs", "sysfs", "sysfs"),
    Line("hugepages", "hugepages", "hugepages"),
    Line("cpu", "cpu", "cpu"),
    Line("modules", "module", "modules"),
    Line("pci", "pci", "pci"),
    Line("acs", "acs", "acs"),
    Line("irq_affinity", "irq_affinity", "irq_affinity"),
    Line("gpus", "gpu", "gpus"),
    Line("services", "service", "services"),
    Line("cmdline", "cmdline", "cmdline"),
    Line("nvreg", "nvreg", parent="modules"),
    Line("ecc", "ecc", parent="gpus"),
    Line("lxc", "lxc", "lxc"),
    Line("checks", "check", "checks"),
    Line("files", "file"),
)

# The section whose kind plans the kernel options other kinds ask for (`Kind.kernel_options`).
KERNEL_OPTIONS = "cmdline"

_BY_KIND = {line.kind: line for line in LINES}
SECTIONS: tuple[str, ...] = tuple(line.section for line in LINES if line.section)

# The kinds imported so far, by `Kind.kind`.
KINDS: dict[str, Kind[Any]] = {}


def load(line: Line) -> Kind[Any]:
    """The kind of `line`, its module imported on first use."""
    found = KINDS.get(line.kind)
    if found is None:
        found = importlib.import_module(f"{__name__}.{line.module}").KIND
        assert isinstance(found, Kind) and found.kind == line.kind, line
        KINDS[line.kind] = found
    return found


def every() -> tuple[Kind[Any], ...]:
    """Every kind, in the registry's order (each module imported): for what must ask them all
    (the profile's schema, a record written by any kind)."""
    return tuple(load(line) for line in LINES)


def of_section(section: str) -> Kind[Any]:
    """The kind that owns the profile section `section`."""
    return load(next(line for line in LINES if line.section == section))


def __getattr__(name: str) -> tuple[Kind[Any], ...]:
    # `REGISTRY`, as tune named every kind before the registry imported them lazily.
    if name == "REGISTRY":
        return every()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def in_profile(profile: Any, with_persistence: bool = True) -> Iterator[Kind[Any]]:
    """The kinds that may have work in `profile`, in the registry's order, importing no other:
    those of its sections in use, those derived from them, then, `with_persistence`, those
    derived from the whole profile. A section asks the kind of another section for what it
    derives (`acs`'s kernel options of `cmdline`): that kind comes too, even where its own
    section is empty."""
    used = {line.section for line in LINES if line.section and getattr(profile, line.section)}
    asked = any(
        kind.asks_kernel_options(kind.spec_of(profile))
        for line in LINES
        if line.section in used and line.section != KERNEL_OPTIONS
        for kind in [load(line)]
    )
    for line in LINES:
        if line.section:
            wanted = line.section in used or (line.section == KERNEL_OPTIONS and asked)
        else:
            wanted = line.parent in used if line.parent else with_persistence
        if wanted:
            yield load(line)


def named(kind: str) -> Kind[Any] | None:
    """The kind of a change or a journaled step; None for one this tune does not know (a plan
    or a journal written by another version)."""
    found = KINDS.get(kind)
    if found is None and kind in _BY_KIND:
        found = load(_BY_KIND[kind])
    return found


def boot_kind(kind: str) -> bool:
    """Whether changes of `kind` are boot configuration (what `tune verify` rolls back)."""
    found = named(kind)
    return found is not None and found.phase is Phase.REBOOT


def boot_files(kind: str) -> bool:
    """Whether changes of `kind` are tune's boot-time files (what --no-persist leaves out)."""
    found = named(kind)
    return found is not None and found.persistence


def containers_to_restart(profile: Any) -> list[str]:
    """The container configs `--restart-containers` restarts once the boot is verified, as the
    kinds of `profile` name them, once each."""
    found: list[str] = []
    for kind in in_profile(profile):
        spec = kind.spec_of(profile)
        found += [] if spec is None else kind.containers_to_restart(spec)
    return list(dict.fromkeys(found))


def services_to_restart(steps: Sequence[Step]) -> list[str]:
    """The units `--restart-services` restarts for what `steps` changed, as their kinds say."""
    return [
        unit
        for line in LINES
        if any(s.kind == line.kind for s in steps)
        for kind in [load(line)]
        for unit in kind.services_to_restart([s for s in steps if s.kind == kind.kind])
    ]
