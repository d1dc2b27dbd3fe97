"""Kernel modules that must be loaded (optionally with parameters) or absent.

```yaml
modules:
  nvidia_peermem: {value: loaded, priority: P0, reason: "GPUDirect RDMA between GPU and NIC"}
  nouveau: absent
  nvidia: {value: loaded, params: {NVreg_EnableGpuFirmware: 1}}
```
Names compare with dashes and underscores as the same, as modprobe does. The NVIDIA driver's
`NVreg_*` parameters of `nvidia` are not this kind's: /sys/module never shows them, so the
reboot-phase kind `nvreg` reads them from /proc/driver/nvidia/params and sets them for the next
load (`kinds/nvreg.py`). A module compiled
into the running kernel (listed in its `modules.builtin`) reads `builtin`: that is `loaded`,
and it can never be `absent`. A module /proc/modules lists `Loading` or `Unloading` reads
`loading` or `unloading`: in flight, neither loaded nor absent (kmod's module_is_inkernel);
`modprobe` loads it. A parameter a modprobe.d file already gives the next load (a distribution's
packaged `options nvidia-drm modeset=1`) gets no second line in tune's own file.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Literal

from ..core.changes import Change, Note, Outcome, Phase
from ..core.errors import HostError
from ..core.files import Files, Request
from ..facts.kernel import OSRELEASE
from ..facts.modules import (
    BUILTIN,
    MODPROBE_GLOBS,
    MODULES,
    TRANSIENT,
    builtin_modules,
    builtin_path,
    canonical,
    modprobe_order,
    module_states,
    next_load_options,
    param_path,
)
from ..facts.nvidia_params import driver_param
from ..steps.ops import Command, Need, Probe, Read, Require, Step, normalize_words
from ..steps.persist import MODPROBE, MODULES_LOAD, Persisted, modprobe_options
from .base import (
    Entry,
    Kind,
    attribute_step,
    entry,
    missing_note,
    safe,
    safe_scalar,
)

ModuleName = safe(r"[A-Za-z0-9_-]+", "module name", "nvidia_peermem")
ParamName = safe(r"[A-Za-z0-9_]+", "module parameter", "NVreg_EnableGpuFirmware")
# A kernel value, or a list of them with `;` (NVreg_RegistryDwords="PeerMappingOverride=1;").
ParamValue = safe_scalar(
    r"[A-Za-z0-9 \t_.,:;=/@%+\[\]-]*",
    "module parameter value (letters, digits, spaces, _.,:;=/@%+[]-)",
    "1",
)
State = Literal["loaded", "absent"]


@dataclass(frozen=True, kw_only=True)
class ModuleEntry(Entry[State]):
    value: State  # restated: pydantic does not carry Entry[State]'s argument into a subclass
    params: dict[ParamName, ParamValue] = field(default_factory=dict)  # type: ignore[valid-type]

    def runtime_params(self, name: str) -> dict[str, str]:
        """The parameters /sys/module shows and modprobe sets now; the NVIDIA driver's NVreg_
        ones are the `nvreg` kind's (set for the next load)."""
        return {k: v for k, v in self.params.items() if not driver_param(name, k)}


ModuleItem = entry(State, ModuleEntry)
ModulesSpec = dict[ModuleName, ModuleItem]  # type: ignore[valid-type]


# What kstrtobool accepts for a boolean parameter; the kernel prints it back as Y or N.
_TRUE = {"1", "y", "Y", "on", "true"}
_FALSE = {"0", "n", "N", "off", "false"}


def param_value(value: str | None, observed: str | None) -> str | None:
    """A desired parameter as the kernel would print it back: as Y or N where the parameter
    is a boolean (it reads Y or N), otherwise with integers in decimal."""
    if value is not None and observed in ("Y", "N"):
        if value in _TRUE:
            return "Y"
        if value in _FALSE:
            return "N"
    return normalize_words(value)


def _load(name: str, params: dict[str, str]) -> Command:
    return Command(("modprobe", name, *(f"{k}={v}" for k, v in params.items())))


# A prior value modprobe passes on as one parameter: the kernel splits its options at spaces
# and reads quotes, and `(null)`, what /sys/module prints for a string never set, is no value.
_ONE_VALUE = re.compile(r"[A-Za-z0-9_.,:;=/@%+\[\]-]+")


def _prior_params(name: str, params: dict[str, str], files: Files) -> dict[str, str]:
    """The values the loaded module has for the parameters the profile names, as read; one
    that cannot be read (no such parameter, not shown), was never set or is not one word is
    left to modprobe.d, as at its first load."""
    prior = {}
    for param in params:
        value = (files.value(param_path(name, param)) or "").strip()
        if _ONE_VALUE.fullmatch(value):
            prior[param] = value
    return prior


