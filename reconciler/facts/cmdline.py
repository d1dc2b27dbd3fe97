"""The kernel command line: parsing it, the one the kernel runs with, and the one the boot
loader will pass next boot."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

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


class Repeats(StrEnum):
    """What a parameter given more than once means. The kernel's `parse_args`
    (kernel/params.c) calls a parameter's handler once per occurrence, as `do_early_param`
    (init/main.c) does for early ones; whether a repeat replaces or adds is the handler's."""

    LAST = "last"  # one value, each occurrence overwriting the one before (module_param, most)
    FIRST = "first"  # one value: a later occurrence that differs is ignored
    EVERY = "every"  # each occurrence adds to what the ones before set up


# Parameters whose every occurrence counts, and the code that makes it so (paths in the kernel
# tree unless named otherwise). Dotted names are init's: the kernel does not pass them on, and
# systemd, dracut and kmod read every occurrence from /proc/cmdline themselves.
EVERY_OCCURRENCE: dict[str, str] = {
    "console": "kernel/printk/printk.c console_setup adds a console each time; the last one "
    "is /dev/console (Documentation/admin-guide/serial-console.rst)",
    "pci": "drivers/pci/pci.c pci_setup, an early_param, applies each occurrence's options",
    "acpi_osi": "drivers/acpi/osi.c osi_setup adds (or with `!` removes) one _OSI string each",
    "memmap": "arch/x86/kernel/e820.c parse_memmap_opt, an early_param, adds a region each",
    "hugepagesz": "mm/hugetlb.c hugepagesz_setup adds a huge page size each",
    "hugepages": "mm/hugetlb.c hugepages_setup sets the count of the hugepagesz= before it",
    "video": "drivers/video/cmdline.c video_setup keeps one per connector (video=DP-1:...)",
    "iommu": "arch/x86/kernel/pci-dma.c iommu_setup, an early_param, applies each one's options",
    "intel_iommu": "drivers/iommu/intel/iommu.c intel_iommu_setup applies each one's options",
    "amd_iommu": "drivers/iommu/amd/init.c parse_amd_iommu_options applies each one's options",
    "efi": "drivers/firmware/efi/efi.c parse_efi_cmdline, an early_param, applies each one's",
    "initcall_blacklist": "init/main.c initcall_blacklist adds each one's functions",
    "modprobe.blacklist": "kmod (libkmod-config.c) adds each one's modules",
    "rd.driver.blacklist": "dracut.cmdline(7): may be given more than once",
    "rd.driver.pre": "dracut.cmdline(7): may be given more than once",
    "rd.driver.post": "dracut.cmdline(7): may be given more than once",
    "rd.luks.uuid": "dracut.cmdline(7), systemd-cryptsetup-generator(8): one per volume",
    "rd.luks.name": "dracut.cmdline(7), systemd-cryptsetup-generator(8): one per volume",
    "rd.lvm.lv": "dracut.cmdline(7): one per logical volume",
    "rd.lvm.vg": "dracut.cmdline(7): one per volume group",
    "rd.md.uuid": "dracut.cmdline(7): one per array",
    "ip": "dracut.cmdline(7): one per interface (the kernel's own net/ipv4/ipconfig.c keeps "
    "the last)",
    "systemd.mask": "kernel-command-line(7): may be given more than once",
    "systemd.wants": "kernel-command-line(7): may be given more than once",
    "systemd.setenv": "kernel-command-line(7): may be given more than once",
}
FIRST_OCCURRENCE: dict[str, str] = {
    "isolcpus": "kernel/sched/isolation.c housekeeping_setup ignores a later isolcpus= or "
    "nohz_full= whose CPU list differs from the first",
    "nohz_full": "kernel/sched/isolation.c housekeeping_setup, as for isolcpus",
}


def repeats(name: str) -> Repeats:
    key = canonical(name)
    if key in EVERY_OCCURRENCE:
        return Repeats.EVERY
    return Repeats.FIRST if key in FIRST_OCCURRENCE else Repeats.LAST


def split(text: str) -> list[str]:
    """Words as the kernel's `next_arg` delimits them: spaces separate, double quotes group.
    Each word is kept as written, quotes and all, and so is everything after `--` (init's)."""
    words: list[str] = []
    word: list[str] = []
    quoted = False
    for char in text:
        if char.isspace() and not quoted:
            if word:
                words.append("".join(word))
                word = []
            continue
        if char == '"':
            quoted = not quoted
        word.append(char)
    if word:
        words.append("".join(word))
    return words


def name_value(word: str) -> tuple[str, str | None]:
    """A word's parameter name and value (None without `=`) with the quotes `next_arg` drops:
    one opening the word, one opening the value and the one closing either."""
    quoted = word.startswith('"')
    text = word[1:] if quoted else word
    name, equals, value = text.partition("=")
    if not equals:
        return (name[:-1] if quoted and name.endswith('"') else name), None
    if value.startswith('"'):
        value = value[1:]
        value = value[:-1] if value.endswith('"') else value
    elif quoted and value.endswith('"'):
        value = value[:-1]
    return name, value


def _canonical_name(word: str) -> str:
    return canonical(name_value(word)[0])


