"""Kernel command-line parameters: set or removed through the host's boot configuration.

```yaml
cmdline:
  set:
    amd_pstate: active
    processor.max_cstate: {value: 1, priority: P0, reason: "..."}
    console: ttyS0,115200            # one of the console= occurrences
    pci: {contains: realloc}         # the same, said explicitly
    hugepagesz: [1G]                 # exactly these occurrences, in order
    video: {exactly: [DP-1:d, HDMI-A-1:d], priority: P2}
  remove: [intel_iommu]              # every occurrence
```
`current` is what the next boot will pass (the boot loader's configuration). A parameter that is
configured but not yet running is pending a reboot, not a change. A bare flag (`nosmt:` with no
value) compares as the empty string.

A parameter the kernel keeps one value of compares by that value (the last occurrence's; the
first's for isolcpus and nohz_full), and setting it replaces its occurrences with one. Where the
kernel (or init) keeps every occurrence (console, pci, acpi_osi, memmap, hugepages, ...: see
`facts.cmdline.EVERY_OCCURRENCE`), a value means `contains`: in sync when it is one of them, and
apply adds it as one more occurrence, leaving the others where they are. `exactly` (or a list)
asks for the occurrences to be these, in this order, in the place of the first one; `contains`
may be said of any parameter. Both show as the list of occurrences. Occurrences of different
names that pair by position (each hugepages= counts for the hugepagesz= before it) are compared
name by name: give both lists with `exactly`.

Options other sections derive from the host (`acs` with `persist: cmdline`: which bridges, on
which kernel) are planned here too, each as one option of its parameter (`Kind.kernel_options`),
so that one boot configuration write carries them with the profile's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

from ..core.changes import (
    Change,
    JsonValue,
    Note,
    Outcome,
    Pending,
    Phase,
    Priority,
    Value,
    jsonable,
)
from ..core.errors import BootConfigUnknown, HostError
from ..core.files import Files, Request
from ..core.schema import Before, Constrain, invalid
from ..facts import cmdline as fmt
from ..facts import grubby
from ..facts.kernel import OSRELEASE
from ..facts.shell_values import Unknown
from ..steps.ops import (
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
from .base import BootCheck, Kind, Meta, Strict, entry, file_step, safe, safe_scalar

Wanted = list[tuple[fmt.Edit, Meta]]

ParamName = safe(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", "kernel parameter name", "amd_pstate")
_VALUE = r"[A-Za-z0-9_.,:=/+-]*"
ParamValue = safe_scalar(_VALUE, "kernel parameter value", "active", optional=True)
Occurrence = safe_scalar(_VALUE, "kernel parameter value", "ttyS0")
FORMS = ("value", "contains", "exactly")


@dataclass(frozen=True, kw_only=True)
class ParamEntry(Meta):
    """One parameter: its value, one of its occurrences, or all of them (one form only)."""

    value: ParamValue = None  # type: ignore[valid-type]
    contains: Occurrence | None = None  # type: ignore[valid-type]
    exactly: Annotated[list[Occurrence], Constrain(min_length=1)] | None = None  # type: ignore[valid-type]

    def edit(self, name: str) -> fmt.Edit:
        if self.exactly is not None:
            return fmt.Edit(name, fmt.Mode.EXACTLY, tuple(self.exactly))
        if self.contains is not None:
            return fmt.Edit(name, fmt.Mode.CONTAINS, (self.contains,))
        value = self.value if self.value is not None else ""
        every = fmt.repeats(name) is fmt.Repeats.EVERY
        return fmt.Edit(name, fmt.Mode.CONTAINS if every else fmt.Mode.VALUE, (value,))


def _param_form(data: Any) -> Any:
    """A bare value is `value`, a list is `exactly`; a mapping gives one of the forms."""
    if isinstance(data, list):
        return {"exactly": data}
    if not isinstance(data, dict):
        return {"value": data}
    if data.get("exactly") == []:
        raise invalid(
            "cmdline_exactly_empty",
            "exactly needs at least one value; to drop every occurrence, list the parameter "
            "under cmdline.remove",
        )
    # A null contains or exactly is no form: a child profile clears its parent's that way.
    given = [f for f in FORMS if f in data and (f == "value" or data[f] is not None)]
    if len(given) > 1:
        raise invalid(
            "cmdline_forms",
            "give one of value, contains or exactly, not {given}",
            given=" and ".join(given),
        )
    return data


ParamItem = Annotated[
    ParamEntry,
    Before(_param_form, accepts=ParamValue | list[Occurrence] | ParamEntry),  # type: ignore[valid-type]
]


@dataclass(frozen=True, kw_only=True)
class CmdlineSpec(Strict):
    set: dict[ParamName, ParamItem] = field(default_factory=dict)  # type: ignore[valid-type]
    remove: list[entry(ParamName)] = field(default_factory=list)  # type: ignore[valid-type]

    def wanted(self) -> Wanted:
        """Each entry as an edit of the command line, with its priority and reason."""
        found = [(item.edit(name), item) for name, item in self.set.items()]
        return found + [(fmt.remove(item.value), item) for item in self.remove]


@dataclass(frozen=True)
class CmdlineWork:
    """What the kind plans: the profile's `cmdline` section, and the sections that derive
    options from the host (`acs` with `persist: cmdline`), made in the same boot configuration
    change so that one write, journaled and rolled back as one, carries them all."""

    spec: CmdlineSpec
    deriving: tuple[tuple[Kind[Any], Any], ...] = ()

    def request(self) -> Request:
        found = fmt.request()
        for kind, spec in self.deriving:
            found |= kind.request(spec)
        return found

    def wanted(self, files: Files) -> tuple[Wanted, Wanted]:
        """The profile's edits, then the derived ones of parameters it does not name (one
        edit per parameter: a change is named by its parameter); and the derived ones left
        out because the profile names their parameter."""
        own = self.spec.wanted()
        derived = [p for kind, spec in self.deriving for p in kind.kernel_options(spec, files)]
        clashes = [pair for pair in derived if _named(pair[0], own)]
        return own + [pair for pair in derived if pair not in clashes], clashes


def _named(edit: fmt.Edit, wanted: Wanted) -> bool:
    return any(fmt.canonical(e.name) == fmt.canonical(edit.name) for e, _ in wanted)


def _shown(edit: fmt.Edit, params: fmt.Parameters) -> Value:
    """A parameter as a plan shows it: the value the kernel keeps, or, where occurrences are
    what the entry is about, the list of them."""
    if edit.mode is fmt.Mode.VALUE or (
        edit.values == () and fmt.repeats(edit.name) is not fmt.Repeats.EVERY
    ):
        return params.get(edit.name)
    return params.every(edit.name) or None


def _after(edit: fmt.Edit, params: fmt.Parameters) -> Value:
    """What `_shown` will show once `edit` is made."""
    if edit.satisfied(params):
        return _shown(edit, params)
    if edit.mode is fmt.Mode.VALUE:
        return edit.values[0]
    words = fmt.edit([fmt.word(edit.name, v) for v in params.every(edit.name)], [edit])
    return _shown(edit, fmt.parameters(" ".join(words)) or fmt.NONE)


class Cmdline(Kind[CmdlineWork]):
    section = "cmdline"
    spec_type = CmdlineSpec
    kind = "cmdline"
    phase = Phase.REBOOT
    reads = "`/proc/cmdline` and the boot tool's config"
    compared = "what the next boot passes; configured but not running is *pending*"
    try_once = True

    def spec_of(self, profile: Any) -> CmdlineWork | None:
        from . import in_profile  # the registry imports this module

        deriving = []
        for kind in in_profile(profile, with_persistence=False):
            spec = kind.spec_of(profile) if kind.section and kind is not self else None
            if spec and kind.asks_kernel_options(spec):
                deriving.append((kind, spec))
        if profile.cmdline is None and not deriving:
            return None
        return CmdlineWork(profile.cmdline or CmdlineSpec(), tuple(deriving))

    def request(self, spec: CmdlineWork) -> Request:
        return spec.request()

    def compare(self, spec: CmdlineWork, files: Files) -> Outcome:
        outcome = Outcome()
        wanted, clashes = spec.wanted(files)
        for edit, _entry in clashes:
            outcome.notes.append(
                Note(
                    f"{' '.join(edit.words)} is left out: cmdline.{edit.name} sets that "
                    f"parameter too, and tune makes one edit of it (the profile's).",
                    f"cmdline:{edit.name}",
                )
            )
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
            unmade = [edit.name for edit, _ in wanted if not edit.satisfied(running)]
            if unmade:
                # A change planned against a line nobody can know is one apply must refuse:
                # the plan says so, with the file and the line, instead of listing it.
                ids = ", ".join(f"{self.kind}:{name}" for name in unmade)
                raise BootConfigUnknown(f"{ids} cannot be planned: {cannot_know(boot)}")
            said = cannot_know(boot)
            outcome.notes.append(Note(said[:1].upper() + said[1:], "cmdline"))
        configured = boot.parameters if boot and boot.unknown is None else running
        # An armed try-once boot is what the next boot passes: arming again changes nothing.
        armed = fmt.parameters(fmt.armed_line(files)) if boot is not None else None
        next_boot = armed if armed is not None else configured
        for edit, meta in wanted:
            name = edit.name
            if edit.satisfied(next_boot) and not edit.satisfied(running):
                outcome.pending.append(
                    Pending(self.kind, name, _shown(edit, running), _shown(edit, next_boot))
                )
                continue
            if armed is not None and edit.satisfied(armed) and edit.satisfied(running):
                continue  # the armed line booted: `tune verify` makes it the default
            current, desired = _shown(edit, configured), _after(edit, configured)
            outcome.changes.append(
                self.change(name, current, desired, meta, fix=_fix(edit, configured, boot))
            )
            if (
                boot
                and boot.unknown is None
                and not edit.satisfied(configured)
                and edit.satisfied(running)
            ):
                # The other way round too (a rollback of the boot configuration): the next
                # boot takes up what is configured, not what runs.
                outcome.pending.append(
                    Pending(self.kind, name, _shown(edit, running), _shown(edit, configured))
                )
                outcome.notes.append(
                    Note(
                        f"{name} is on the running kernel but not in the {boot.tool} "
                        "configuration: the next boot would lose it.",
                        f"cmdline:{name}",
                    )
                )
        return outcome

    def step(self, spec: CmdlineWork, change: Change, files: Files) -> Step:
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
        wanted, _ = spec.wanted(files)
        edits = _edits(wanted, boot)
        upto = [edit.name for edit in edits].index(change.target)
        if boot.tool in fmt.GRUB_TOOLS:
            return _grub_step(change, wanted, files, boot, edits, upto)
        if boot.tool == "grubby":
            return _grubby_step(change, files, boot, edits, upto)
        return _kernel_cmdline_step(change, files, boot, edits, upto)

    # A value, the list of every occurrence's value, or None: must be absent.
    after_boot_value = str | list[str] | None
    pending_field = "cmdline"

    def after_boot(self, step: Step) -> dict[str, Any]:
        return {step.target: jsonable(step.desired)}

    def after_boot_request(self, expected: Mapping[str, Any]) -> Request:
        return Request.of(fmt.PROC_CMDLINE)

    def verify_after_boot(self, expected: Mapping[str, Any], files: Files) -> BootCheck:
        """`/proc/cmdline` carries every parameter as it was to be (or lacks it)."""
        running = fmt.running(files)
        done = BootCheck()
        for name, value in expected.items():
            every: JsonValue = list(running.every(name)) or None
            got = every if isinstance(value, list) else running.get(name)
            word = _words(name, value)
            if got == value:
                done.held.append(f"{fmt.PROC_CMDLINE} {'lacks' if value is None else 'has'} {word}")
            elif value is None:
                done.failed.append(f"{fmt.PROC_CMDLINE} still has {_words(name, every)}")
            else:
                now = "nothing" if got is None else _words(name, got)
                done.failed.append(f"{fmt.PROC_CMDLINE} has {now}, not {word}")
        return done


def _words(name: str, value: JsonValue) -> str:
    """A parameter's value, or each of its occurrences, as the command line writes it."""
    if value is None:
        return name
    values = value if isinstance(value, list) else [value]
    return " ".join(fmt.word(name, v) for v in values)


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