def _not_given(name: str, params: dict[str, str], files: Files) -> dict[str, str]:
    """The parameters of `params` that the next load of `name` would not get as they are
    from the other modprobe.d files (a distribution's packaged file: Ubuntu's
    `options nvidia-drm modeset=1`), read as kmod and the kernel read them: tune's own file
    repeats none of those."""
    paths = [p for pattern in MODPROBE_GLOBS for p in files.glob(pattern)]
    # tune's own file still hides its namesakes in /usr/lib and /lib.
    texts = [files.text(p) or "" for p in modprobe_order(paths) if p != MODPROBE]
    given = dict(next_load_options(texts, name))
    return {
        param: value
        for param, value in params.items()
        if param not in given
        or param_value(str(value), (observed := files.value(param_path(name, param))))
        != param_value(given[param], observed)
    }


def builtin(files: Files) -> frozenset[str]:
    """The modules compiled into the running kernel: its release's modules.builtin."""
    release = files.value(OSRELEASE)
    return frozenset() if release is None else builtin_modules(files.text(builtin_path(release)))


def state(name: str, listed: dict[str, str] | None, compiled_in: frozenset[str]) -> str | None:
    """`builtin`, `loaded`, `absent`, or `loading`/`unloading` for a module the kernel lists
    in flight (neither loaded nor absent); None when there is no /proc/modules (`listed`) and
    the module is not compiled in: nothing tells whether it is loaded."""
    if name in compiled_in:
        return "builtin"
    if listed is None:
        return None
    return listed.get(name, "absent")


def loaded_of(files: Files) -> dict[str, str] | None:
    text = files.text(MODULES)
    return None if text is None else module_states(text)


NO_PROC_MODULES = (
    f"{MODULES} does not exist on this host: its kernel was built without loadable module "
    "support (CONFIG_MODULES=n), or the snapshot lacks the file."
)


COMPILED_IN = "is compiled into the running kernel (its modules.builtin lists it)"
NO_UNLOAD = "neither modprobe -r nor a blacklist can remove it, only a kernel built without it"


