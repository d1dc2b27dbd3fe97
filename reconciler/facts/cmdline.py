"""The kernel command line: parsing it, the one the kernel runs with, and the one the boot
loader will pass next boot."""

from __future__ import annotations

import fnmatch
import itertools
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from ..core.files import Files, Request
from ..core.paths import path_matches
from . import grubby
from .grubby import grubenv
from .kernel import OSRELEASE
from .shell_values import Script, Unknown, Variables, evaluate

PROC_CMDLINE = "/proc/cmdline"
GRUB_DEFAULT = "/etc/default/grub"
GRUB_DROPIN_DIR = "/etc/default/grub.d"
GRUB_DROPINS = f"{GRUB_DROPIN_DIR}/*.cfg"
KERNEL_CMDLINE = "/etc/kernel/cmdline"
# kernel-install's fallback where /etc/kernel/cmdline is missing (90-loaderentry.install).
USR_KERNEL_CMDLINE = "/usr/lib/kernel/cmdline"
PROXMOX_BOOT_UUIDS = "/etc/kernel/proxmox-boot-uuids"
# The boot was started by UEFI firmware when this directory exists.
EFI = "/sys/firmware/efi"
EFIVARS = "/sys/firmware/efi/efivars/*"
# systemd-boot sets LoaderInfo (its vendor GUID) on every boot it starts; GRUB sets nothing there.
LOADER_INFO = "/sys/firmware/efi/efivars/LoaderInfo-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
# The boot tools whose command line is GRUB's defaults, and what regenerates the menu.
GRUB_TOOLS = {"grub": ("update-grub",), "proxmox-boot-tool-grub": ("proxmox-boot-tool", "refresh")}
DROPIN = "/etc/default/grub.d/90-tune.cfg"
# tune's drop-in under any of the names `tune_dropin` gives it.
OWN_DROPIN = re.compile(r"/etc/default/grub\.d/(90|z{2,})-tune\.cfg")
# tune's one-time GRUB entry (see reconciler.apply.tryonce): read so a leftover one is journaled.
TRY_SCRIPT = "/etc/grub.d/42_tune_try"
# The line in the try script that names the command line it boots (`apply.tryonce`).
TRY_MARKER = "# tune-cmdline: "
REDHAT_RELEASE = "/etc/redhat-release"
# GRUB's environment block: RHEL 8's BLS entries say `options $kernelopts $tuned_params`, and
# GRUB expands those from here when it boots; grubby (`facts.grubby`) edits kernelopts there.
GRUBENV = grubby.GRUBENV
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

    def kept(self) -> dict[str, tuple[str, ...]]:
        """What the kernel (or init) is left with: each parameter's every occurrence where
        each counts (`Repeats.EVERY`), else the one value it keeps. Two lines that differ
        only in an overridden occurrence (`a=1 a=2` and `a=2`) keep the same."""
        return {
            name: values if repeats(name) is Repeats.EVERY else (self[name],)
            for name, values in self.occurrences.items()
        }


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
    # One option (`key=value`) of a parameter whose occurrences are comma-separated options
    # (`pci=`): its handler applies every occurrence's options in order, so the last one that
    # names the key is the one kept.
    OPTION = "option"


@dataclass(frozen=True)
class Edit:
    """One parameter as the profile wants it; `name` as the profile spells it."""

    name: str
    mode: Mode
    values: tuple[str, ...] = ()

    def satisfied(self, params: Parameters) -> bool:
        found = params.every(self.name)
        if self.mode is Mode.OPTION:
            return option(found, option_key(self.values[0])) == self.values[0]
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


def option_key(text: str) -> str:
    return text.partition("=")[0]


def option(occurrences: Sequence[str], key: str) -> str | None:
    """The option `key` (`key=value`) as the kernel keeps it from a parameter's comma-separated
    occurrences: the last that names it."""
    named = [o for value in occurrences for o in value.split(",") if option_key(o) == key]
    return named[-1] if named else None


