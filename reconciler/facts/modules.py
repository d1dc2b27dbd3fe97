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

# What strtok_r splits a modprobe.d line's words at (kmod_config_parse), and the kernel's
# isspace (lib/ctype.c) for parse_args.
_KMOD_BLANKS = " \t"
_KERNEL_SPACE = " \t\n\v\f\r"
# A backslash and the character after it (none at the end of the file).
_ESCAPED = re.compile(r"\\(.?)", re.DOTALL)


def modprobe_order(paths: Iterable[str]) -> list[str]:
    """`paths` (modprobe.d files) in the order modprobe reads them."""
    return overlay_order(MODPROBE_DIRS, paths)


def module_options(text: str, module: str) -> list[tuple[str, str]]:
    """The `name=value` options one modprobe.d file gives `module`, in order
    (`next_load_options` of that file alone)."""
    return next_load_options([text], module)


def config_lines(text: str) -> list[str]:
    """The logical lines of a modprobe.d file, as kmod's `freadline_wrapped` (shared/util.c)
    reads them: a backslash before a newline joins the two lines (nothing in between), before
    any other character it is dropped and that character kept (`\\\\` is one backslash); a
    newline ends a line; a last line without one still counts."""
    joined = _ESCAPED.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)
    lines = joined.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts none
    return lines


def _word(text: str) -> tuple[str | None, str]:
    """strtok_r(text, " \\t"): the next word, and what follows the one blank after it."""
    start = len(text) - len(text.lstrip(_KMOD_BLANKS))
    if start == len(text):
        return None, ""
    end = start
    while end < len(text) and text[end] not in _KMOD_BLANKS:
        end += 1
    return text[start:end], text[end + 1 :]


def options_lines(text: str) -> list[tuple[str, str]]:
    """(module, options) for each `options` line of a modprobe.d file, as kmod_config_parse
    keeps it and `modprobe -c` prints it: a line beginning with `#` is a comment, the module's
    `-` read as `_`, the options the rest of the line after the one blank that ends the module's
    name, tabs made spaces. A line with no options is kmod's syntax error: ignored."""
    found = []
    for line in config_lines(text):
        if not line or line.startswith("#"):
            continue
        command, rest = _word(line)
        if command != "options":
            continue
        module, options = _word(rest)
        if module is None or not options:
            continue
        found.append((canonical(module), options.replace("\t", " ")))
    return found


def kernel_args(args: str) -> list[tuple[str, str | None]]:
    """`args` split as the kernel's parse_args does (lib/cmdline.c `next_arg`): at blanks
    outside double quotes; a quote opening the word makes the whole `NAME=VALUE` one word and
    goes, as does the one closing it; a value that opens with a quote loses it and the one that
    ends the word; other quotes stay. None for a name given without `=`."""
    found: list[tuple[str, str | None]] = []
    at = 0
    while True:
        while at < len(args) and args[at] in _KERNEL_SPACE:
            at += 1  # skip_spaces
        if at >= len(args):
            return found
        quoted = args[at] == '"'
        start = at + 1 if quoted else at
        in_quote = quoted
        equals = 0
        end = start
        while end < len(args):
            char = args[end]
            if char in _KERNEL_SPACE and not in_quote:
                break
            if equals == 0 and char == "=":
                equals = end - start
            if char == '"':
                in_quote = not in_quote
            end += 1
        word, at = args[start:end], end + 1
        # `args[i-1] = '\0'` cuts the word's last character, a quote, from whichever of name
        # and value ends there.
        closes = quoted and end > start and word.endswith('"')
        if not equals:
            found.append((word[:-1] if closes else word, None))
            continue
        name, value = word[:equals], word[equals + 1 :]
        if value.startswith('"'):
            value = value[1:]
            if word.endswith('"'):
                value = value[:-1]
        elif closes:
            value = value[:-1]
        found.append((name, value))


def next_load_options(texts: Iterable[str], module: str) -> list[tuple[str, str]]:
    """The `name=value` options the next load of `module` is given by the modprobe.d files
    `texts` (in `modprobe_order`), in order: kmod joins every `options` line of the module
    with a blank (kmod_module_get_options), and the kernel reads the whole as parse_args does;
    the last of a name wins. A value is as the module receives it, its quotes gone."""
    name = canonical(module)
    joined = " ".join(o for text in texts for m, o in options_lines(text) if m == name)
    return [(key, "" if value is None else value) for key, value in kernel_args(joined)]
