"""Kernel modules: which are loaded (/proc/modules) and where their parameters are
(/sys/module). Names compare with dashes and underscores as the same, as modprobe does."""

from __future__ import annotations

MODULES = "/proc/modules"
MODULE_DIR = "/sys/module"


def canonical(name: str) -> str:
    return name.replace("-", "_")


def loaded_modules(text: str | None) -> set[str]:
    """Names from /proc/modules: `name size refcount deps state address [taint]`."""
    return {canonical(line.split()[0]) for line in (text or "").splitlines() if line.strip()}


def param_path(module: str, param: str) -> str:
    return f"{MODULE_DIR}/{canonical(module)}/parameters/{param}"
