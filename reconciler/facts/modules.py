"""Kernel modules: which are loaded (/proc/modules), which are compiled into the running kernel
(/lib/modules/RELEASE/modules.builtin) and where their parameters are (/sys/module). Names
compare with dashes and underscores as the same, as modprobe does."""

from __future__ import annotations

import posixpath

MODULES = "/proc/modules"
MODULE_DIR = "/sys/module"
# Every installed kernel's list: the running one is known only from the same batched read
# (osrelease), and the lists are a few KB each (141 lines on Debian 12's cloud kernel).
BUILTIN = "/lib/modules/*/modules.builtin"


def canonical(name: str) -> str:
    return name.replace("-", "_")


def module_name(path: str) -> str:
    """The module a path of modules.dep or modules.builtin names:
    `kernel/drivers/nvme/host/nvme-core.ko.zst` -> `nvme_core`."""
    return canonical(posixpath.basename(path.strip()).split(".ko", 1)[0])


def builtin_path(release: str) -> str:
    return f"/lib/modules/{release}/modules.builtin"


def loaded_modules(text: str | None) -> set[str]:
    """Names from /proc/modules: `name size refcount deps state address [taint]`."""
    return {canonical(line.split()[0]) for line in (text or "").splitlines() if line.strip()}


def builtin_modules(text: str | None) -> frozenset[str]:
    """Names from modules.builtin, one module's path a line (kbuild writes it; kmod reads it to
    answer "builtin" where /proc/modules, which lists loadable modules only, has no line)."""
    return frozenset(module_name(line) for line in (text or "").splitlines() if line.strip())


def param_path(module: str, param: str) -> str:
    return f"{MODULE_DIR}/{canonical(module)}/parameters/{param}"
