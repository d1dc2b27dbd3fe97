"""NVIDIA GPU state through nvidia-smi: persistence, power limit, compute mode, clocks (and ECC).

```yaml
gpus:
  all:                        # every GPU nvidia-smi lists
    persistence: true
    power_limit: 600          # watts, within the GPU's power.min_limit..power.max_limit
    compute_mode: DEFAULT     # DEFAULT | EXCLUSIVE_PROCESS | PROHIBITED
    application_clocks: {memory: 877, graphics: 1530}   # MHz, a pair the GPU lists
    ecc: true                 # reboot phase (the `ecc` kind): takes effect at the next boot
    priority: P1
    reason: "no 1-3 s driver initialisation per GPU and per process"
  "00000000:17:00.0":         # one GPU by its PCI bus id: its settings win over `all`'s
    power_limit: 450
```
Read with one `nvidia-smi --query-gpu=... --format=csv` in the observation; set with
`nvidia-smi -i BUSID -pm|-pl|-c`, each read back with the same query; `ecc` is the reboot-phase
kind `ecc` (`reconciler.kinds.ecc`). Application clocks are read with a query of their own
(`clocks.applications.*`), set with `-ac MEMORY,GRAPHICS` and restored with `-rac` where they
were the defaults (`clocks.default_applications.*`); drivers since 590 answer them
`[Requested functionality has been deprecated]`, a note per entry. Locked clocks (`-lgc`,
`-lmc`) are not a setting: no query field or NVML getter reads them back. NVML does not keep these
across a reboot: tune's `nvidia-persistenced` drop-in starts the daemon with
`--persistence-mode` (as NVIDIA's Ansible role overrides its ExecStart) and pulls in
`tune-gpus.service`, a oneshot ordered after it that sets the rest again at boot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple

from ..core.changes import Change, Note, Outcome, Phase
from ..core.errors import HostError
from ..core.files import Files, Request
from ..core.schema import Before, Constrain, invalid
from ..facts import nvidia_smi
from ..facts.nvidia_smi import Gpu, Reading
from ..steps.ops import Command, Need, Probe, Read, Require, Step
from ..steps.persist import GPU_UNIT, PERSISTENCED_DROPIN, Persisted
from .base import Kind, Meta, Strict, missing_note, safe

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


MegaHertz = Annotated[int, Constrain(gt=0)]


@dataclass(frozen=True, kw_only=True)
class ApplicationClocks(Strict):
    """The clocks `nvidia-smi -ac MEMORY,GRAPHICS` sets, in MHz."""

    memory: MegaHertz
    graphics: MegaHertz


@dataclass(frozen=True, kw_only=True)
class GpuEntry(Meta):
    persistence: bool | None = None
    power_limit: int | None = None
    compute_mode: ComputeMode | None = None
    ecc: bool | None = None
    application_clocks: ApplicationClocks | None = None


# Locked clocks (`nvidia-smi -lgc`/`-lmc`) have no reading: NVIDIA's list of query fields
# (`nvidia-smi --help-query-gpu`) names none, and NVML has setters and resetters but no getter.
LOCKED_CLOCKS = (
    "locked_clocks is not a setting tune manages: neither nvidia-smi's query nor NVML can read "
    "locked clocks back, and tune never writes what it cannot read back; lock them with "
    "nvidia-smi -lgc/-lmc outside tune, or use application_clocks where the driver has them"
)


def _no_locked_clocks(data: Any) -> Any:
    """A GPU entry as written, refused with why when it asks for locked clocks."""
    if isinstance(data, dict) and "locked_clocks" in data:
        raise invalid("not_a_knob", LOCKED_CLOCKS)
    return data


GpuEntryAsWritten = Annotated[GpuEntry, Before(_no_locked_clocks, accepts=GpuEntry)]
GpusSpec = dict[GpuKey, GpuEntryAsWritten]  # type: ignore[valid-type]


def _enabled(on: bool) -> str:
    return "Enabled" if on else "Disabled"


def _switch(value: str) -> str:
    return "1" if value == "Enabled" else "0"


class GpuSetting(NamedTuple):
    """One setting: the query field it reads, the nvidia-smi option that writes it, the value
    the query prints for the profile's, and the option's argument for a printed value; the
    reading of the query that holds the field; the option that restores the defaults, and the
    field that holds them, where undoing to the defaults must use it."""

    name: str
    field: str
    option: str
    desired: Callable[[GpuEntry], str | None]
    argument: Callable[[str], str]
    read: Callable[[Files], Reading] = nvidia_smi.reading
    reset: str = ""
    default: str = ""


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
    # `-ac` takes only a pair the GPU lists (`nvidia-smi -q -d SUPPORTED_CLOCKS`); `-rac`, not
    # `-ac` with the default pair, gives the driver back its own choice.
    GpuSetting(
        "application_clocks",
        nvidia_smi.APPLICATION_CLOCKS,
        "-ac",
        lambda e: (
            None
            if e.application_clocks is None
            else f"{e.application_clocks.memory},{e.application_clocks.graphics}"
        ),
        str,
        nvidia_smi.clocks_reading,
        "-rac",
        nvidia_smi.DEFAULT_APPLICATION_CLOCKS,
    ),
)
BY_NAME = {s.name: s for s in SETTINGS}
# A change of ECC mode shows in ecc.mode.pending at once and takes effect at the next boot: the
# reboot-phase kind `ecc` owns it.
ECC = GpuSetting(
    "ecc",
    nvidia_smi.ECC_PENDING,
    "-e",
    lambda e: None if e.ecc is None else _enabled(e.ecc),
    _switch,
)


def wanted(
    spec: dict[str, GpuEntry], gpu: Gpu, settings: tuple[GpuSetting, ...] = SETTINGS
) -> list[tuple[GpuSetting, str, GpuEntry]]:
    """Each of `settings` the profile gives `gpu`, with its value and entry: the GPU's own
    entry's settings win over `all`'s."""
    own = next((e for k, e in spec.items() if nvidia_smi.bus_id(k) == gpu.bus_id), None)
    found = []
    for setting in settings:
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
    reads = (
        "`nvidia-smi --query-gpu=pci.bus_id,persistence_mode,power.*,compute_mode,ecc.mode.*`; "
        "for application clocks `--query-gpu=pci.bus_id,clocks.applications.*,"
        "clocks.default_applications.*`"
    )
    compared = (
        "per PCI bus id; watts as numbers (`600.00 W` is `600`); application clocks as "
        "`MEMORY,GRAPHICS` in MHz; a bracketed value (`[N/A]`) is a setting the GPU lacks, "
        "application clocks a driver deprecated a note per entry; `ecc` is the `ecc` kind's"
    )
    noun = "GPUs"

    def request(self, spec: dict[str, GpuEntry]) -> Request:
        clocks = any(e.application_clocks is not None for e in spec.values())
        return Request.of(
            commands=[nvidia_smi.QUERY, *([nvidia_smi.CLOCKS_QUERY] if clocks else [])]
        )

    def compare(self, spec: dict[str, GpuEntry], files: Files) -> Outcome:
        outcome = Outcome()
        read = files.view(nvidia_smi.reading)
        for key, item in spec.items():
            if not names_a_gpu(key, read):
                why = read.problem or f"nvidia-smi lists no GPU with the bus id {key}."
                for setting in SETTINGS:
                    desired = setting.desired(item)
                    if desired is not None:
                        change = self._change(key, setting, None, desired, item, missing=True)
                        outcome.changes.append(change)
                outcome.notes.append(Note(missing_note(why, item), f"gpu:{key}"))
        deprecated: dict[str, GpuEntry] = {}
        for gpu in read.gpus:
            for setting, desired, item in wanted(spec, gpu):
                answer = answered(files, setting, gpu.bus_id)
                current = None if answer is None else nvidia_smi.value(answer, setting.field)
                outcome.changes.append(
                    self._change(gpu.bus_id, setting, current, desired, item, current is None)
                )
                if current is not None:
                    continue
                if answer is not None and _deprecated(answer, setting):
                    deprecated.update((k, e) for k, e in spec.items() if e is item)
                else:
                    problem = files.view(setting.read).problem
                    outcome.notes.append(lacks(gpu, setting, item, problem))
        for key, item in deprecated.items():
            outcome.notes.append(Note(missing_note(DEPRECATED, item), f"gpu:{key}"))
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
        return setting_step(change, bus, BY_NAME[name], files)

    def read_back_words(self, step: Step) -> tuple[str, str]:
        return read_back_words(step)

    def persist(self, spec: dict[str, GpuEntry], files: Files) -> list[Persisted]:
        every = spec.get(ALL)
        # nvidia-persistenced sets the mode of every GPU: per-GPU modes go in the oneshot.
        daemon = None if every is None else every.persistence
        # Not a setting the GPU lacks: a failing ExecStart would stop the lines after it.
        commands = [
            f"ExecStart={NVIDIA_SMI_PATH} -i {gpu.bus_id} {s.option} {s.argument(value)}"
            for gpu in files.view(nvidia_smi.reading).gpus
            for s, value, _ in wanted(spec, gpu)
            if not (s.name == "persistence" and daemon is not None)
            and _readable(files, s, gpu.bus_id)
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


def setting_step(change: Change, bus: str, setting: GpuSetting, files: Files) -> Step:
    """`nvidia-smi -i BUS OPTION VALUE` for `change`, read back with the query; undone with the
    value the query printed before (with `setting.reset` where that was the default)."""
    gpu = answered(files, setting, bus)
    if gpu is None or not isinstance(change.current, str):
        raise HostError(f"{change.id} cannot be set: nvidia-smi does not report it here.")
    desired = str(change.desired)
    if setting.name == "power_limit":
        _within_limits(change.id, gpu, float(desired))

    def run(*option: str) -> Command:
        return Command((nvidia_smi.NVIDIA_SMI, "-i", bus, *option))

    prior = change.current
    defaults = setting.reset and nvidia_smi.value(gpu, setting.default) == prior
    return Step.of(
        change,
        probe=Probe(bus, Read.GPU, setting.field),
        expect=desired,
        restored=prior,
        do=(run(setting.option, setting.argument(desired)),),
        undo=(run(setting.reset) if defaults else run(setting.option, setting.argument(prior)),),
        requires=(Require(Need.COMMAND, nvidia_smi.NVIDIA_SMI),),
    )


def answered(files: Files, setting: GpuSetting, bus: str) -> Gpu | None:
    """The GPU `bus` in the answer of the query that reads `setting`."""
    return next((g for g in files.view(setting.read).gpus if g.bus_id == bus), None)


def _readable(files: Files, setting: GpuSetting, bus: str) -> bool:
    answer = answered(files, setting, bus)
    return answer is not None and nvidia_smi.value(answer, setting.field) is not None


DEPRECATED = (
    "Application clocks are deprecated by this driver (nvidia-smi answers "
    f"{nvidia_smi.DEPRECATED} for {nvidia_smi.APP_MEMORY}); use locked clocks "
    "(`nvidia-smi -lgc`/`-lmc`), which tune leaves to you: it cannot read them back."
)


def _deprecated(gpu: Gpu, setting: GpuSetting) -> bool:
    """Whether the driver answers that it no longer has `setting` on `gpu`."""
    fields = nvidia_smi.PAIRS.get(setting.field, (setting.field,))
    return any(gpu.bracketed.get(f) == nvidia_smi.DEPRECATED for f in fields)


def read_back_words(step: Step) -> tuple[str, str]:
    """How a GPU setting that did not read back is said (`Kind.read_back_words`)."""
    return (
        f"{step.id}: nvidia-smi took {step.expect} but its query reports ",
        f" for {step.probe.arg} of GPU {step.probe.path} (the GPU or its driver keeps its own)",
    )


def lacks(gpu: Gpu, setting: GpuSetting, item: GpuEntry, problem: str | None = None) -> Note:
    """The note for a setting the query reports as not available on `gpu`, or (`problem`, a
    sentence) that the query reading it did not answer."""
    said = (
        f"GPU {gpu.bus_id}'s {setting.name} cannot be read: {problem}"
        if problem
        else f"GPU {gpu.bus_id} has no {setting.name} setting "
        f"(nvidia-smi reports {setting.field} as not available)."
    )
    return Note(missing_note(said, item), f"gpu:{gpu.bus_id}")


def names_a_gpu(key: str, read: Reading) -> bool:
    """Whether an entry's key names a GPU nvidia-smi listed (`all`: any GPU)."""
    return any(key == ALL or g.bus_id == nvidia_smi.bus_id(key) for g in read.gpus)


def _within_limits(change_id: str, gpu: Gpu, watts: float) -> None:
    # A range the GPU does not print as numbers is no range to check: nvidia-smi -pl has the
    # last word on it.
    low, high = (
        nvidia_smi.watts_number(gpu.get(f)) for f in (nvidia_smi.POWER_MIN, nvidia_smi.POWER_MAX)
    )
    if low is None or high is None:
        return
    if not low <= watts <= high:
        raise HostError(
            f"{change_id} cannot be set: {watts:g} W is outside GPU {gpu.bus_id}'s power limits "
            f"({low:g} to {high:g} W)."
        )


KIND = Gpus()
