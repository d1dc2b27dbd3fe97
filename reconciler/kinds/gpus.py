"""NVIDIA GPU state through nvidia-smi: persistence mode, power limit, compute mode, ECC.

```yaml
gpus:
  all:                        # every GPU nvidia-smi lists
    persistence: true
    power_limit: 600          # watts, within the GPU's power.min_limit..power.max_limit
    compute_mode: DEFAULT     # DEFAULT | EXCLUSIVE_PROCESS | PROHIBITED
    ecc: true                 # applies at the next reboot: compared with ecc.mode.pending
    priority: P1
    reason: "no 1-3 s driver initialisation per GPU and per process"
  "00000000:17:00.0":         # one GPU by its PCI bus id: its settings win over `all`'s
    power_limit: 450
```
Read with one `nvidia-smi --query-gpu=... --format=csv` in the observation; set with
`nvidia-smi -i BUSID -pm|-pl|-c|-e`, each read back with the same query. NVML does not keep these
across a reboot: tune's `nvidia-persistenced` drop-in starts the daemon with
`--persistence-mode` (as NVIDIA's Ansible role overrides its ExecStart) and pulls in
`tune-gpus.service`, a oneshot ordered after it that sets the rest again at boot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..apply.persist import GPU_UNIT, PERSISTENCED_DROPIN, Persisted
from ..apply.steps import Command, Need, Probe, Read, Require, Step
from ..errors import HostError
from ..facts import nvidia_smi
from ..facts.nvidia_smi import Gpu, Reading
from ..hosts.files import Files, Request
from ..plan.model import Change, Note, Outcome, Phase
from .base import Kind, Meta, missing_note, safe

ALL = "all"
# `all`, or a PCI bus id in nvidia-smi's form or the kernel's (`0000:17:00.0`).
GpuKey = safe(
    r"all|[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]",
    "`all` or a PCI bus id",
    "00000000:17:00.0",
)
ComputeMode = Literal["DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED"]
# Where systemd finds nvidia-smi at boot: the driver packages install it here.
NVIDIA_SMI_PATH = "/usr/bin/nvidia-smi"
PERSISTENCED = "/usr/bin/nvidia-persistenced"


@dataclass(frozen=True, kw_only=True)
class GpuEntry(Meta):
    persistence: bool | None = None
    power_limit: int | None = None
    compute_mode: ComputeMode | None = None
    ecc: bool | None = None


GpusSpec = dict[GpuKey, GpuEntry]  # type: ignore[valid-type]


def _enabled(on: bool) -> str:
    return "Enabled" if on else "Disabled"


def _switch(value: str) -> str:
    return "1" if value == "Enabled" else "0"


@dataclass(frozen=True)
class GpuSetting:
    """One setting: the query field it reads, the nvidia-smi option that writes it, the value
    the query prints for the profile's, and the option's argument for a printed value."""

    name: str
    field: str
    option: str
    desired: Callable[[GpuEntry], str | None]
    argument: Callable[[str], str]


SETTINGS = (
    GpuSetting(
        "persistence",
        nvidia_smi.PERSISTENCE,
        "-pm",
        lambda e: None if e.persistence is None else _enabled(e.persistence),
        _switch,
    ),
    GpuSetting(
        "power_limit",
        nvidia_smi.POWER_LIMIT,
        "-pl",
        lambda e: None if e.power_limit is None else nvidia_smi.watts(str(e.power_limit)),
        str,
    ),
    GpuSetting(
        "compute_mode",
        nvidia_smi.COMPUTE_MODE,
        "-c",
        # The query prints `Exclusive_Process` for the mode `-c` calls EXCLUSIVE_PROCESS.
        lambda e: None if e.compute_mode is None else e.compute_mode.title(),
        str.upper,
    ),
    # A change of ECC mode shows in ecc.mode.pending at once and applies at the next boot.
    GpuSetting(
        "ecc",
        nvidia_smi.ECC_PENDING,
        "-e",
        lambda e: None if e.ecc is None else _enabled(e.ecc),
        _switch,
    ),
)
BY_NAME = {s.name: s for s in SETTINGS}


def wanted(spec: dict[str, GpuEntry], gpu: Gpu) -> list[tuple[GpuSetting, str, GpuEntry]]:
    """Each setting the profile gives `gpu`, with its value and entry: the GPU's own entry's
    settings win over `all`'s."""
    own = next((e for k, e in spec.items() if nvidia_smi.bus_id(k) == gpu.bus_id), None)
    found = []
    for setting in SETTINGS:
        for item in (own, spec.get(ALL)):
            value = None if item is None else setting.desired(item)
            if item is not None and value is not None:
                found.append((setting, value, item))
                break
    return found