def _fix(edit: fmt.Edit, configured: fmt.Parameters, boot: fmt.BootConfig | None) -> str:
    where = HOW[boot.tool] if boot else "the boot loader's kernel command line, then reboot"
    if not edit.values:
        return f"remove {edit.name} in {where}"
    if edit.mode is fmt.Mode.EXACTLY and edit.name in configured:
        return f"replace every {edit.name} with {' '.join(edit.words)} in {where}"
    return f"add {' '.join(edit.words)} in {where}"


def _edits(wanted: Wanted, boot: fmt.BootConfig) -> list[fmt.Edit]:
    """The entries the next boot does not satisfy, in the plan's order (by priority, then the
    profile's order), which is the order apply makes them in."""
    ranked = sorted(wanted, key=lambda pair: list(Priority).index(pair[1].priority))
    return [edit for edit, _ in ranked if not edit.satisfied(boot.parameters)]


def _kernel_cmdline_step(
    change: Change, files: Files, boot: fmt.BootConfig, edits: list[fmt.Edit], upto: int
) -> Step:
    prior = files.read(fmt.KERNEL_CMDLINE)
    words = fmt.split(boot.cmdline or "")
    # proxmox-boot-tool reads the first line only: the others stay as they are.
    rest = (files.text(fmt.KERNEL_CMDLINE) or "").partition("\n")[2]
    rest = rest if boot.tool == "proxmox-boot-tool" else ""

    def line(count: int) -> bytes | None:
        if count == 0:
            return prior
        return (" ".join(fmt.edit(words, edits[:count])) + "\n" + rest).encode()

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
    return file_step(change, fmt.KERNEL_CMDLINE, line(upto), line(upto + 1), (BootTool(tool),))


