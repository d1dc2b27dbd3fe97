"""The kernel command line: parsing it, the one the kernel runs with, and the one the boot
loader will pass next boot."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from ..hosts.files import Files, Request
from .kernel import OSRELEASE

PROC_CMDLINE = "/proc/cmdline"
GRUB_DEFAULT = "/etc/default/grub"
GRUB_DROPINS = "/etc/default/grub.d/*.cfg"
KERNEL_CMDLINE = "/etc/kernel/cmdline"
PROXMOX_BOOT_UUIDS = "/etc/kernel/proxmox-boot-uuids"
DROPIN = "/etc/default/grub.d/90-tune.cfg"
# tune's one-time GRUB entry (see reconciler.boot.tryonce): read so a leftover one is journaled.
TRY_SCRIPT = "/etc/grub.d/42_tune_try"
REDHAT_RELEASE = "/etc/redhat-release"
LOADER_ENTRIES = "/boot/loader/entries/*.conf"
# Where systemd-boot's Type #1 entries live: the ESP mounted at /boot/efi or /efi, or /boot
# itself being the ESP (or the XBOOTLDR partition); `bootctl` looks in the same places.
LOADER_DIRS = ("/boot/efi/loader", "/efi/loader", "/boot/loader")
TRY_CONF = "tune-try.conf"
GRUB_VARS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")


def canonical(name: str) -> str:
    """The kernel treats `-` and `_` in parameter names alike (`parameq`)."""
    return name.replace("-", "_")


def split(text: str) -> list[str]:
    """Words as the kernel's `next_arg` sees them: spaces separate, double quotes group, and the
    quotes themselves are dropped. `--` ends the kernel's part (the rest is for init)."""
    words: list[str] = []
    word: list[str] = []
    quoted = False
    for char in text.strip():
        if char == '"':
            quoted = not quoted
        elif char.isspace() and not quoted:
            if word:
                words.append("".join(word))
                word = []
        else:
            word.append(char)
    if word:
        words.append("".join(word))
    return words[: words.index("--")] if "--" in words else words


def parameters(text: str | None) -> dict[str, str] | None:
    """Canonical name -> value; the last one wins. A bare flag such as `quiet` is present with
    the empty value: None is kept for a parameter that is not there at all."""
    if text is None:
        return None
    params: dict[str, str] = {}
    for word in split(text):
        name, _, value = word.partition("=")
        params[canonical(name)] = value
    return params


@dataclass(frozen=True)
class BootConfig:
    """The command line the next boot will use, and where it came from."""

    tool: str  # "grub", "proxmox-boot-tool", "kernel-cmdline"
    cmdline: str | None
    sources: tuple[str, ...]

    @property
    def parameters(self) -> dict[str, str]:
        """The parameters the next boot will pass; none when the configuration is unreadable."""
        return parameters(self.cmdline) or {}


def running(files: Files) -> dict[str, str]:
    """The running kernel's parameters; none when /proc/cmdline was not read."""
    return parameters(files.value(PROC_CMDLINE)) or {}


def request() -> Request:
    return Request.of(
        PROC_CMDLINE,
        GRUB_DEFAULT,
        GRUB_DROPINS,
        KERNEL_CMDLINE,
        PROXMOX_BOOT_UUIDS,
        REDHAT_RELEASE,
        LOADER_ENTRIES,
        OSRELEASE,
        TRY_SCRIPT,
        *(f"{d}/entries/*.conf" for d in LOADER_DIRS),
        *(f"{d}/loader.conf" for d in LOADER_DIRS),
    )


def boot_config(files: Files) -> BootConfig | None:
    """Detect the boot tool the way the host itself decides, not by assumption."""
    if files.read(PROXMOX_BOOT_UUIDS) is not None:
        return BootConfig("proxmox-boot-tool", files.value(KERNEL_CMDLINE), (KERNEL_CMDLINE,))
    entries = files.glob(LOADER_ENTRIES)
    if files.read(REDHAT_RELEASE) is not None and entries:
        # RHEL-like hosts keep the command line in the BLS entries, and grubby edits them all.
        return BootConfig("grubby", entry_options(files.text(entries[0]) or ""), entries)
    if files.read(GRUB_DEFAULT) is not None:
        sources = (GRUB_DEFAULT, *files.glob(GRUB_DROPINS))
        env = grub_env(files)
        line = " ".join(env.get(v, "") for v in GRUB_VARS)
        return BootConfig("grub", " ".join(line.split()), sources)
    if files.read(KERNEL_CMDLINE) is not None:
        return BootConfig("kernel-cmdline", files.value(KERNEL_CMDLINE), (KERNEL_CMDLINE,))
    return None


LOOKED_FOR = (PROXMOX_BOOT_UUIDS, REDHAT_RELEASE, GRUB_DEFAULT, KERNEL_CMDLINE)


def grub_env(files: Files, without: str | None = None) -> dict[str, str]:
    """The variables GRUB's scripts see: /etc/default/grub, then the drop-ins in order."""
    env: dict[str, str] = {}
    for path in (GRUB_DEFAULT, *files.glob(GRUB_DROPINS)):
        if path != without:
            assign(files.text(path) or "", env)
    return env


def word(name: str, value: str) -> str:
    return name if value == "" else f"{name}={value}"


def edit_words(words: list[str], sets: dict[str, str], removes: set[str]) -> list[str]:
    """`words` without the parameters named in `removes`, each of `sets` replacing its
    namesake in place (the first one; later duplicates go) or appended, as grubby does."""
    gone = {canonical(n) for n in removes}
    wanted = {canonical(n): (n, v) for n, v in sets.items()}
    out: list[str] = []
    placed: set[str] = set()
    for item in words:
        key = canonical(item.partition("=")[0])
        if key in gone:
            continue
        if key in wanted:
            if key not in placed:
                out.append(word(*wanted[key]))
                placed.add(key)
            continue
        out.append(item)
    out += [word(n, v) for key, (n, v) in wanted.items() if key not in placed]
    return out


