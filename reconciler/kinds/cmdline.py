"""Kernel command-line parameters: set or removed through the host's boot configuration.

```yaml
cmdline:
  set: {amd_pstate: active, processor.max_cstate: {value: 1, priority: P0, reason: "..."}}
  remove: [intel_iommu]
```
`current` is what the next boot will pass (the boot loader's configuration). A parameter that is
configured but not yet running is pending a reboot, not a change. A bare flag (`nosmt:` with no
value) compares as the empty string.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field, replace

from ..apply.steps import (
    BootTool,
    Command,
    DeleteFile,
    Need,
    Op,
    Probe,
    PutFile,
    Read,
    Require,
    Step,
)
from ..errors import BootConfigUnknown, HostError
from ..facts import cmdline as fmt
from ..facts.kernel import OSRELEASE
from ..facts.shell_values import Unknown
from ..hosts.files import Files, Request
from ..plan.model import Change, Note, Outcome, Pending, Phase, Priority
from .base import AfterBoot, Kind, Meta, Strict, entry, safe, safe_scalar

ParamName = safe(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", "kernel parameter name", "amd_pstate")
ParamValue = safe_scalar(r"[A-Za-z0-9_.,:=/+-]*", "kernel parameter value", "active", optional=True)


@dataclass(frozen=True, kw_only=True)
class CmdlineSpec(Strict):
    set: dict[ParamName, entry(ParamValue)] = field(default_factory=dict)  # type: ignore[valid-type]
    remove: list[entry(ParamName)] = field(default_factory=list)  # type: ignore[valid-type]


class Cmdline(Kind[CmdlineSpec]):
    section = "cmdline"
    spec_type = CmdlineSpec
    kind = "cmdline"
    phase = Phase.REBOOT
    reads = "`/proc/cmdline` and the boot tool's config"
    compared = "what the next boot passes; configured but not running is *pending*"
    try_once = True

    def request(self, spec: CmdlineSpec) -> Request:
        return fmt.request()

    def compare(self, spec: CmdlineSpec, files: Files) -> Outcome:
        outcome = Outcome()
        running = fmt.running(files)
        boot = fmt.boot_config(files)
        if boot is None:
            outcome.notes.append(
                Note(
                    "No supported boot configuration found (looked for "
                    + ", ".join(fmt.LOOKED_FOR)
                    + "); comparing with the running command line.",
                    "cmdline",
                )
            )
        if boot is not None and boot.unknown is not None:
            said = cannot_know(boot)
            outcome.notes.append(Note(said[:1].upper() + said[1:], "cmdline"))
        configured = boot.parameters if boot and boot.unknown is None else running
        wanted: list[tuple[str, str | None, Meta]] = [
            (name, item.value if item.value is not None else "", item)
            for name, item in spec.set.items()
        ]
        wanted += [(item.value, None, item) for item in spec.remove]
        for name, desired, meta in wanted:
            key = fmt.canonical(name)
            now, next_boot = running.get(key), configured.get(key)
            if next_boot == desired and now != desired:
                outcome.pending.append(Pending(self.kind, name, now, next_boot))
                continue
            outcome.changes.append(
                self.change(name, next_boot, desired, meta, fix=_fix(name, desired, boot))
            )
            if boot and boot.unknown is None and next_boot != desired and now == desired:
                outcome.notes.append(
                    Note(
                        f"{name} is on the running kernel but not in the {boot.tool} "
                        "configuration: the next boot would lose it.",
                        f"cmdline:{name}",
                    )
                )
        return outcome

    def step(self, spec: CmdlineSpec, change: Change, files: Files) -> Step:
        """One parameter through the host's boot tooling. Edits are cumulative: the k-th
        parameter's step leaves the boot configuration with the first k edits made, so undoing
        in reverse order passes through every earlier state byte for byte."""
        boot = fmt.boot_config(files)
        if boot is None:
            raise HostError(
                f"{change.id} cannot be made: no supported boot loader configuration found "
                f"(looked for {', '.join(fmt.LOOKED_FOR)})."
            )
        if boot.unknown is not None:
            raise BootConfigUnknown(f"{change.id} cannot be made: {cannot_know(boot)}")
        edits = _edits(spec, files, boot)
        upto = [name for name, _ in edits].index(change.target)
        if boot.tool in fmt.GRUB_TOOLS:
            return _grub_step(change, spec, files, boot, edits, upto)
        if boot.tool == "grubby":
            return _grubby_step(change, files, boot, edits, upto)
        return _kernel_cmdline_step(change, files, boot, edits, upto)

    def after_boot(self, step: Step) -> AfterBoot:
        return AfterBoot(
            cmdline={step.target: step.desired if isinstance(step.desired, str) else None}
        )


HOW = {
    "grub": "GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub (or a grub.d drop-in), then "
    "update-grub and reboot",
    "proxmox-boot-tool": "/etc/kernel/cmdline, then proxmox-boot-tool refresh and reboot",
    "proxmox-boot-tool-grub": "GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub (or a grub.d "
    "drop-in), then proxmox-boot-tool refresh and reboot",
    "kernel-cmdline": "/etc/kernel/cmdline, then kernel-install (or bootctl) and reboot",
    "grubby": "grubby --update-kernel=ALL --args/--remove-args (on RHEL 8 it edits kernelopts "
    "in /boot/grub2/grubenv), then reboot",
}


GRUB_ADVICE = (
    "put the parameters in GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub or in a plain "
    'drop-in (GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT ..." appends)'
)
ADVICE = {
    "grub": GRUB_ADVICE,
    "proxmox-boot-tool-grub": GRUB_ADVICE,
    "proxmox-boot-tool": "mount efivarfs on /sys/firmware/efi/efivars so the loader can be told",
}


def cannot_know(boot: fmt.BootConfig) -> str:
    """One sentence: why the next boot's command line is unknown, and what to do."""
    assert boot.unknown is not None
    advice = ADVICE.get(boot.tool, f"make {', '.join(boot.sources)} plain")
    return (
        f"the {boot.tool} configuration's kernel command line cannot be known exactly "
        f"({boot.unknown}), so tune writes no boot configuration from a guess: {advice}."
    )


