"""Kernel modules that must be loaded (optionally with parameters) or absent.

```yaml
modules:
  nvidia_peermem: {value: loaded, priority: P0, reason: "GPUDirect RDMA between GPU and NIC"}
  nouveau: absent
  nvidia: {value: loaded, params: {NVreg_EnableGpuFirmware: 1}}
```
Names compare with dashes and underscores as the same, as modprobe does.
"""

from __future__ import annotations

import shlex
from typing import Literal

from pydantic import Field

from ..host import Files, Request
from ..model import Outcome, Phase
from .base import Entry, KernelValue, Kind, entry, normalize_words, safe

MODULES = "/proc/modules"

ModuleName = safe(r"[A-Za-z0-9_-]+", "module name", "nvidia_peermem")
ParamName = safe(r"[A-Za-z0-9_]+", "module parameter", "NVreg_EnableGpuFirmware")
State = Literal["loaded", "absent"]


class ModuleEntry(Entry[State]):
    params: dict[ParamName, KernelValue] = Field(default_factory=dict)  # type: ignore[valid-type]


ModuleItem = entry(State, ModuleEntry)
ModulesSpec = dict[ModuleName, ModuleItem]  # type: ignore[valid-type]


def canonical(name: str) -> str:
    return name.replace("-", "_")


def loaded_modules(text: str | None) -> set[str]:
    """Names from /proc/modules: `name size refcount deps state address [taint]`."""
    return {canonical(line.split()[0]) for line in (text or "").splitlines() if line.strip()}


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


def param_path(module: str, param: str) -> str:
    return f"/sys/module/{canonical(module)}/parameters/{param}"


class Modules(Kind[dict[str, ModuleEntry]]):
    section = "modules"
    kind = "module"
    phase = Phase.RUNTIME

    def request(self, spec: dict[str, ModuleEntry]) -> Request:
        params = [param_path(m, p) for m, e in spec.items() for p in e.params]
        return Request.of(MODULES, *params)

    def compare(self, spec: dict[str, ModuleEntry], files: Files) -> Outcome:
        outcome = Outcome()
        text = files.text(MODULES)
        loaded = loaded_modules(text)
        for name, item in spec.items():
            current = (
                None if text is None else ("loaded" if canonical(name) in loaded else "absent")
            )
            fix = (
                f"modprobe {canonical(name)}"
                if item.value == "loaded"
                else f"modprobe -r {canonical(name)}"
            )
            outcome.changes.append(self.change(canonical(name), current, item.value, item, fix=fix))
            if item.value != "loaded":
                continue
            for param, value in item.params.items():
                observed = normalize_words(files.value(param_path(name, param)))
                reload = (
                    f"modprobe -r {canonical(name)} && "
                    f"modprobe {canonical(name)} {param}={shlex.quote(str(value))}"
                )
                outcome.changes.append(
                    self.change(
                        f"{canonical(name)}:{param}",
                        observed,
                        param_value(str(value), observed),
                        item,
                        fix=reload,
                    )
                )
        return outcome


KIND = Modules()
