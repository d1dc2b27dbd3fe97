"""NVIDIA GPU ECC mode: set for the next boot with nvidia-smi, then verified.

```yaml
gpus:
  all:
    ecc: false                # what the GPU runs with after the next boot
    priority: P2
    reason: "the memory ECC keeps for its check bits, for models that need every GiB"
```
Not a section of its own: the `ecc` setting of `gpus` entries. `nvidia-smi -i BUSID -e 0|1`
changes `ecc.mode.pending` at once; the GPU takes it (`ecc.mode.current`) at the next boot, so
a change is reboot phase (`tune apply --reboot-phase`, never `--runtime-only`). Compared with
what the next boot brings: pending, read back after the write and restored by `tune rollback`;
pending as asked but not yet current is *pending* a reboot, and `tune verify` checks
`ecc.mode.current` after it. The GPU keeps the mode in its InfoROM, so no boot-time file of
tune's repeats it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.changes import Change, Outcome, Pending, Phase
from ..core.files import Files, Request
from ..facts import nvidia_smi
from ..steps.ops import Step
from .base import BootCheck, Kind
from .gpus import ECC, GpuEntry, lacks, names_a_gpu, read_back_words, setting_step, wanted


class Ecc(Kind[dict[str, GpuEntry]]):
    section = ""
    parent_section = "gpus"
    spec_type = None
    kind = "ecc"
    phase = Phase.REBOOT
    reads = "`nvidia-smi --query-gpu=pci.bus_id,ecc.mode.current,ecc.mode.pending`"
    compared = (
        "the `ecc` of `gpus` entries, per PCI bus id: what the next boot brings "
        "(`ecc.mode.pending`); pending but not current is *pending*"
    )
    noun = "GPUs"

    def spec_of(self, profile: Any) -> dict[str, GpuEntry] | None:
        gpus: dict[str, GpuEntry] = profile.gpus or {}
        return gpus if any(e.ecc is not None for e in gpus.values()) else None

    def request(self, spec: dict[str, GpuEntry]) -> Request:
        return Request.of(commands=[nvidia_smi.QUERY])

    def compare(self, spec: dict[str, GpuEntry], files: Files) -> Outcome:
        outcome = Outcome()
        read = files.view(nvidia_smi.reading)
        # An entry that names no GPU: `gpus` says so in its note, once per entry.
        for key, item in spec.items():
            desired = ECC.desired(item)
            if desired is not None and not names_a_gpu(key, read):
                outcome.changes.append(self._change(key, None, desired, item, missing=True))
        for gpu in read.gpus:
            for _, desired, item in wanted(spec, gpu, (ECC,)):
                now, then = gpu.get(nvidia_smi.ECC_CURRENT), gpu.get(nvidia_smi.ECC_PENDING)
                if then is None:
                    outcome.notes.append(lacks(gpu, ECC, item))
                    outcome.changes.append(
                        self._change(gpu.bus_id, None, desired, item, missing=True)
                    )
                elif then == desired and now != desired:
                    outcome.pending.append(Pending(self.kind, gpu.bus_id, now, then))
                else:
                    outcome.changes.append(self._change(gpu.bus_id, then, desired, item))
        return outcome

    def _change(
        self, subject: str, current: str | None, desired: str, item: GpuEntry, missing: bool = False
    ) -> Change:
        return self.change(
            subject,
            current,
            desired,
            item,
            setting="mode",
            subject=subject,
            fix=f"nvidia-smi -i {subject} {ECC.option} {ECC.argument(desired)}, then reboot",
            missing=missing,
        )

    def step(self, spec: dict[str, GpuEntry], change: Change, files: Files) -> Step:
        return setting_step(change, change.target, ECC, files)

    def read_back_words(self, step: Step) -> tuple[str, str]:
        return read_back_words(step)

    # Per GPU (its PCI bus id as nvidia-smi prints it), the mode `ecc.mode.current` must read.
    pending_field = "ecc"

    def after_boot(self, step: Step) -> dict[str, Any]:
        return {step.target: step.desired} if isinstance(step.desired, str) else {}

    def after_boot_request(self, expected: Mapping[str, Any]) -> Request:
        return Request.of(commands=[nvidia_smi.QUERY])

    def verify_after_boot(self, expected: Mapping[str, Any], files: Files) -> BootCheck:
        """Each GPU runs with the ECC mode the boot was to bring."""
        read = files.view(nvidia_smi.reading)
        current = nvidia_smi.ECC_CURRENT
        if read.problem is not None:
            return BootCheck(failed=[f"ECC cannot be read: {read.problem}"])
        gpus = {gpu.bus_id: gpu for gpu in read.gpus}
        done = BootCheck()
        for bus, mode in expected.items():
            gpu = gpus.get(bus)
            got = None if gpu is None else gpu.get(current)
            if got == mode:
                done.held.append(f"GPU {bus} has {current}: {mode}")
            elif gpu is None:
                done.failed.append(f"nvidia-smi lists no GPU {bus} (its ECC was to be {mode})")
            else:
                now = "not available" if got is None else got
                done.failed.append(f"GPU {bus} has {current}: {now}, not {mode}")
        return done


KIND = Ecc()