def _fix(name: str, desired: str | None, boot: fmt.BootConfig | None) -> str:
    word = name if not desired else f"{name}={desired}"
    where = HOW[boot.tool] if boot else "the boot loader's kernel command line, then reboot"
    return f"{'remove' if desired is None else 'add'} {word} in {where}"


Edit = tuple[str, str | None]  # a parameter and its value after the edit (None: removed)


def _wanted(spec: CmdlineSpec) -> list[Edit]:
    found: list[Edit] = [
        (name, item.value if item.value is not None else "") for name, item in spec.set.items()
    ]
    return found + [(item.value, None) for item in spec.remove]


def _edits(spec: CmdlineSpec, files: Files, boot: fmt.BootConfig) -> list[Edit]:
    """The parameters whose next-boot value differs from the profile, in the plan's order
    (by priority, then the profile's order), which is the order apply makes them in."""
    configured = boot.parameters
    metas = [*spec.set.values(), *spec.remove]
    ranked = sorted(
        zip(_wanted(spec), metas, strict=True),
        key=lambda pair: list(Priority).index(pair[1].priority),
    )
    return [(n, v) for (n, v), _ in ranked if configured.get(fmt.canonical(n)) != v]


def _apply(words: list[str], edits: list[Edit]) -> list[str]:
    for name, value in edits:
        if value is None:
            words = fmt.edit_words(words, {}, {name})
        else:
            words = fmt.edit_words(words, {name: value}, set())
    return words


def _file_op(path: str, data: bytes | None) -> PutFile | DeleteFile:
    return DeleteFile(path) if data is None else PutFile(path, data)


def _file_step(
    change: Change,
    path: str,
    before: bytes | None,
    after: bytes | None,
    tool: tuple[Op, ...],
) -> Step:
    probe = Probe(path, Read.TEXT)
    return Step.of(
        change,
        probe=probe,
        expect=probe.value(after),
        restored=probe.value(before),
        do=(_file_op(path, after), *tool),
        undo=(_file_op(path, before), *tool),
        requires=(Require(Need.WRITABLE, posixpath.dirname(path)),),
    )


def _kernel_cmdline_step(
    change: Change, files: Files, boot: fmt.BootConfig, edits: list[Edit], upto: int
) -> Step:
    prior = files.read(fmt.KERNEL_CMDLINE)
    words = (boot.cmdline or "").split()

    def line(count: int) -> bytes | None:
        if count == 0:
            return prior
        return (" ".join(_apply(words, edits[:count])) + "\n").encode()

    if boot.tool == "proxmox-boot-tool":
        tool: tuple[str, ...] = ("proxmox-boot-tool", "refresh")
    else:
        release = files.value(OSRELEASE)
        if not release:
            raise HostError(
                f"{change.id}: {OSRELEASE} is unreadable, so kernel-install "
                "cannot be told which kernel to update."
            )
        tool = ("kernel-install", "add", release, f"/boot/vmlinuz-{release}")
    return _file_step(change, fmt.KERNEL_CMDLINE, line(upto), line(upto + 1), (BootTool(tool),))


DROPIN_HEADER = (
    "# Written by tune: kernel command-line parameters of the profile.\n"
    "# tune owns this file: edits are overwritten. `tune rollback` removes it.\n"
)


def _quoted(words: list[str]) -> str:
    text = " ".join(words)
    for char in '\\"$`':
        text = text.replace(char, "\\" + char)
    return f'"{text}"'


