"""CPU frequency governor and idle states, on every online CPU.

```yaml
cpu:
  governor: {value: performance, priority: P1, reason: "no ramp-up latency between kernels"}
  idle_states: {disable: [C2], priority: P0, reason: "C2 exit latency stalls the launch path"}
```
Idle states are named as in `cpuidle/stateN/name`. A state a CPU does not expose (C2 while
`processor.max_cstate=1` runs) is in sync: it cannot be entered. A host without cpufreq (most
VMs) has no governor: like any knob a host lacks, it is skipped with a note unless the entry
says `required: true`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.changes import Change, Note, Outcome, Phase
from ..core.files import Files, Request
from ..facts import services
from ..facts.cpu import CPUS, GOVERNOR, STATE_DISABLE, STATE_NAME, by_cpu, cpu_of, idle_states
from ..steps.ops import Read, Step
from ..steps.persist import Persisted, tmpfiles_write
from .base import Entry, Kind, Meta, Strict, attribute_step, entry, missing_note, safe

IDLE_FLAG = {"disabled": "1", "enabled": "0"}

Governor = safe(r"[a-z_]+", "cpufreq governor", "performance")
StateName = safe(r"[A-Za-z0-9_-]+", "cpuidle state name", "C2")


@dataclass(frozen=True, kw_only=True)
class IdleStates(Meta):
    disable: list[StateName] = field(default_factory=list)  # type: ignore[valid-type]
    enable: list[StateName] = field(default_factory=list)  # type: ignore[valid-type]


@dataclass(frozen=True, kw_only=True)
class CpuSpec(Strict):
    governor: entry(Governor) | None = None  # type: ignore[valid-type]
    idle_states: IdleStates | None = None


class Cpu(Kind[CpuSpec]):
    section = "cpu"
    spec_type = CpuSpec
    kind = "cpu"
    phase = Phase.RUNTIME
    reads = "`cpu*/cpufreq/scaling_governor`, `cpu*/cpuidle/state*/{name,disable}`"
    compared = "per CPU; a state the CPU does not expose is in sync"
    noun = "CPUs"

    def request(self, spec: CpuSpec) -> Request:
        patterns = []
        if spec.governor is not None:
            patterns.append(GOVERNOR)
        if spec.idle_states is not None:
            patterns += [STATE_NAME, STATE_DISABLE]
        daemons = services.request() if spec.governor is not None else Request()
        return Request.of(*patterns) | daemons

    def compare(self, spec: CpuSpec, files: Files) -> Outcome:
        outcome = Outcome()
        if spec.governor is not None:
            self._governor(spec.governor, files, outcome)
        if spec.idle_states is not None:
            self._idle(spec.idle_states, files, outcome)
        return outcome

    def _change(
        self,
        subject: str,
        setting: str,
        current: str | None,
        desired: str,
        meta: Meta,
        fix: str,
        missing: bool = False,
    ) -> Change:
        return self.change(
            f"{subject}:{setting}",
            current,
            desired,
            meta,
            setting=setting,
            subject=subject,
            fix=fix,
            missing=missing,
        )

    def _governor(self, governor: Entry[str], files: Files, outcome: Outcome) -> None:
        paths = by_cpu(files.glob(GOVERNOR))
        outcome.notes.extend(
            Note(d.note("the CPU frequency governor"), "cpu:governor")
            for d in services.managers(files)
            if d.sets_path(GOVERNOR)
        )
        fix = f"echo {governor.value} | tee {GOVERNOR.replace('[0-9]', '')}"
        for path in paths:
            outcome.changes.append(
                self._change(
                    cpu_of(path), "governor", files.value(path), governor.value, governor, fix
                )
            )
        if not paths:
            # Most VMs: the hypervisor keeps frequency scaling, and no cpufreq driver binds.
            outcome.changes.append(
                self._change("cpu*", "governor", None, governor.value, governor, fix, missing=True)
            )
            said = "No CPU exposes cpufreq/scaling_governor (no cpufreq driver, as in most VMs)."
            outcome.notes.append(Note(missing_note(said, governor), "cpu:governor"))

    def _idle(self, spec: IdleStates, files: Files, outcome: Outcome) -> None:
        states = idle_states(files)
        if not states:
            outcome.notes.append(Note("No CPU exposes cpuidle states.", "cpu:idle"))
        wanted = [(n, "disabled") for n in spec.disable] + [(n, "enabled") for n in spec.enable]
        for name, desired in wanted:
            missing = 0
            for cpu, dirs in states.items():
                if name not in dirs:
                    missing += 1
                    if spec.required:
                        # Nothing to write to: the change that apply refuses.
                        outcome.changes.append(
                            self._change(cpu, f"idle:{name}", None, desired, spec, "")
                        )
                    continue
                flag = files.value(dirs[name] + "/disable")
                current = (
                    None if flag is None else ("disabled" if flag.strip() == "1" else "enabled")
                )
                state = dirs[name].rsplit("/", 1)[1]
                fix = f"echo {int(desired == 'disabled')} | tee {CPUS}/cpu*/cpuidle/{state}/disable"
                outcome.changes.append(
                    self._change(cpu, f"idle:{name}", current, desired, spec, fix)
                )
            if missing and desired == "disabled" and not spec.required:
                outcome.notes.append(
                    Note(
                        f"{name} is not exposed on {missing} CPUs: in sync, it cannot be entered.",
                        f"cpu:idle:{name}",
                    )
                )
            elif missing:
                said = f"{name} is not exposed on {missing} CPUs."
                outcome.notes.append(Note(missing_note(said, spec), f"cpu:idle:{name}"))
        return None

    def step(self, spec: CpuSpec, change: Change, files: Files) -> Step:
        cpu, _, setting = change.target.partition(":")
        if setting == "governor":
            path = f"{CPUS}/{cpu}/cpufreq/scaling_governor"
            return attribute_step(change, path, files, Read.WORDS)
        name = setting.removeprefix("idle:")
        state = idle_states(files).get(cpu, {}).get(name, f"{CPUS}/{cpu}/cpuidle/{name}")
        return attribute_step(
            change, state + "/disable", files, Read.WORDS, lambda v: IDLE_FLAG.get(v, v)
        )

    def persist(self, spec: CpuSpec, files: Files) -> list[Persisted]:
        lines = []
        if spec.governor is not None:
            path = f"{CPUS}/cpu*/cpufreq/scaling_governor"
            # No cpufreq at all (a VM): the change `_governor` makes of every CPU is missing.
            lines.append(tmpfiles_write(path, str(spec.governor.value), "cpu:cpu*:governor"))
        if spec.idle_states is not None:
            states = idle_states(files)
            wanted = [(n, "1") for n in spec.idle_states.disable]
            wanted += [(n, "0") for n in spec.idle_states.enable]
            for name, flag in wanted:
                dirs = [d[name] for d in states.values() if name in d]
                # One glob when every CPU numbers the state alike; per CPU otherwise.
                shared = {d.rsplit("/", 1)[1] for d in dirs}
                if len(shared) == 1:
                    dirs = [f"{CPUS}/cpu*/cpuidle/{shared.pop()}"]
                lines += [tmpfiles_write(f"{d}/disable", flag) for d in dirs]
        return lines


KIND = Cpu()