@dataclass(frozen=True)
class Loader:
    """systemd-boot's entries on this host, and the entry it boots by default."""

    directory: str  # `.../loader`
    default: str  # the default entry's path

    @property
    def try_entry(self) -> str:
        return f"{self.directory}/entries/{TRY_CONF}"


def loader(files: Files) -> Loader | None:
    """The first loader directory with entries, and its default entry: the one loader.conf's
    `default` names (an id or a glob, as systemd-boot matches it), else the first entry, in
    name order, whose `linux` is the running kernel; None when neither finds one."""
    release = files.value(OSRELEASE)
    for directory in LOADER_DIRS:
        entries = [
            p for p in files.glob(f"{directory}/entries/*.conf") if not p.endswith("/" + TRY_CONF)
        ]
        if not entries:
            continue
        named = _key(files.text(f"{directory}/loader.conf") or "", "default")
        if named and not named.startswith("@"):
            for path in entries:
                ident = path.rsplit("/", 1)[1]
                if fnmatch.fnmatchcase(ident, named) or fnmatch.fnmatchcase(ident, named + ".conf"):
                    return Loader(directory, path)
        for path in entries:
            linux = _key(files.text(path) or "", "linux")
            if release and linux and (release in linux.split("/") or linux.endswith("-" + release)):
                return Loader(directory, path)
        return None
    return None


def _key(text: str, key: str) -> str | None:
    """The value of a `key value` line (loader.conf, an entry), None when absent."""
    for line in text.splitlines():
        name, _, rest = line.strip().partition(" ")
        if name == key:
            return rest.strip()
    return None


def try_entry(text: str, line: str) -> str:
    """A copy of a Type #1 entry that boots `line`: its own title and one `options` line."""
    out: list[str] = ["title tune: try once\n"]
    for item in text.splitlines(keepends=True):
        key = item.strip().partition(" ")[0]
        if key == "options":
            continue
        if key != "title":
            out.append(item if item.endswith("\n") else item + "\n")
    return "".join(out) + f"options {line}\n"


def entry_options(text: str) -> str:
    """The `options` line of a Boot Loader Specification entry."""
    for line in text.splitlines():
        key, _, rest = line.strip().partition(" ")
        if key == "options":
            return rest.strip()
    return ""


def edit_entry(text: str, sets: dict[str, str], removes: set[str]) -> str:
    """A BLS entry with its `options` line edited; every other byte kept."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        key, _, rest = line.strip().partition(" ")
        if key == "options":
            end = "\n" if line.endswith("\n") else ""
            words = edit_words(rest.split(), sets, removes)
            lines[index] = "options " + " ".join(words) + end
            return "".join(lines)
    return text


_ASSIGN = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Unsupported(ValueError):
    """Shell the mini-evaluator does not run (command substitution, arithmetic)."""


def assign(text: str, env: dict[str, str]) -> None:
    """Apply the plain `NAME=value` lines of a file that GRUB sources, expanding `$VAR` as sh
    would. Other lines (conditionals, commands) are skipped; an assignment using command
    substitution leaves its variable as it was."""
    for line in text.splitlines():
        match = _ASSIGN.match(line)
        if not match:
            continue
        try:
            env[match.group(1)] = _word(line[match.end() :], env)
        except Unsupported:
            continue


def _variable(rest: str, i: int, env: dict[str, str]) -> tuple[int, str]:
    """Expand the `$NAME` or `${NAME}` at rest[i] (a `$`); a lone `$` stays literal."""
    for pattern in (_NAME, _BRACED):
        match = pattern.match(rest, i + 1)
        if match:
            return match.end(), env.get(match.group(match.lastindex or 0), "")
    # Command substitution, ${VAR:-x} and the like, and special parameters ($1, $@, $$): sh
    # expands these to something this evaluator cannot know.
    if rest.startswith(("$(", "${"), i) or (
        i + 1 < len(rest) and rest[i + 1] in "0123456789@*#?$!-"
    ):
        raise Unsupported(rest)
    return i + 1, "$"


def _word(rest: str, env: dict[str, str]) -> str:
    """One shell word: unquoted, 'single' and "double" quoted parts, up to an unquoted blank."""
    out: list[str] = []
    i = 0
    quoted = False
    while i < len(rest):
        char = rest[i]
        if quoted:
            if char == '"':
                quoted = False
                i += 1
            elif char == "\\" and i + 1 < len(rest) and rest[i + 1] in '$`"\\':
                out.append(rest[i + 1])
                i += 2
            elif char == "$":
                i, value = _variable(rest, i, env)
                out.append(value)
            elif char == "`":
                raise Unsupported(rest)
            else:
                out.append(char)
                i += 1
            continue
        if char in " \t;&|":
            break
        if char == "'":
            end = rest.find("'", i + 1)
            if end < 0:
                raise Unsupported(rest)
            out.append(rest[i + 1 : end])
            i = end + 1
        elif char == '"':
            quoted = True
            i += 1
        elif char == "\\" and i + 1 < len(rest):
            out.append(rest[i + 1])
            i += 2
        elif char == "$":
            i, value = _variable(rest, i, env)
            out.append(value)
        elif char in "`()<>":
            raise Unsupported(rest)
        else:
            out.append(char)
            i += 1
    if quoted:
        raise Unsupported(rest)
    return "".join(out)
