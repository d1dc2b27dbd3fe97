"""NVIDIA driver parameters (`NVreg_*`): set for the next load of the driver, then verified.

```yaml
modules:
  nvidia:
    value: loaded
    params: {NVreg_EnableStreamMemOPs: 1, NVreg_RegistryDwords: "PeerMappingOverride=1;"}
```
Not a section of its own: the `NVreg_` parameters of `nvidia` in `modules`. The driver declares
them with mode 0, so /sys/module never shows them, and it reads them once, when it loads:
`current` is what its next load will be given (the `options nvidia` lines of modprobe.d, the
last of a name winning, as the kernel takes them), else what the running driver uses
(/proc/driver/nvidia/params, which drops the `NVreg_` prefix and prints integers as unsigned
32-bit decimals). Configured but not yet running is *pending* a reboot. Apply writes
`/etc/modprobe.d/tune-nvidia.conf` and rebuilds the initramfs (`update-initramfs -u`, else
`dracut -f`: whichever the host has), since nvidia loads from it where it loads early;
`tune verify` reads the parameters back after the boot. A name NVIDIA's nv-reg.h does not
declare, which the running driver does not print either, is a knob the host lacks: the note
names the nearest known one. tune owns its file: a parameter there that the profile no longer
gives is taken out (the file removed with the last), as tune's boot-time files are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.changes import Change, Note, Outcome, Pending, Phase, Priority
from ..core.errors import HostError
from ..core.files import Files, Request
from ..facts import initramfs
from ..facts import nvidia_params as nv
from ..facts.modules import (
    MODPROBE_GLOBS,
    canonical,
    modprobe_order,
    module_options,
    next_load_options,
)
from ..steps.ops import BootTool, Step
from ..steps.persist import NVREG, modprobe_options
from .base import BootCheck, Kind, Meta, file_step, missing_note


@dataclass(frozen=True)
class DriverParam:
    """One NVreg_ parameter of the profile's `nvidia` entry, with that entry's priority."""

    param: str
    value: str | None  # as the profile gives it; None: tune's file has it, the profile no more
    meta: Meta
    entry: str  # the profile's name for the module (`nvidia`), where notes point

    @property
    def desired(self) -> str | None:
        return None if self.value is None else nv.normalize(self.param, self.value)


# A parameter tune's file still gives that the profile no longer has: taken out of the file.
LEFT_OVER = Meta(priority=Priority.P2, reason=f"no longer in the profile, still in {NVREG}")


NvregSpec = tuple[DriverParam, ...]


def configured(files: Files, ours: Mapping[str, bytes | None] | None = None) -> dict[str, str]:
    """The NVreg_ options the next load of nvidia gets, as the driver will print them; `ours`:
    files as tune would write them instead (None: no file)."""
    texts = {p: files.text(p) for pattern in MODPROBE_GLOBS for p in files.glob(pattern)}
    for path, data in (ours or {}).items():
        texts[path] = None if data is None else data.decode("utf-8", "replace")
    ordered = [texts[path] or "" for path in modprobe_order(texts)]
    found: dict[str, str] = {}
    for name, value in next_load_options(ordered, nv.MODULE):
        if name.startswith(nv.PREFIX):
            found[name] = nv.normalize(name, value)
    return found


def _known(item: DriverParam, running: dict[str, str] | None) -> bool:
    """Declared in nv-reg.h, or printed by the running driver (a newer one than that list)."""
    return item.param in nv.KNOWN or nv.running(running, item.param) is not None


def _ours(files: Files) -> dict[str, str]:
    """The NVreg_ options tune's own file gives, as written there."""
    found = module_options(files.text(NVREG) or "", nv.MODULE)
    return {name: value for name, value in found if name.startswith(nv.PREFIX)}


def _left_over(spec: NvregSpec, ours: Mapping[str, str]) -> list[DriverParam]:
    """The parameters of tune's file (`_ours`) that the profile no longer gives."""
    wanted = {i.param for i in spec}
    return [DriverParam(p, None, LEFT_OVER, nv.MODULE) for p in ours if p not in wanted]


