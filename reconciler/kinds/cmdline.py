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

from pydantic import Field

from ..formats import cmdline as fmt
from ..host import Files, Request
from ..model import Note, Outcome, Pending, Phase
from .base import Kind, Meta, Strict, entry, safe, safe_scalar

ParamName = safe(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", "kernel parameter name", "amd_pstate")
ParamValue = safe_scalar(r"[A-Za-z0-9_.,:=/+-]*", "kernel parameter value", "active", optional=True)


class CmdlineSpec(Strict):
    set: dict[ParamName, entry(ParamValue)] = Field(default_factory=dict)  # type: ignore[valid-type]
    remove: list[entry(ParamName)] = Field(default_factory=list)  # type: ignore[valid-type]


class Cmdline(Kind[CmdlineSpec]):
    section = "cmdline"
    kind = "cmdline"
    phase = Phase.REBOOT

    def request(self, spec: CmdlineSpec) -> Request:
        return fmt.request()

    def compare(self, spec: CmdlineSpec, files: Files) -> Outcome:
        outcome = Outcome()
        running = fmt.parameters(files.value(fmt.PROC_CMDLINE)) or {}
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
        configured = fmt.parameters(boot.cmdline) if boot else running
        configured = configured or {}
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
            if boot and next_boot != desired and now == desired:
                outcome.notes.append(
                    Note(
                        f"{name} is on the running kernel but not in the {boot.tool} "
                        "configuration: the next boot would lose it.",
                        f"cmdline:{name}",
                    )
                )
        return outcome


HOW = {
    "grub": "GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub (or a grub.d drop-in), then "
    "update-grub and reboot",
    "proxmox-boot-tool": "/etc/kernel/cmdline, then proxmox-boot-tool refresh and reboot",
    "kernel-cmdline": "/etc/kernel/cmdline, then kernel-install (or bootctl) and reboot",
}


def _fix(name: str, desired: str | None, boot: fmt.BootConfig | None) -> str:
    word = name if not desired else f"{name}={desired}"
    where = HOW[boot.tool] if boot else "the boot loader's kernel command line, then reboot"
    return f"{'remove' if desired is None else 'add'} {word} in {where}"


KIND = Cmdline()