class Modules(Kind[dict[str, ModuleEntry]]):
    section = "modules"
    spec_type = ModulesSpec
    kind = "module"
    phase = Phase.RUNTIME
    reads = "`/proc/modules`, `/lib/modules/R/modules.builtin`, `/sys/module/M/parameters/P`"
    compared = (
        "`-` and `_` alike; a module compiled in is `builtin` (in sync for `loaded`); `1`/`0` "
        "as the `Y`/`N` a boolean parameter reads; `nvidia`'s `NVreg_` parameters are `nvreg`'s"
    )

    def request(self, spec: dict[str, ModuleEntry]) -> Request:
        params = [param_path(m, p) for m, e in spec.items() for p in e.params]
        # What modprobe.d already gives a module's parameters at its next load (`persist`).
        config = MODPROBE_GLOBS if any(e.params for e in spec.values()) else ()
        return Request.of(MODULES, OSRELEASE, BUILTIN, *params, *config)

    def compare(self, spec: dict[str, ModuleEntry], files: Files) -> Outcome:
        outcome = Outcome()
        loaded, compiled_in = loaded_of(files), builtin(files)
        for name, item in spec.items():
            current = state(canonical(name), loaded, compiled_in)
            outcome.notes.extend(self._builtin_notes(name, item, current))
            # A module compiled in is as loaded as a module gets.
            desired = "builtin" if current == "builtin" and item.value == "loaded" else item.value
            fix = (
                f"modprobe {canonical(name)}"
                if item.value == "loaded"
                else f"modprobe -r {canonical(name)}"
            )
            # No /proc/modules: a kernel without loadable modules has none of these knobs.
            missing = current is None
            if missing:
                note = missing_note(NO_PROC_MODULES, item)
                outcome.notes.append(Note(note, about=f"modules:{name}"))
            outcome.changes.append(
                self.change(canonical(name), current, desired, item, fix=fix, missing=missing)
            )
            if item.value != "loaded":
                continue
            for param, value in item.runtime_params(name).items():
                path = param_path(name, param)
                observed = normalize_words(files.value(path))
                # Loaded without it: this build of the module has no such parameter.
                absent = observed is None and current in ("loaded", "builtin")
                if absent and path not in files.errors:
                    said = f"{canonical(name)} has no parameter {param} (no {path})."
                    outcome.notes.append(Note(missing_note(said, item), f"modules:{name}"))
                # A module compiled in cannot be reloaded: its parameter is written in place.
                reload = (
                    f"echo {shlex.quote(str(value))} > {path}"
                    if current == "builtin"
                    else f"modprobe -r {canonical(name)} && "
                    f"modprobe {canonical(name)} {param}={shlex.quote(str(value))}"
                )
                outcome.changes.append(
                    self.change(
                        f"{canonical(name)}:{param}",
                        observed,
                        param_value(str(value), observed),
                        item,
                        fix=reload,
                        missing=absent and path not in files.errors,
                    )
                )
        return outcome

    def _builtin_notes(self, name: str, item: ModuleEntry, current: str | None) -> list[Note]:
        if current != "builtin":
            return []
        about = f"modules:{name}"
        if item.value == "absent":
            return [Note(f"{canonical(name)} {COMPILED_IN}: {NO_UNLOAD}.", about=about)]
        params = item.runtime_params(name)
        if params:
            words = " ".join(f"{canonical(name)}.{k}={v}" for k, v in params.items())
            return [
                Note(
                    f"{canonical(name)} {COMPILED_IN}: modprobe.d options never reach it, so "
                    f"its parameters last until the next boot unless the kernel command line "
                    f"sets them ({words}).",
                    about=about,
                )
            ]
        return []

    def step(self, spec: dict[str, ModuleEntry], change: Change, files: Files) -> Step:
        name, _, param = change.target.partition(":")
        current = state(name, loaded_of(files), builtin(files))
        if current == "builtin" and not param:
            raise HostError(
                f"{change.id} cannot be made absent: {name} {COMPILED_IN}; {NO_UNLOAD}."
            )
        if current is None:
            raise HostError(
                f"{change.id} cannot be changed: {MODULES} does not exist on this host."
            )
        loaded = current in ("loaded", "builtin")
        if param:
            if loaded:
                return attribute_step(change, param_path(name, param), files, Read.WORDS)
            # Not loaded yet: the module's own step loads it with this parameter, and whichever
            # of the two is rolled back first unloads it again.
            probe = Probe(param_path(name, param), Read.WORDS)
            value = change.desired if isinstance(change.desired, str) else ""
            return Step.of(
                change,
                probe=probe,
                expect=probe.value(value.encode()),
                restored=None,
                do=(),
                undo=(Command(("modprobe", "-r", name)),),
                # What loading it needs: --skip-missing leaves both out when it is not there.
                requires=(Require(Need.MODULE, name),),
            )
        item = next(e for n, e in spec.items() if canonical(n) == name)
        params = item.runtime_params(name)
        unload = Command(("modprobe", "-r", name))
        if change.desired == "loaded":
            forward, backward = _load(name, params), unload
        else:
            # Loaded again as it was: the profile's values say how it should be loaded, the ones
            # read now how it was (journaled with the step, for a rollback from the journal).
            forward, backward = unload, _load(name, _prior_params(name, params, files))
        return Step.of(
            change,
            probe=Probe(MODULES, Read.MODULE, name),
            expect=str(change.desired),
            # A module in flight reads absent to the probe, as to kmod.
            restored="absent" if change.current in TRANSIENT.values() else str(change.current),
            do=(forward,),
            undo=(backward,),
            requires=(Require(Need.MODULE, name),) if change.desired == "loaded" else (),
        )

    def persist(self, spec: dict[str, ModuleEntry], files: Files) -> list[Persisted]:
        lines = []
        for name, item in spec.items():
            if item.value == "loaded":
                knob = f"{self.kind}:{canonical(name)}"
                lines.append(Persisted(MODULES_LOAD, canonical(name), knob))
                params = _not_given(name, item.runtime_params(name), files)
                if params:
                    line = modprobe_options(canonical(name), params)
                    lines.append(Persisted(MODPROBE, line, knob))
            else:
                lines.append(Persisted(MODPROBE, f"blacklist {canonical(name)}"))
        return lines

    def explain(self, step: Step, output: str) -> str | None:
        # The kernel logs "disagrees about version of symbol ib_register_peer_memory_client"
        # when nvidia_peermem was built against another RDMA stack (MLNX_OFED vs inbox).
        mismatch = "disagrees about version of symbol" in output or (
            step.target == "nvidia_peermem"
            and any(e in output for e in ("Invalid argument", "Exec format error"))
        )
        if mismatch:
            return (
                f"modprobe {step.target} failed because the NVIDIA driver and the RDMA stack "
                f"do not match (rebuild or reinstall one against the other): {output.strip()}"
            )
        return None


KIND = Modules()
