"""The kernel command line: parsing it, the one the kernel runs with, and the one the boot
loader will pass next boot."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, replace

from ..hosts.files import Files, Request
from ..hosts.paths import path_matches
from .kernel import OSRELEASE
from .shell_values import Script, Unknown, Variables, evaluate

PROC_CMDLINE = "/proc/cmdline"
GRUB_DEFAULT = "/etc/default/grub"
GRUB_DROPINS = "/etc/default/grub.d/*.cfg"
KERNEL_CMDLINE = "/etc/kernel/cmdline"
PROXMOX_BOOT_UUIDS = "/etc/kernel/proxmox-boot-uuids"
# The boot was started by UEFI firmware when this directory exists.
EFI = "/sys/firmware/efi"
EFIVARS = "/sys/firmware/efi/efivars/*"
# systemd-boot sets LoaderInfo (its vendor GUID) on every boot it starts; GRUB sets nothing there.
LOADER_INFO = "/sys/firmware/efi/efivars/LoaderInfo-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
# The boot tools whose command line is GRUB's defaults, and what regenerates the menu.
GRUB_TOOLS = {"grub": ("update-grub",), "proxmox-boot-tool-grub": ("proxmox-boot-tool", "refresh")}
DROPIN = "/etc/default/grub.d/90-tune.cfg"
# tune's one-time GRUB entry (see reconciler.boot.tryonce): read so a leftover one is journaled.
TRY_SCRIPT = "/etc/grub.d/42_tune_try"
REDHAT_RELEASE = "/etc/redhat-release"
# GRUB's environment block: RHEL 8's BLS entries say `options $kernelopts $tuned_params`, and
# GRUB expands those from here when it boots.
GRUBENV = "/boot/grub2/grubenv"
GRUBENV_HEADER = "# GRUB Environment Block\n"
GRUBENV_SIZE = 1024
# What RHEL 8's grubby --update-kernel=ALL edits instead of an entry that uses it.
KERNELOPTS = "$kernelopts"
# tuned's bootloader plugin: what its /etc/grub.d/00_tuned sets $tuned_params from.
TUNED_BOOTCMDLINE = "/etc/tuned/bootcmdline"
LOADER_ENTRIES = "/boot/loader/entries/*.conf"
# Where systemd-boot's Type #1 entries live: the ESP mounted at /boot/efi or /efi, or /boot
# itself being the ESP (or the XBOOTLDR partition); `bootctl` looks in the same places.
LOADER_DIRS = ("/boot/efi/loader", "/efi/loader", "/boot/loader")
TRY_CONF = "tune-try.conf"
GRUB_VARS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
# Set by grub-mkconfig before it sources the defaults (util/grub-mkconfig.in); any other
# GRUB_ variable is unset until a file sets it, and other names come from its environment.
GRUB_PRESET = frozenset(
    {
        "GRUB_DEVICE",
        "GRUB_DEVICE_UUID",
        "GRUB_DEVICE_PARTUUID",
        "GRUB_DEVICE_BOOT",
        "GRUB_DEVICE_BOOT_UUID",
        "GRUB_FS",
        "GRUB_EARLY_INITRD_LINUX_STOCK",
    }
)


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
    """The command line the next boot will use, and where it came from; `unknown` says why
    the line cannot be known exactly (then `cmdline` is None and nothing may be written)."""

    # "grub", "proxmox-boot-tool" (systemd-boot), "proxmox-boot-tool-grub", "kernel-cmdline",
    # "grubby"
    tool: str
    cmdline: str | None
    sources: tuple[str, ...]
    unknown: Unknown | None = None

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
        GRUBENV,
        TUNED_BOOTCMDLINE,
        OSRELEASE,
        TRY_SCRIPT,
        *(f"{d}/entries/*.conf" for d in LOADER_DIRS),
        *(f"{d}/loader.conf" for d in LOADER_DIRS),
        nodes=(EFI, EFIVARS),
    )


def boot_config(files: Files) -> BootConfig | None:
    """Detect the boot tool the way the host itself decides, not by assumption."""
    if files.read(PROXMOX_BOOT_UUIDS) is not None:
        loader = proxmox_loader(files)
        if isinstance(loader, Unknown):
            return BootConfig("proxmox-boot-tool", None, (PROXMOX_BOOT_UUIDS,), loader)
        if loader == "grub":
            return replace(grub_config(files), tool="proxmox-boot-tool-grub")
        return BootConfig("proxmox-boot-tool", files.value(KERNEL_CMDLINE), (KERNEL_CMDLINE,))
    entries = files.glob(LOADER_ENTRIES)
    if files.read(REDHAT_RELEASE) is not None and entries:
        # RHEL-like hosts keep the command line in the BLS entries, and grubby edits them all.
        line = expand_entry(files, entry_options(files.text(entries[0]) or ""))
        if isinstance(line, Unknown):
            return BootConfig("grubby", None, entries, line)
        return BootConfig("grubby", line, entries)
    if files.read(GRUB_DEFAULT) is not None:
        return grub_config(files)
    if files.read(KERNEL_CMDLINE) is not None:
        return BootConfig("kernel-cmdline", files.value(KERNEL_CMDLINE), (KERNEL_CMDLINE,))
    return None


def proxmox_loader(files: Files) -> str | Unknown:
    """The loader proxmox-boot-tool keeps on its ESPs, decided as its zz-proxmox-boot hook
    does: GRUB after a legacy-BIOS boot, and after a UEFI boot where the ESP holds
    EFI/proxmox/grubx64.efi (`proxmox-boot-tool init DEV grub`, Secure Boot); systemd-boot
    otherwise. The ESPs are mounted only while the hook runs, so a UEFI host's is told by the
    loader that started this boot: systemd-boot leaves its LoaderInfo variable, GRUB none."""
    if not files.node_paths(EFI):
        return "grub"
    variables = files.node_paths(EFIVARS)
    if not variables:
        return Unknown(
            f"booted by UEFI, but {EFIVARS.rsplit('/', 1)[0]} lists no variable, so whether "
            "proxmox-boot-tool's ESPs hold GRUB or systemd-boot cannot be told",
            PROXMOX_BOOT_UUIDS,
            0,
        )
    return "systemd-boot" if LOADER_INFO in variables else "grub"


LOOKED_FOR = (PROXMOX_BOOT_UUIDS, REDHAT_RELEASE, GRUB_DEFAULT, KERNEL_CMDLINE)


def grub_sources(files: Files) -> tuple[str, ...]:
    """What grub-mkconfig sources, in its order: /etc/default/grub, then grub.d/*.cfg."""
    return (GRUB_DEFAULT, *files.glob(GRUB_DROPINS))


def grub_env(files: Files, before: str | None = None) -> Variables:
    """The variables GRUB's scripts see after sourcing the files (only those that sort before
    the drop-in `before`, when given), as /bin/sh computes them."""
    dropins = [p for p in files.glob(GRUB_DROPINS) if before is None or p < before]
    return evaluate(
        (Script(p, files.text(p) or "") for p in (GRUB_DEFAULT, *dropins)),
        unset_outside=lambda name: name.startswith("GRUB_") and name not in GRUB_PRESET,
    )


def grub_variables(files: Files) -> tuple[str, str] | Unknown:
    """GRUB_CMDLINE_LINUX and GRUB_CMDLINE_LINUX_DEFAULT (unset: empty) after the files."""
    env = grub_env(files)
    values: list[str] = []
    for name in GRUB_VARS:
        value = env.get(name)
        if isinstance(value, Unknown):
            return value
        if value is not None and "\n" in value:
            # 10_linux echoes the `linux` line into grub.cfg: what follows a line break
            # becomes a GRUB command of its own, not kernel parameters.
            return Unknown(
                f"{name} holds a line break, and update-grub would write what follows it as "
                "a separate line of grub.cfg",
                grub_sources(files)[-1],
                0,
            )
        values.append(value or "")
    return values[0], values[1]


def grub_line(files: Files) -> str | Unknown:
    """`$GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT`, what 10_linux gives the default entry,
    with the GRUB variables left in it as GRUB expands them."""
    found = grub_variables(files)
    if isinstance(found, Unknown):
        return found
    # GRUB expands what is left of `$...` when it runs the menu entry (tuned patches
    # /etc/default/grub with `\$tuned_params`).
    return expand_entry(files, " ".join(found))


def grub_config(files: Files) -> BootConfig:
    line = grub_line(files)
    if isinstance(line, Unknown):
        return BootConfig("grub", None, grub_sources(files), line)
    return BootConfig("grub", line, grub_sources(files))


def with_file(files: Files, path: str, data: bytes | None) -> Files:
    """`files` with one file written (or removed, for None), globs matched anew."""
    contents = dict(files.contents)
    if data is None:
        contents.pop(path, None)
    else:
        contents[path] = data
    matches = {
        pattern: tuple(sorted(p for p in contents if path_matches(pattern, p)))
        for pattern in files.matches
    }
    return Files(contents, matches, files.listings, files.errors, files.nodes)


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


def grubenv(text: str) -> dict[str, str]:
    """The variables of a GRUB environment block: `name=value` lines after the header, padded
    with `#` to 1024 bytes. grub-editenv puts a backslash before a backslash or a newline in a
    value (lib/envblk.c), and a line starting with `#` is padding."""
    found: dict[str, str] = {}
    body = text.removeprefix(GRUBENV_HEADER)
    i = 0
    while i < len(body):
        end = i
        while end < len(body) and body[end] != "\n":
            end += 2 if body[end] == "\\" else 1
        line = body[i:end]
        i = end + 1
        if line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        found[name] = re.sub(r"\\(.)", r"\1", value, flags=re.DOTALL)
    return found


def grubby_edit(texts: dict[str, str], sets: dict[str, str], removes: set[str]) -> dict[str, str]:
    """What `grubby --update-kernel=ALL --args/--remove-args` leaves of these files (BLS
    entries, and the GRUB environment block if given): each entry's `options` edited, except
    an entry whose options use $kernelopts; for those, RHEL 8's grubby edits kernelopts in the
    environment block instead, once."""
    out = dict(texts)
    via_env = False
    for path, text in texts.items():
        if path == GRUBENV:
            continue
        if KERNELOPTS in entry_options(text).split():
            via_env = True
        else:
            out[path] = edit_entry(text, sets, removes)
    if via_env and GRUBENV in texts:
        out[GRUBENV] = edit_grubenv(texts[GRUBENV], sets, removes)
    return out


_ESCAPED = re.compile(r"([\\\n])")


def edit_grubenv(text: str, sets: dict[str, str], removes: set[str]) -> str:
    """The block after `grubby --update-kernel=ALL` on RHEL 8: kernelopts edited as an entry's
    options are, written back by grub2-editenv (each variable in its place, escaped, padded
    with `#` to the block's size)."""
    env = grubenv(text)
    env["kernelopts"] = " ".join(edit_words(env.get("kernelopts", "").split(), sets, removes))
    body = GRUBENV_HEADER + "".join(
        name + "=" + _ESCAPED.sub(r"\\\1", value) + "\n" for name, value in env.items()
    )
    return body + "#" * max(0, GRUBENV_SIZE - len(body.encode()))


_GRUB_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand_entry(files: Files, options: str) -> str | Unknown:
    """A BLS entry's `options` with the GRUB variables in it expanded as GRUB does at boot:
    from the environment block, except $tuned_params, which grub.cfg sets after loading the
    block from /etc/tuned/bootcmdline (tuned's 00_tuned sources it with /bin/sh) where that
    file exists. An unset GRUB variable expands to nothing."""
    env: dict[str, str | Unknown] = dict(grubenv(files.text(GRUBENV) or ""))
    tuned = files.text(TUNED_BOOTCMDLINE)
    if tuned is not None:
        value = evaluate([Script(TUNED_BOOTCMDLINE, tuned)]).get("TUNED_BOOT_CMDLINE")
        env["tuned_params"] = value or ""
    if "kernelopts" not in env:
        # RHEL 8's grub.cfg then sets a kernelopts of its own (`if [ -z "${kernelopts}" ]`).
        env["kernelopts"] = Unknown(
            "$kernelopts is not in the GRUB environment block, so grub.cfg sets it", GRUBENV, 0
        )
    unknown: list[Unknown] = []

    def expanded(match: re.Match[str]) -> str:
        value = env.get(match.group(1) or match.group(2), "")
        if isinstance(value, Unknown):
            unknown.append(value)
            return ""
        return value

    line = _GRUB_VARIABLE.sub(expanded, options)
    return unknown[0] if unknown else " ".join(line.split())


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