class Gpus(Kind[dict[str, GpuEntry]]):
    section = "gpus"
    spec_type = GpusSpec
    kind = "gpu"
    phase = Phase.RUNTIME
    reads = "`nvidia-smi --query-gpu=pci.bus_id,persistence_mode,power.*,compute_mode,ecc.mode.*`"
    compared = (
        "per PCI bus id; watts as numbers (`600.00 W` is `600`); ECC by `ecc.mode.pending`, "
        "a bracketed value (`[N/A]`) is a setting the GPU lacks"
    )
    noun = "GPUs"

    def request(self, spec: dict[str, GpuEntry]) -> Request:
        return Request.of(commands=[nvidia_smi.QUERY])

    def compare(self, spec: dict[str, GpuEntry], files: Files) -> Outcome:
        outcome = Outcome()
        read = files.view(nvidia_smi.reading)
        for key, item in spec.items():
            if not _names_a_gpu(key, read):
                why = read.problem or f"nvidia-smi lists no GPU with the bus id {key}."
                for setting in SETTINGS:
                    desired = setting.desired(item)
                    if desired is not None:
                        change = self._change(key, setting, None, desired, item, missing=True)
                        outcome.changes.append(change)
                outcome.notes.append(Note(missing_note(why, item), f"gpu:{key}"))
        for gpu in read.gpus:
            for setting, desired, item in wanted(spec, gpu):
                current = nvidia_smi.value(gpu, setting.field)
                outcome.changes.append(
                    self._change(gpu.bus_id, setting, current, desired, item, current is None)
                )
                if current is None:
                    said = (
                        f"GPU {gpu.bus_id} has no {setting.name} setting "
                        f"(nvidia-smi reports {setting.field} as not available)."
                    )
                    outcome.notes.append(Note(missing_note(said, item), f"gpu:{gpu.bus_id}"))
                elif setting.name == "ecc" and gpu.get(nvidia_smi.ECC_CURRENT) != desired:
                    outcome.notes.append(
                        Note(
                            f"ECC on GPU {gpu.bus_id} is {gpu.get(nvidia_smi.ECC_CURRENT)} until "
                            f"the next reboot (ecc.mode.current); {desired} applies after it.",
                            f"gpu:{gpu.bus_id}",
                        )
                    )
        return outcome

    def _change(
        self,
        subject: str,
        setting: GpuSetting,
        current: str | None,
        desired: str,
        item: GpuEntry,
        missing: bool,
    ) -> Change:
        return self.change(
            f"{subject}:{setting.name}",
            current,
            desired,
            item,
            setting=setting.name,
            subject=subject,
            fix=f"nvidia-smi -i {subject} {setting.option} {setting.argument(desired)}",
            missing=missing,
        )

    def step(self, spec: dict[str, GpuEntry], change: Change, files: Files) -> Step:
        bus, name = change.target.rsplit(":", 1)
        setting = BY_NAME[name]
        gpu = next((g for g in files.view(nvidia_smi.reading).gpus if g.bus_id == bus), None)
        if gpu is None or not isinstance(change.current, str):
            raise HostError(f"{change.id} cannot be set: nvidia-smi does not report it here.")
        desired = str(change.desired)
        if setting.name == "power_limit":
            _within_limits(change.id, gpu, float(desired))

        def run(value: str) -> Command:
            return Command(("nvidia-smi", "-i", bus, setting.option, setting.argument(value)))

        return Step.of(
            change,
            probe=Probe(bus, Read.GPU, setting.field),
            expect=desired,
            restored=change.current,
            do=(run(desired),),
            undo=(run(change.current),),
            requires=(Require(Need.COMMAND, "nvidia-smi"),),
        )

    def read_back_words(self, step: Step) -> tuple[str, str]:
        return (
            f"{step.id}: nvidia-smi took {step.expect} but its query reports ",
            f" for {step.probe.arg} of GPU {step.probe.path} (the GPU or its driver keeps its own)",
        )

    def persist(self, spec: dict[str, GpuEntry], files: Files) -> list[Persisted]:
        every = spec.get(ALL)
        # nvidia-persistenced sets the mode of every GPU: per-GPU modes go in the oneshot.
        daemon = None if every is None else every.persistence
        commands = [
            f"ExecStart={NVIDIA_SMI_PATH} -i {gpu.bus_id} {s.option} {s.argument(value)}"
            for gpu in files.view(nvidia_smi.reading).gpus
            for s, value, _ in wanted(spec, gpu)
            if s.name != "ecc" and not (s.name == "persistence" and daemon is not None)
        ]
        dropin = []
        if daemon is not None:
            mode = "--persistence-mode" if daemon else "--no-persistence-mode"
            dropin += ["[Service]", "ExecStart=", f"ExecStart={PERSISTENCED} --verbose {mode}"]
        if commands:
            # Pulled in by the daemon's start, not enabled: no symlink for tune to own.
            dropin += ["[Unit]", f"Wants={GPU_UNIT.rsplit('/', 1)[1]}"]
        unit = [
            "[Unit]",
            "Description=GPU settings from tune (power limits, compute modes)",
            "After=nvidia-persistenced.service",
            "[Service]",
            "Type=oneshot",
            *commands,
        ]
        return [Persisted(PERSISTENCED_DROPIN, line) for line in dropin] + [
            Persisted(GPU_UNIT, line) for line in (unit if commands else [])
        ]


def _names_a_gpu(key: str, read: Reading) -> bool:
    """Whether an entry's key names a GPU nvidia-smi listed (`all`: any GPU)."""
    return any(key == ALL or g.bus_id == nvidia_smi.bus_id(key) for g in read.gpus)


def _within_limits(change_id: str, gpu: Gpu, watts: float) -> None:
    low, high = gpu.get(nvidia_smi.POWER_MIN), gpu.get(nvidia_smi.POWER_MAX)
    if low is None or high is None:
        return
    if not float(low) <= watts <= float(high):
        raise HostError(
            f"{change_id} cannot be set: {watts:g} W is outside GPU {gpu.bus_id}'s power limits "
            f"({float(low):g} to {float(high):g} W)."
        )


KIND = Gpus()