DROPIN_HEADER = (
    "# Written by tune: kernel command-line parameters of the profile.\n"
    "# tune owns this file: edits are overwritten. `tune rollback` removes it.\n"
)


def _sh_escaped(words: list[str]) -> str:
    """`words` as the inside of a double-quoted sh string gives them back (grub-mkconfig
    sources the file): a derived word may hold `"` (`facts.cmdline.word`)."""
    text = " ".join(words)
    for char in '\\"$`':
        text = text.replace(char, "\\" + char)
    return text


# Where GRUB_CMDLINE_LINUX ends in the line it makes with GRUB_CMDLINE_LINUX_DEFAULT: a word
# that names no parameter, so no edit moves it.
_BETWEEN = "\0"


def dropin(linux_line: str, default_line: str, edits: Sequence[fmt.Edit]) -> bytes | None:
    """The drop-in's bytes for the variables as the files before it leave them: words appended
    to GRUB_CMDLINE_LINUX_DEFAULT where that makes every edit (`facts.cmdline.appended`);
    where an occurrence there must change or go, both variables given whole, edited
    (`facts.cmdline.edit`)."""
    linux, default = fmt.split(linux_line), fmt.split(default_line)
    extra = fmt.appended(linux + default, edits)
    if extra == []:
        return None
    if extra is not None:
        body = f'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT {_sh_escaped(extra)}"\n'
    else:
        words = fmt.edit([*linux, _BETWEEN, *default], edits)
        at = words.index(_BETWEEN)
        body = (
            f'GRUB_CMDLINE_LINUX="{_sh_escaped(words[:at])}"\n'
            f'GRUB_CMDLINE_LINUX_DEFAULT="{_sh_escaped(words[at + 1 :])}"\n'
        )
    return (DROPIN_HEADER + body).encode()