def _kernel_part(words: list[str]) -> int:
    """Where init's part begins: at `--`, or the end."""
    return next((i for i, w in enumerate(words) if name_value(w) == ("--", None)), len(words))


@dataclass(frozen=True)
class Parameters:
    """A command line's parameters: each canonical name with the value of every occurrence, in
    order. A bare flag such as `quiet` occurs with the empty value."""

    occurrences: Mapping[str, tuple[str, ...]]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and canonical(name) in self.occurrences

    def every(self, name: str) -> tuple[str, ...]:
        """Every occurrence's value; what a parameter that repeats (`repeats`) is made of."""
        return self.occurrences.get(canonical(name), ())

    def get(self, name: str) -> str | None:
        """The one value the kernel keeps for a parameter that takes one (the last, or the first
        for `Repeats.FIRST`); None when absent. Of a parameter whose every occurrence counts,
        the last (for console=, the one /dev/console is): read `every` for the others."""
        found = self.every(name)
        if not found:
            return None
        return found[0] if repeats(name) is Repeats.FIRST else found[-1]

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value


def parameters(text: str | None) -> Parameters | None:
    """The parameters of a command line; None for a line that was not read."""
    if text is None:
        return None
    found: dict[str, list[str]] = {}
    words = split(text)
    for item in words[: _kernel_part(words)]:
        name, value = name_value(item)
        found.setdefault(canonical(name), []).append(value or "")
    return Parameters({name: tuple(values) for name, values in found.items()})


NONE = Parameters({})


class Mode(StrEnum):
    """What a profile entry asks of a parameter's occurrences."""

    VALUE = "value"  # the one value the kernel keeps is this
    CONTAINS = "contains"  # this is one of the occurrences
    EXACTLY = "exactly"  # the occurrences are these, in order (none: the parameter is removed)


@dataclass(frozen=True)
class Edit:
    """One parameter as the profile wants it; `name` as the profile spells it."""

    name: str
    mode: Mode
    values: tuple[str, ...] = ()

    def satisfied(self, params: Parameters) -> bool:
        found = params.every(self.name)
        if self.mode is Mode.CONTAINS:
            return self.values[0] in found
        if self.mode is Mode.EXACTLY:
            return found == self.values
        return params.get(self.name) == self.values[0]

    @property
    def words(self) -> list[str]:
        return [word(self.name, v) for v in self.values]


def remove(name: str) -> Edit:
    return Edit(name, Mode.EXACTLY)


def edit(words: list[str], edits: Sequence[Edit]) -> list[str]:
    """`words` with each edit made where it belongs: an added occurrence (`contains`, or a
    parameter not there yet) goes last before `--`; a value or `exactly` takes the place of the
    parameter's first occurrence and its others go. A satisfied edit changes nothing, and no
    word of a parameter an edit does not name moves or goes."""
    for change in edits:
        end = _kernel_part(words)
        head, tail = words[:end], words[end:]
        if change.satisfied(parameters(" ".join(head)) or NONE):
            continue
        key = canonical(change.name)
        mine = [i for i, w in enumerate(head) if _canonical_name(w) == key]
        if change.mode is Mode.CONTAINS or not mine:
            words = head + change.words + tail
            continue
        kept = [w for i, w in enumerate(head) if i not in mine]
        at = mine[0]
        words = kept[:at] + change.words + kept[at:] + tail
    return words


def appended(words: list[str], edits: Sequence[Edit]) -> list[str] | None:
    """The words that, put after `words`, make every edit as the kernel reads the line; None
    when one cannot be made so (an occurrence must change or go, or init's part would get
    them). A parameter whose last occurrence wins takes a new value this way."""
    extra: list[str] = []
    for change in edits:
        params = parameters(" ".join(words + extra)) or NONE
        if change.satisfied(params):
            continue
        adds = change.mode is Mode.CONTAINS or (
            change.mode is Mode.VALUE and repeats(change.name) is Repeats.LAST
        )
        if not (adds or change.name not in params) or _kernel_part(words) < len(words):
            return None
        extra += change.words
    return extra


@dataclass(frozen=True)
class BootConfig:
    """The command line the next boot will use, and where it came from."""

    tool: str  # "grub", "proxmox-boot-tool", "kernel-cmdline"
    cmdline: str | None
    sources: tuple[str, ...]

    @property
    def parameters(self) -> Parameters:
        """The parameters the next boot will pass; none when the configuration is unreadable."""
        return parameters(self.cmdline) or NONE


def running(files: Files) -> Parameters:
    """The running kernel's parameters; none when /proc/cmdline was not read."""
    return parameters(files.value(PROC_CMDLINE)) or NONE


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
    """A parameter as a command line writes it; a value with blanks quoted, as `next_arg`
    reads it back."""
    if value == "":
        return name
    return f'{name}="{value}"' if any(c.isspace() for c in value) else f"{name}={value}"


def edit_words(words: list[str], sets: dict[str, str], removes: set[str]) -> list[str]:
    """`words` without the parameters named in `removes`, each of `sets` taking the place of
    its namesake's first occurrence (the others go) or appended, as grubby does."""
    edits = [Edit(n, Mode.EXACTLY, (v,)) for n, v in sets.items()]
    return edit(words, edits + [remove(n) for n in sorted(removes)])


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