def _pending(item: DriverParam, now: str | None, then: str | None) -> bool:
    """Given to the next load, not used by the running driver: a reboot makes it."""
    return then == item.desired and now is not None and now != item.desired


def _changes(item: DriverParam, running: dict[str, str] | None, next_load: dict[str, str]) -> bool:
    """Whether the plan has a change for `item` (what `compare` decides, for `step`)."""
    now, then = nv.running(running, item.param), next_load.get(item.param)
    current = then if then is not None else now
    return not _pending(item, now, then) and current != item.desired


class Nvreg(Kind[NvregSpec]):
    section = ""
    parent_section = "modules"
    spec_type = None
    kind = "nvreg"
    phase = Phase.REBOOT
    reads = "`/proc/driver/nvidia/params`, the `options nvidia` lines of modprobe.d"
    compared = (
        "`NVreg_` parameters of `nvidia` in `modules`: what the next load is given; configured "
        "but not running is *pending*; integers as the unsigned decimal the driver prints"
    )
    noun = "parameters"
    takes_effect = "reboot the host (or unload and load nvidia)"

    def spec_of(self, profile: Any) -> NvregSpec:
        """Empty, not None, without one: tune's file may still hold parameters to take out."""
        found = [
            DriverParam(param, str(value), item, name)
            for name, item in (profile.modules or {}).items()
            if canonical(name) == nv.MODULE and item.value == "loaded"
            for param, value in item.params.items()
            if nv.driver_param(name, param)
        ]
        return tuple(found)

    def request(self, spec: NvregSpec) -> Request:
        return (
            Request.of(nv.PARAMS, nv.DRIVER_CONTAINER_MARK, *MODPROBE_GLOBS, edited=[NVREG])
            | initramfs.request()
        )

    def compare(self, spec: NvregSpec, files: Files) -> Outcome:
        outcome = Outcome()
        if files.read(nv.DRIVER_CONTAINER_MARK) is not None:
            if spec:
                names = ", ".join(item.param for item in spec)
                said = (
                    f"{names}: the GPU Operator's driver container loads nvidia here "
                    f"({nv.DRIVER_CONTAINER_MARK}) with the parameters of its ConfigMap, not "
                    f"{NVREG}: `tune kube gpu-operator PROFILE` prints it; tune plans none."
                )
                outcome.notes.append(Note(said, f"modules:{spec[0].entry}"))
            return outcome
        running = nv.parse(files.text(nv.PARAMS))
        next_load = configured(files)
        tool = initramfs.rebuild(files)
        for item in spec:
            about = f"modules:{item.entry}"
            now, then = nv.running(running, item.param), next_load.get(item.param)
            if not _known(item, running):
                outcome.notes.append(Note(missing_note(_unknown(item, running), item.meta), about))
                outcome.changes.append(
                    self.change(item.param, then, item.desired, item.meta, missing=True)
                )
                continue
            if _pending(item, now, then):
                outcome.pending.append(Pending(self.kind, item.param, now, then))
                continue
            current = then if then is not None else now
            fix = _fix(item, tool)
            outcome.changes.append(
                self.change(item.param, current, item.desired, item.meta, fix=fix)
            )
        ours = _ours(files)
        for item in _left_over(spec, ours):
            current = nv.normalize(item.param, ours[item.param])
            fix = _fix(item, tool)
            outcome.changes.append(self.change(item.param, current, None, item.meta, fix=fix))
        if tool is None and any(c.kind == self.kind and not c.in_sync for c in outcome.changes):
            outcome.notes.append(
                Note(
                    f"No initramfs tool found (looked for {initramfs.LOOKED_FOR}): the options "
                    f"in {NVREG} reach nvidia only where it loads from the root file system.",
                    "modules",
                )
            )
        return outcome

    def step(self, spec: NvregSpec, change: Change, files: Files) -> Step:
        """tune's modprobe.d file, one parameter more per step in the plan's order, the
        initramfs rebuilt after each write: undoing in reverse passes through every earlier
        state byte for byte, the first undo giving back what the file held before."""
        running = nv.parse(files.text(nv.PARAMS))
        ours = _ours(files)
        left_over = _left_over(spec, ours)
        item = next(i for i in (*spec, *left_over) if i.param == change.target)
        if item.value is not None and not _known(item, running):
            raise HostError(f"{change.id} cannot be set: {_unknown(item, running)}")
        writable = [i for i in spec if _known(i, running)]
        next_load = configured(files)
        ranked = sorted(writable, key=lambda i: list(Priority).index(i.meta.priority))
        edits = [i for i in ranked if _changes(i, running, next_load)] + left_over
        upto = edits.index(item)

        def content(count: int) -> bytes | None:
            """The file once the first `count` edits are made; the parameters already in
            sync are written with the first."""
            if count == 0:
                return files.read(NVREG)
            options = dict(ours)
            for done in [i for i in writable if i not in edits] + edits[:count]:
                if done.value is None:
                    del options[done.param]
                else:
                    options[done.param] = done.value
            if not options:
                return None
            data = (HEADER + modprobe_options(nv.MODULE, options) + "\n").encode()
            given = configured(files, {NVREG: data})
            for done in writable:
                if done.param in options and given.get(done.param) != done.desired:
                    raise HostError(
                        f"{change.id} cannot be made: with {NVREG} written, nvidia would be "
                        f"given {done.param}={given.get(done.param)} by a modprobe.d file read "
                        f"after it; remove {done.param} there, or leave this entry out."
                    )
            return data

        tool = initramfs.rebuild(files)
        rebuild = (BootTool(tool),) if tool else ()
        return file_step(change, NVREG, content(upto), content(upto + 1), rebuild)

    # The NVIDIA driver's parameters, by the name /proc/driver/nvidia/params prints, as it
    # prints the value.
    pending_field = "nvidia_params"

    def after_boot(self, step: Step) -> dict[str, Any]:
        if not isinstance(step.desired, str):
            return {}
        return {nv.proc_name(step.target): step.desired}

    def after_boot_request(self, expected: Mapping[str, Any]) -> Request:
        return Request.of(nv.PARAMS)

    def verify_after_boot(self, expected: Mapping[str, Any], files: Files) -> BootCheck:
        """The booted driver uses the parameters the boot was to bring."""
        running = nv.parse(files.text(nv.PARAMS))
        if running is None:
            return BootCheck(
                failed=[f"{nv.PARAMS} does not exist: the nvidia driver is not loaded"]
            )
        done = BootCheck()
        for name, value in expected.items():
            got = running.get(name)
            if got == value:
                done.held.append(f"{nv.PARAMS} has {name}: {value}")
            else:
                now = "nothing" if got is None else got
                done.failed.append(f"{nv.PARAMS} has {name}: {now}, not {value}")
        return done


HEADER = (
    "# Written by tune: the NVIDIA driver's NVreg_ parameters of the profile, read when nvidia\n"
    "# loads (from the initramfs, where it loads early: rebuild it after an edit).\n"
    "# tune owns this file: edits are overwritten. `tune rollback` restores what was here.\n"
)


def _fix(item: DriverParam, tool: tuple[str, ...] | None) -> str:
    then = f"{' '.join(tool)} and reboot" if tool else "reboot"
    if item.value is None:
        return f"remove {item.param} from {NVREG}, then {then}"
    return f"{modprobe_options(nv.MODULE, {item.param: item.value})} in {NVREG}, then {then}"


def _unknown(item: DriverParam, running: dict[str, str] | None) -> str:
    nearest = nv.nearest(item.param)
    printed = "" if running is None else f", and {nv.PARAMS} does not print it"
    return (
        f"nvidia has no parameter {item.param} (NVIDIA's nv-reg.h does not declare it{printed})"
        + (f"; did you mean {nearest}?" if nearest else ".")
    )


KIND = Nvreg()