def _kept(line: str) -> dict[str, tuple[str, ...]]:
    return (fmt.parameters(line) or fmt.NONE).kept()


def _grub_step(
    change: Change,
    wanted: Wanted,
    files: Files,
    boot: fmt.BootConfig,
    edits: list[fmt.Edit],
    upto: int,
) -> Step:
    """tune's drop-in, written relative to what the files before it configure, under a name
    that sorts after every other drop-in (`facts.cmdline.tune_dropin`): one that moved there
    is written anew and the old one removed, in the same step. Each version of it is evaluated
    with every file and must give exactly the line asked for, or nothing is written."""
    path = fmt.tune_dropin(files)
    stale = [p for p in fmt.own_dropins(files) if p != path]
    base = fmt.grub_env(files, before=path)
    linux, default = (base.get(name) for name in fmt.GRUB_VARS)
    without = files
    for own in fmt.own_dropins(files):
        without = fmt.with_file(without, own, None)
    plain = fmt.grub_line(without)
    for unknown in (linux, default, plain):
        if isinstance(unknown, Unknown):
            raise BootConfigUnknown(
                f"{change.id} cannot be made: "
                + cannot_know(replace(boot, cmdline=None, unknown=unknown))
            )
    assert not isinstance(linux, Unknown) and not isinstance(default, Unknown)
    assert not isinstance(plain, Unknown)
    in_sync = [edit for edit, _ in wanted if edit not in edits]

    def content(count: int) -> bytes | None:
        if count == 0:
            return files.read(path)
        made = in_sync + edits[:count]
        data = dropin(linux or "", default or "", made)
        wanted = " ".join(fmt.edit(fmt.split(plain), made))
        got = fmt.grub_line(fmt.with_file(without, path, data))
        if isinstance(got, Unknown) or _kept(got) != _kept(wanted):
            raise BootConfigUnknown(
                f"{change.id} cannot be made exactly: with {path} written, GRUB would "
                f"pass {got if isinstance(got, Unknown) else repr(got)} rather than "
                f"{wanted!r}, so nothing is written: run `sh -c '. {fmt.GRUB_DEFAULT}; for f "
                f'in {fmt.GRUB_DROPINS}; do . "$f"; done; echo $GRUB_CMDLINE_LINUX '
                "$GRUB_CMDLINE_LINUX_DEFAULT'` to see the line, and put the parameters in "
                f"{fmt.GRUB_DEFAULT}."
            )
        return data

    update = (BootTool(fmt.GRUB_TOOLS[boot.tool]),)
    step = file_step(change, path, content(upto), content(upto + 1), update)
    if upto > 0 or not stale:
        return step
    return replace(
        step,
        do=(*step.do[:1], *(DeleteFile(p) for p in stale), *step.do[1:]),
        undo=(*(PutFile(p, files.read(p) or b"") for p in stale), *step.undo),
    )