def dropin(linux: str, default: str, sets: dict[str, str], removes: set[str]) -> bytes | None:
    """The drop-in's bytes for the variables as the files before it leave them: appended to
    GRUB_CMDLINE_LINUX_DEFAULT where no parameter it sets or removes is there already;
    otherwise both variables given whole, edited in place."""
    linux_words, default_words = fmt.split(linux), fmt.split(default)
    named = {fmt.canonical(n) for n in (*sets, *removes)}
    if not any(fmt.canonical(w.partition("=")[0]) in named for w in linux_words + default_words):
        if not sets:
            return None
        words = " ".join(fmt.word(n, v) for n, v in sets.items())
        body = f'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT {words}"\n'
    else:
        # A parameter GRUB_CMDLINE_LINUX holds is edited there and goes from the default.
        in_linux = {fmt.canonical(w.partition("=")[0]) for w in linux_words}
        there = {n: v for n, v in sets.items() if fmt.canonical(n) in in_linux}
        elsewhere = {n: v for n, v in sets.items() if n not in there}
        body = (
            f"GRUB_CMDLINE_LINUX={_quoted(fmt.edit_words(linux_words, there, removes))}\n"
            "GRUB_CMDLINE_LINUX_DEFAULT="
            f"{_quoted(fmt.edit_words(default_words, elsewhere, removes | set(there)))}\n"
        )
    return (DROPIN_HEADER + body).encode()


def _by_name(words: list[str]) -> dict[str, list[str]]:
    """Each parameter's values in order: what the kernel sees, whatever the order of names."""
    found: dict[str, list[str]] = {}
    for item in words:
        name, _, value = item.partition("=")
        found.setdefault(fmt.canonical(name), []).append(value)
    return found


def _grub_step(
    change: Change,
    spec: CmdlineSpec,
    files: Files,
    boot: fmt.BootConfig,
    edits: list[Edit],
    upto: int,
) -> Step:
    """tune's drop-in, written relative to what the files before it configure; each version
    of it is evaluated with every file (drop-ins after it too) and must give exactly the line
    asked for, or nothing is written."""
    base = fmt.grub_env(files, before=fmt.DROPIN)
    linux, default = (base.get(name) for name in fmt.GRUB_VARS)
    plain = fmt.grub_line(fmt.with_file(files, fmt.DROPIN, None))
    for unknown in (linux, default, plain):
        if isinstance(unknown, Unknown):
            raise BootConfigUnknown(
                f"{change.id} cannot be made: "
                + cannot_know(replace(boot, cmdline=None, unknown=unknown))
            )
    assert not isinstance(linux, Unknown) and not isinstance(default, Unknown)
    assert not isinstance(plain, Unknown)
    in_sync = [e for e in _wanted(spec) if e not in edits]

    def content(count: int) -> bytes | None:
        if count == 0:
            return files.read(fmt.DROPIN)
        made = in_sync + edits[:count]
        sets = {n: v for n, v in made if v is not None}
        data = dropin(linux or "", default or "", sets, {n for n, v in made if v is None})
        wanted = _apply(fmt.split(plain), made)
        got = fmt.grub_line(fmt.with_file(files, fmt.DROPIN, data))
        if isinstance(got, Unknown) or _by_name(fmt.split(got)) != _by_name(wanted):
            raise BootConfigUnknown(
                f"{change.id} cannot be made exactly: with {fmt.DROPIN} written, GRUB would "
                f"pass {got if isinstance(got, Unknown) else repr(got)} rather than "
                f"{' '.join(wanted)!r} (a drop-in sorted after it sets the line), so nothing "
                "is written: move that drop-in's parameters into /etc/default/grub or append "
                'there with GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT ...".'
            )
        return data

    update = (BootTool(fmt.GRUB_TOOLS[boot.tool]),)
    return _file_step(change, fmt.DROPIN, content(upto), content(upto + 1), update)


def _grubby_step(
    change: Change, files: Files, boot: fmt.BootConfig, edits: list[Edit], upto: int
) -> Step:
    """grubby edits every BLS entry itself, or on RHEL 8 the kernelopts their options use in
    the GRUB environment block (read back there); undo puts each file's prior bytes back."""
    entries = boot.sources
    uses_env = any(
        fmt.KERNELOPTS in fmt.entry_options(files.text(p) or "").split() for p in entries
    )
    paths = (*entries, fmt.GRUBENV) if uses_env else entries

    def texts(count: int) -> dict[str, str]:
        out = {path: files.text(path) or "" for path in paths}
        for name, value in edits[:count]:
            sets = {} if value is None else {name: value}
            out = fmt.grubby_edit(out, sets, {name} if value is None else set())
        return out

    name, value = edits[upto]
    arg = f"--remove-args={name}" if value is None else f"--args={fmt.word(name, value)}"
    read = paths[-1]
    probe = Probe(read, Read.TEXT)
    before = texts(upto)
    return Step.of(
        change,
        probe=probe,
        expect=texts(upto + 1)[read],
        restored=before[read],
        do=(Command(("grubby", "--update-kernel=ALL", arg)),),
        undo=tuple(
            PutFile(path, files.read(path) or b"" if upto == 0 else before[path].encode())
            for path in paths
        ),
        requires=(Require(Need.COMMAND, "grubby"),),
    )


KIND = Cmdline()
