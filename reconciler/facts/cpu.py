"""The CPUs as the kernel shows them: cpufreq's driver and governor and the cpuidle states of
each online CPU under /sys/devices/system/cpu, and the model and flags in /proc/cpuinfo."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import NamedTuple

from ..core.files import Files

CPUS = "/sys/devices/system/cpu"
GOVERNOR = CPUS + "/cpu[0-9]*/cpufreq/scaling_governor"
SCALING_DRIVER = CPUS + "/cpu[0-9]*/cpufreq/scaling_driver"
STATE_NAME = CPUS + "/cpu[0-9]*/cpuidle/state[0-9]*/name"
STATE_DISABLE = CPUS + "/cpu[0-9]*/cpuidle/state[0-9]*/disable"
STATE_LATENCY = CPUS + "/cpu[0-9]*/cpuidle/state[0-9]*/latency"
CPUINFO = "/proc/cpuinfo"

_CPU = re.compile(r"/cpu(\d+)/")
_NUMBERS = re.compile(r"\d+")


def cpu_of(path: str) -> str:
    match = _CPU.search(path)
    return f"cpu{match.group(1)}" if match else path


def by_cpu(paths: tuple[str, ...]) -> list[str]:
    return sorted(paths, key=_numbers)


def _numbers(path: str) -> tuple[int, ...]:
    return tuple(map(int, _NUMBERS.findall(path)))


_STATE = re.compile(r"/cpu(\d+)/cpuidle/state(\d+)/name$")


def idle_states(files: Files) -> dict[str, dict[str, str]]:
    """cpu -> state name -> its `stateN` directory, CPUs and states in numeric order (built
    once per answer; do not change it)."""
    return files.view(_idle_states)


def _idle_states(files: Files) -> dict[str, dict[str, str]]:
    # One match per path: a dual-socket host has a few thousand of them.
    found = []
    for path in files.glob(STATE_NAME):
        match = _STATE.search(path)
        if match:
            found.append((int(match[1]), int(match[2]), path))
    states: dict[str, dict[str, str]] = defaultdict(dict)
    for cpu, _, path in sorted(found):
        name = files.value(path)
        if name:
            states[f"cpu{cpu}"][name.strip()] = path[: -len("/name")]
    return dict(states)  # shared: reading a missing CPU must not add it


def per_cpu(files: Files, pattern: str) -> dict[str, str]:
    """cpuN -> value of a per-CPU file, in CPU order."""
    return {cpu_of(path): (files.value(path) or "").strip() for path in by_cpu(files.glob(pattern))}


class CpuInfo(NamedTuple):
    model: str | None
    sockets: int | None
    cpus: int
    flags: frozenset[str]


def cpu_info(text: str | None) -> CpuInfo:
    """Model and flags of the first CPU, sockets as distinct `physical id`s, from /proc/cpuinfo."""
    model: str | None = None
    flags: frozenset[str] = frozenset()
    sockets: set[str] = set()
    cpus = 0
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor":
            cpus += 1
        elif key == "physical id":
            sockets.add(value)
        elif key == "model name" and model is None:
            model = value
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return CpuInfo(model, len(sockets) or None, cpus, flags)


def arm64(text: str | None) -> bool:
    """Whether /proc/cpuinfo is an arm64 kernel's: it names each CPU's `CPU implementer` (0x41
    for Arm's Neoverse cores in NVIDIA Grace), where x86 prints `vendor_id`."""
    return any(line.startswith("CPU implementer") for line in (text or "").splitlines())