def _grubby_where(path: str) -> str:
    if path == fmt.GRUBENV:
        return f"kernelopts in {fmt.GRUBENV} (grub2-editenv)"
    if path == fmt.GRUB_DEFAULT:
        return f"GRUB_CMDLINE_LINUX in {fmt.GRUB_DEFAULT}"
    if path == fmt.KERNEL_CMDLINE:
        return fmt.KERNEL_CMDLINE
    return f"the `options` line of {path}"


def _grubby_call(remove: str, add: str) -> tuple[str, ...]:
    return (
        "grubby",
        "--update-kernel=ALL",
        *((f"--remove-args={remove}",) if remove else ()),
        *((f"--args={add}",) if add else ()),
    )


def _grubby_made(
    edit: fmt.Edit, boot: grubby.GrubbyFiles, remove: str, add: str
) -> tuple[grubby.GrubbyFiles, str | None]:
    """The files after the call, and why it does not make `edit` (None: it does): in every line
    grubby edits, the parameter's occurrences must become the wanted ones and every other
    parameter keep what the kernel takes from it."""
    after = grubby.update_all(boot, remove, add)
    wanted = tuple(fmt.name_value(w)[1] or "" for w in grubby.words(add))
    lines, now = boot.lines(), after.lines()
    for path, line in now.items():
        params = fmt.parameters(line) or fmt.NONE
        old = fmt.parameters(lines.get(path, line)) or fmt.NONE
        key = fmt.canonical(edit.name)
        others = {n: v for n, v in params.kept().items() if n != key}
        if params.every(edit.name) != wanted or (
            path in lines and others != {n: v for n, v in old.kept().items() if n != key}
        ):
            return after, (
                f"it would turn {_grubby_where(path)} from {lines.get(path, '(none)')!r} into "
                f"{line!r}"
            )
    return after, None