def _with_option(value: str, wanted: str) -> str:
    """`value`'s options with `wanted` in place of the one of its key, or added last."""
    options = [o for o in value.split(",") if o] if value else []
    key = option_key(wanted)
    at = next((i for i, o in enumerate(options) if option_key(o) == key), None)
    if at is None:
        return ",".join([*options, wanted])
    return ",".join([*options[:at], wanted, *options[at + 1 :]])


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
        if change.mode is Mode.OPTION and mine:
            # Merged into the occurrence the kernel takes the option from (the last naming
            # it, else the last one): no second word to contradict the first.
            wanted = option_key(change.values[0])
            naming = [i for i in mine if option([name_value(head[i])[1] or ""], wanted) is not None]
            at = (naming or mine)[-1]
            value = _with_option(name_value(head[at])[1] or "", change.values[0])
            words = [*head[:at], word(change.name, value), *head[at + 1 :], *tail]
            continue
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
        # An option joins an occurrence already there (`edit`), never a second word.
        adds = adds and not (change.mode is Mode.OPTION and change.name in params)
        if not (adds or change.name not in params) or _kernel_part(words) < len(words):
            return None
        extra += change.words
    return extra


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
    def parameters(self) -> Parameters:
        """The parameters the next boot will pass; none when the configuration is unreadable."""
        return parameters(self.cmdline) or NONE


def running(files: Files) -> Parameters:
    """The running kernel's parameters; none when /proc/cmdline was not read."""
    return parameters(files.value(PROC_CMDLINE)) or NONE


def request() -> Request:
    """The boot configuration is read whole (`edited`): tune rewrites some of it, and a
    setting past the usual cap decides what the next boot passes as much as one before it."""
    return Request.of(PROC_CMDLINE, OSRELEASE, nodes=(EFI, EFIVARS)) | Request.of(
        edited=(
            GRUB_DEFAULT,
            GRUB_DROPINS,
            KERNEL_CMDLINE,
            USR_KERNEL_CMDLINE,
            PROXMOX_BOOT_UUIDS,
            REDHAT_RELEASE,
            LOADER_ENTRIES,
            GRUBENV,
            TUNED_BOOTCMDLINE,
            TRY_SCRIPT,
            *(f"{d}/entries/*.conf" for d in LOADER_DIRS),
            *(f"{d}/loader.conf" for d in LOADER_DIRS),
        )
    )


def boot_config(files: Files) -> BootConfig | None:
    """Detect the boot tool the way the host itself decides, not by assumption."""
    if files.read(PROXMOX_BOOT_UUIDS) is not None:
        loader = proxmox_loader(files)
        if isinstance(loader, Unknown):
            return BootConfig("proxmox-boot-tool", None, (PROXMOX_BOOT_UUIDS,), loader)
        if loader == "grub":
            return replace(grub_config(files), tool="proxmox-boot-tool-grub")
        line = proxmox_line(files)
        if isinstance(line, Unknown):
            return BootConfig("proxmox-boot-tool", None, (KERNEL_CMDLINE,), line)
        return BootConfig("proxmox-boot-tool", line, (KERNEL_CMDLINE,))
    entries = files.glob(LOADER_ENTRIES)
    if files.read(REDHAT_RELEASE) is not None and entries:
        # RHEL-like hosts keep the command line in the BLS entries, and grubby edits them all;
        # GRUB boots the default entry, the one grubby takes for it.
        default = grubby_boot(files).default()
        line = expand_entry(files, default.options if default else "")
        if isinstance(line, Unknown):
            return BootConfig("grubby", None, entries, line)
        return BootConfig("grubby", line, entries)
    if files.read(GRUB_DEFAULT) is not None:
        return grub_config(files)
    if any(files.read(p) is not None for p in (KERNEL_CMDLINE, USR_KERNEL_CMDLINE)) or any(
        not p.endswith("/" + TRY_CONF)
        for d in LOADER_DIRS
        for p in files.glob(f"{d}/entries/*.conf")
    ):
        # kernel-install (systemd-boot's entries, or a file only it reads).
        line = kernel_install_line(files)
        if isinstance(line, Unknown):
            return BootConfig("kernel-cmdline", None, (KERNEL_CMDLINE,), line)
        return BootConfig("kernel-cmdline", line, (KERNEL_CMDLINE,))
    return None


