"""Knob kinds, one module each. Adding a kind is a module and a line here."""

from __future__ import annotations

from typing import Any

from . import cmdline, cpu, lxc, modules, pci, sysctl, sysfs
from .base import Kind

# Plan order within a phase and priority: the order operators read an audit in.
REGISTRY: tuple[Kind[Any], ...] = (
    sysctl.KIND,
    sysfs.KIND,
    cpu.KIND,
    modules.KIND,
    pci.KIND,
    cmdline.KIND,
    lxc.KIND,
)
