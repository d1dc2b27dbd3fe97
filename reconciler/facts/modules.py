"""Kernel modules: which are loaded (/proc/modules), which are compiled into the running kernel
(/lib/modules/RELEASE/modules.builtin) and where their parameters are (/sys/module). Names
compare with dashes and underscores as the same, as modprobe does."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

from ..core.paths import overlay_order

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


# The kernel's module states as /proc/modules prints them (kernel/module/procfs.c m_show):
# MODULE_STATE_GOING is `Unloading`, _COMING `Loading`, _LIVE `Live`; /sys/module/NAME/initstate
# says the same as `going`, `coming`, `live`.
LIVE = "Live"
TRANSIENT = {"Loading": "loading", "Unloading": "unloading"}


def module_states(text: str | None) -> dict[str, str]:
    """Name -> `loaded`, `loading` or `unloading`, from /proc/modules (`name size refcount deps
    state address [taint]`). Only a live module is loaded, as kmod's module_is_inkernel has
    it: one the kernel is still initialising or already tearing down is in flight, and modprobe
    loads it (the kernel waits for the one in flight to finish)."""
    states = {}
    for line in (text or "").splitlines():
        fields = line.split()
        if fields:
            state = fields[4] if len(fields) > 4 else LIVE
            states[canonical(fields[0])] = TRANSIENT.get(state, "loaded")
    return states


def is_live(line: str, name: str) -> bool:
    """Whether the /proc/modules line `line` lists `name` loaded (live)."""
    fields = line.split()
    return bool(fields) and fields[0] == name and (len(fields) < 5 or fields[4] not in TRANSIENT)


def loaded_modules(text: str | None) -> set[str]:
    """The names /proc/modules lists live (`module_states`)."""
    return {name for name, state in module_states(text).items() if state == "loaded"}


def builtin_modules(text: str | None) -> frozenset[str]:
    """Names from modules.builtin, one module's path a line (kbuild writes it; kmod reads it to
    answer "builtin" where /proc/modules, which lists loadable modules only, has no line)."""
    return frozenset(module_name(line) for line in (text or "").splitlines() if line.strip())


def param_path(module: str, param: str) -> str:
    return f"{MODULE_DIR}/{canonical(module)}/parameters/{param}"


# Where modprobe (kmod) reads its configuration: *.conf of these directories, sorted by file
# name across them, a name in an earlier directory hiding the same name in a later one.
MODPROBE_DIRS = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/usr/lib/modprobe.d",
    "/lib/modprobe.d",
)
MODPROBE_GLOBS = tuple(f"{d}/*.conf" for d in MODPROBE_DIRS)

# One option of an `options` line: quotes keep spaces, as the kernel's parse_args reads them.
_OPTION = re.compile(r'(?:[^\s"]|"[^"]*")+')


def modprobe_order(paths: Iterable[str]) -> list[str]:
    """`paths` (modprobe.d files) in the order modprobe reads them."""
    return overlay_order(MODPROBE_DIRS, paths)


def module_options(text: str, module: str) -> list[tuple[str, str]]:
    """The `name=value` options a modprobe.d file gives `module`, in order (the module gets them
    all, the kernel keeps the last of a name); a value keeps its quotes."""
    found = []
    for line in text.replace("\\\n", " ").splitlines():
        words = line.split(None, 2)
        if len(words) < 3 or words[0] != "options" or canonical(words[1]) != canonical(module):
            continue
        for option in _OPTION.findall(words[2]):
            name, _, value = option.partition("=")
            found.append((name, value))
    return found