# What zz-proxmox-boot removes from the running line when it falls back to it (its perl
# `s/\binitrd=([0-9a-zA-Z\\\/.-])*\s*//g`): the initrd= systemd-boot passes.
_PROXMOX_INITRD = re.compile(r"\binitrd=[0-9a-zA-Z\\/.-]*\s*")


def proxmox_line(files: Files) -> str | Unknown:
    """The line proxmox-boot-tool writes into its systemd-boot entries, as its zz-proxmox-boot
    hook takes it: the first line of /etc/kernel/cmdline (`get_first_line`; the others are not
    read), which must hold `root=` or the hook stops; without the file, the running line less
    its initrd= words."""
    text = files.text(KERNEL_CMDLINE)
    if text is None:
        running = files.text(PROC_CMDLINE)
        if running is None:
            return Unknown(
                "missing, and proxmox-boot-tool then takes /proc/cmdline, which was not read",
                KERNEL_CMDLINE,
                0,
            )
        return _PROXMOX_INITRD.sub("", running).rstrip("\n")
    first = text.partition("\n")[0]
    if "root=" not in first:
        return Unknown(
            'the first line has no root=, so `proxmox-boot-tool refresh` stops ("No root= '
            'parameter in /etc/kernel/cmdline found!") and writes no entry: put the whole '
            "line, root= included, on the first line",
            KERNEL_CMDLINE,
            1,
        )
    return first


def kernel_install_line(files: Files) -> str | Unknown:
    """The line kernel-install gives a new entry, as its 90-loaderentry.install takes it:
    /etc/kernel/cmdline, else /usr/lib/kernel/cmdline, every line of it, blanks squeezed to
    one space (`tr -s "$IFS" ' '`); else the running line less BOOT_IMAGE= and initrd=."""
    for path in (KERNEL_CMDLINE, USR_KERNEL_CMDLINE):
        text = files.text(path)
        if text is not None:
            return " ".join(text.split())
    running = files.text(PROC_CMDLINE)
    if running is None:
        return Unknown(
            f"missing, as is {USR_KERNEL_CMDLINE}, and kernel-install then takes /proc/cmdline, "
            "which was not read",
            KERNEL_CMDLINE,
            0,
        )
    return " ".join(w for w in running.split() if not w.startswith(("BOOT_IMAGE=", "initrd=")))


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


def own_dropins(files: Files) -> tuple[str, ...]:
    """tune's drop-ins on the host: one, unless an older tune left it under another name."""
    return tuple(p for p in files.glob(GRUB_DROPINS) if OWN_DROPIN.fullmatch(p))


def _collation_keys(path: str) -> tuple[bytes, str]:
    """How a shell may order a glob's names: dash by bytes (strcmp), bash, which is /bin/sh on
    RHEL, by the locale (strcoll), whose first level ignores case and punctuation."""
    name = posixpath.basename(path)
    return name.encode(), "".join(c for c in name.lower() if c.isalnum())


def tune_dropin(files: Files) -> str:
    """Where tune's drop-in goes: `90-tune.cfg` (where tune always wrote it) unless a drop-in
    GRUB reads after it may set or edit the command line; then a name that sorts after every
    other drop-in, in byte order and in a locale's order, so none can override what it sets:
    `zz-tune.cfg`, with one more `z` until it does. Chosen anew from what is there at each
    plan."""
    dropins = [p for p in files.glob(GRUB_DROPINS) if not OWN_DROPIN.fullmatch(p)]
    first = _collation_keys(DROPIN)
    later = [p for p in dropins if _after(_collation_keys(p), first)]
    if not later or _leave_the_line(files, later):
        return DROPIN
    others = [_collation_keys(p) for p in dropins]
    for n in itertools.count(2):
        name = f"{GRUB_DROPIN_DIR}/{'z' * n}-tune.cfg"
        keys = _collation_keys(name)
        if all(keys[0] > other[0] and keys[1] > other[1] for other in others):
            return name
    raise AssertionError("unreachable: a name longer than every other sorts after it")


def _after(keys: tuple[bytes, str], than: tuple[bytes, str]) -> bool:
    """Whether a name sorts after another in byte order or in a locale's."""
    return keys[0] > than[0] or keys[1] > than[1]


