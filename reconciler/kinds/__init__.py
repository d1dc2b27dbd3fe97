"""Knob kinds, one module each. Adding a kind is a module and a line here: the registry is the
list every other part of tune reads (the profile's sections and schema, observation, plan, apply,
rollback, the docs' knob table and the tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.changes import Phase
from ..steps.ops import Step
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


def containers_to_restart(profile: Any) -> list[str]:
    """The container configs `--restart-containers` restarts once the boot is verified, as the
    kinds of `profile` name them, once each."""
    found: list[str] = []
    for kind in REGISTRY:
        spec = kind.spec_of(profile)
        found += [] if spec is None else kind.containers_to_restart(spec)
    return list(dict.fromkeys(found))


def services_to_restart(steps: Sequence[Step]) -> list[str]:
    """The units `--restart-services` restarts for what `steps` changed, as their kinds say."""
    return [
        unit
        for kind in REGISTRY
        for unit in kind.services_to_restart([s for s in steps if s.kind == kind.kind])
    ]
