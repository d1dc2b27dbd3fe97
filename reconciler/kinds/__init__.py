"""Knob kinds, one module each. Adding a kind is a module and a line here: the registry is the
list every other part of tune reads (the profile's sections and schema, observation, plan, apply,
rollback, the README's knob table and the tests)."""

from __future__ import annotations

from typing import Any

from ..core.changes import Phase
from . import (
    acs,
    checks,
    cmdline,
    cpu,
    ecc,
    files,
    gpus,
    hugepages,
    irq_affinity,
    lxc,
    modules,
    nvreg,
    pci,
    services,
    sysctl,
    sysfs,
)
from .base import Kind

# Plan order within a phase and priority: the order operators read an audit in. Sections
# appear in the profile and its schema in this order too.
REGISTRY: tuple[Kind[Any], ...] = (
    sysctl.KIND,
    sysfs.KIND,
    hugepages.KIND,
    cpu.KIND,
    modules.KIND,
    pci.KIND,
    acs.KIND,
    irq_affinity.KIND,
    gpus.KIND,
    services.KIND,
    cmdline.KIND,
    nvreg.KIND,
    ecc.KIND,
    lxc.KIND,
    checks.KIND,
    files.KIND,
)

KINDS: dict[str, Kind[Any]] = {k.kind: k for k in REGISTRY}


def named(kind: str) -> Kind[Any] | None:
    """The kind of a change or a journaled step; None for one this tune does not know (a plan
    or a journal written by another version)."""
    return KINDS.get(kind)


def boot_kind(kind: str) -> bool:
    """Whether changes of `kind` are boot configuration (what `tune verify` rolls back)."""
    found = KINDS.get(kind)
    return found is not None and found.phase is Phase.REBOOT


def boot_files(kind: str) -> bool:
    """Whether changes of `kind` are tune's boot-time files (what --no-persist leaves out)."""
    found = KINDS.get(kind)
    return found is not None and found.persistence