# Values no file writes: what a drop-in leaves of them, it left alone.
_MARKS = {name: f"\x01tune:{name}" for name in GRUB_VARS}


def _leave_the_line(files: Files, later: list[str]) -> bool:
    """Whether the drop-ins `later` leave both command-line variables as they find them, with
    every other file sourced before them as GRUB sources it."""
    before = [p for p in files.glob(GRUB_DROPINS) if p not in later and not OWN_DROPIN.fullmatch(p)]
    marks = "".join(f"{name}='{mark}'\n" for name, mark in _MARKS.items())
    scripts = [Script(p, files.text(p) or "") for p in (GRUB_DEFAULT, *before)]
    env = evaluate(
        [*scripts, Script(DROPIN, marks), *(Script(p, files.text(p) or "") for p in later)],
        unset_outside=lambda name: name.startswith("GRUB_") and name not in GRUB_PRESET,
    )
    return all(env.get(name) == mark for name, mark in _MARKS.items())


def grub_env(files: Files, before: str | None = None) -> Variables:
    """The variables GRUB's scripts see after sourcing the files (only those that sort before
    the drop-in `before`, and none of tune's own, when given), as /bin/sh computes them."""
    dropins = [
        p
        for p in files.glob(GRUB_DROPINS)
        if before is None or (p < before and not OWN_DROPIN.fullmatch(p))
    ]
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
    matches = {}
    for pattern, read in files.view(_read_matches).items():
        if data is not None and path_matches(pattern, path):
            read = read | {path}
        matches[pattern] = tuple(sorted(read - {path} if data is None else read))
    return Files(contents, matches, files.listings, files.errors, files.nodes, files.commands)


def _read_matches(files: Files) -> dict[str, frozenset[str]]:
    """Each glob of `files` with the read files it matches, as the host expanded it: once per
    observation, not once per `with_file` (a plan and its try-once boot call it several times a
    host), and never every pattern against every file read (a fifth of a rollout's CPU)."""
    return {
        pattern: frozenset(p for p in found if p in files.contents)
        for pattern, found in files.matches.items()
    }


def word(name: str, value: str) -> str:
    """A parameter as a command line writes it; a value with blanks quoted, as `next_arg`
    reads it back, and one with `;` too: grub-mkconfig copies the line unquoted into
    grub.cfg's `linux` command, where GRUB's script lexer ends a command at a `;` outside
    quotes (and takes the quotes off, as the kernel does)."""
    if value == "":
        return name
    quoted = any(c.isspace() for c in value) or ";" in value
    return f'{name}="{value}"' if quoted else f"{name}={value}"


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


def grubby_boot(files: Files) -> grubby.GrubbyFiles:
    """The files grubby reads and writes, as read. /etc/kernel is taken to exist, as it does on
    every RHEL 8+ and Fedora (systemd's kernel-install ships /etc/kernel/install.d): where it
    does not, grubby writes no /etc/kernel/cmdline, and rolling back deletes none."""
    paths = (*files.glob(LOADER_ENTRIES), GRUBENV, GRUB_DEFAULT, KERNEL_CMDLINE)
    return grubby.GrubbyFiles({path: files.text(path) for path in paths})


def with_grubby(files: Files, boot: grubby.GrubbyFiles) -> Files:
    """`files` with grubby's files as `boot` has them."""
    for path, text in boot.files.items():
        if text != files.text(path):
            files = with_file(files, path, None if text is None else text.encode())
    return files


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


def armed_line(files: Files) -> str | None:
    """The command line of a try-once boot that `tune apply --arm` (or `--reboot`) left for
    the next boot and no verification has yet promoted or rolled back: the GRUB try script's
    marker line, or systemd-boot's try entry's `options`; None where none is armed."""
    for line in (files.text(TRY_SCRIPT) or "").splitlines():
        if line.startswith(TRY_MARKER):
            return line[len(TRY_MARKER) :]
    found = loader(files)
    entry = files.text(found.try_entry) if found is not None else None
    return entry_options(entry) if entry is not None else None