def _grubby_args(
    edit: fmt.Edit,
    boot: grubby.GrubbyFiles,
    line: str,
    booted: Callable[[grubby.GrubbyFiles], str | Unknown],
) -> tuple[tuple[str, ...], grubby.GrubbyFiles]:
    """The one grubby call that makes `edit` in every line grubby edits, and the files it
    leaves. `--args` drops every occurrence of its names and appends its words, so a parameter
    that repeats ends up as the wanted occurrences, last; where a bare occurrence next to
    another survives that pass (`update_args`), `--remove-args` passes go first."""
    target = fmt.edit(fmt.split(line), [edit])
    add = " ".join(
        fmt.word(edit.name, v)
        for v in (fmt.parameters(" ".join(target)) or fmt.NONE).every(edit.name)
    )
    key = fmt.canonical(edit.name)
    lines = boot.lines()
    spellings = sorted(
        {
            fmt.name_value(w)[0]
            for text in lines.values()
            for w in fmt.split(text)
            if fmt.canonical(fmt.name_value(w)[0]) == key
        }
        | {edit.name}
    )
    most = max(
        (len((fmt.parameters(t) or fmt.NONE).every(edit.name)) for t in lines.values()), default=0
    )
    tries = [("", add)] if add else []
    tries.append((" ".join(s for s in spellings for _ in range(max(most, 1))), add))
    why: str | None = None
    for remove, args in tries:
        try:
            after, why = _grubby_made(edit, boot, remove, args)
        except grubby.GrubbyCannot as exc:
            why = str(exc)
            continue
        now = booted(after)
        if why is None and (
            isinstance(now, Unknown) or not edit.satisfied(fmt.parameters(now) or fmt.NONE)
        ):
            # The default entry's own words ($tuned_params, which tuned sets) keep it.
            why = f"the default entry would still boot {now}"
        if why is None:
            return _grubby_call(remove, args), after
    raise grubby.GrubbyCannot(why or "")


def _grubby_step(
    change: Change, files: Files, boot: fmt.BootConfig, edits: list[fmt.Edit], upto: int
) -> Step:
    """One `grubby --update-kernel=ALL` call per parameter, made on the files as the earlier
    calls leave them (`facts.grubby.update_all`, the script's own edits); read back where
    the default entry's line is, undone by putting back every file grubby wrote."""
    states = [fmt.grubby_boot(files)]
    calls: list[tuple[str, ...]] = []

    def booted(state: grubby.GrubbyFiles) -> str | Unknown:
        default = state.default()
        assert default is not None  # boot_config found entries
        return fmt.expand_entry(fmt.with_grubby(files, state), default.options)

    for edit in edits[: upto + 1]:
        state = states[-1]
        line = booted(state)
        if isinstance(line, Unknown):
            raise BootConfigUnknown(f"{change.id} cannot be made: {line}")
        try:
            call, after = _grubby_args(edit, state, line, booted)
        except grubby.GrubbyCannot as exc:
            raise HostError(
                f"{change.id} cannot be made with grubby (the script Fedora and RHEL install "
                f"as /usr/sbin/grubby): {exc}. Edit that line by hand, or leave this entry out."
            ) from None
        calls.append(call)
        states.append(after)
    before, after = states[upto], states[upto + 1]
    default = before.default()
    assert default is not None
    read = fmt.GRUBENV if default.uses_kernelopts else default.path
    written = [p for p in after.files if after.text(p) != before.text(p)]

    def undo(path: str) -> Op:
        data = files.read(path) if upto == 0 else _encoded(before.text(path))
        return DeleteFile(path) if data is None else PutFile(path, data)

    return Step.of(
        change,
        probe=Probe(read, Read.TEXT),
        expect=after.text(read),
        restored=before.text(read),
        do=(Command(calls[upto]),),
        undo=tuple(undo(path) for path in written),
        requires=(Require(Need.COMMAND, "grubby"),),
    )


def _encoded(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


KIND = Cmdline()
