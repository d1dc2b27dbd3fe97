"""Audit rules: CPU: idle states, frequency driver and governor."""

from __future__ import annotations

from ...facts import cpu, numbers
from ...facts.cmdline import PROC_CMDLINE
from ..facts import Facts
from ..model import Area, Fix, Good, NotIssue, Problem, Verdict
from ..thresholds import Thresholds
from .base import P0, P1, count, cpus, rule

IDLE_LIMITS = ("processor.max_cstate", "intel_idle.max_cstate", "idle")


@rule("cstates-deep", Area.CPU, cpu.STATE_NAME, cpu.STATE_DISABLE, cpu.STATE_LATENCY)
def cstates_deep(facts: Facts, limits: Thresholds) -> list[Verdict]:
    running = facts.running_cmdline
    limit = [f"{k}={running[k]}" if running[k] else k for k in IDLE_LIMITS if k in running]
    files = facts.files
    enabled: dict[tuple[str, str, int], list[str]] = {}  # (name, stateN, latency) -> CPUs
    for cpu_name, states in cpu.idle_states(files).items():
        for name, directory in states.items():
            latency = numbers.unsigned((files.value(directory + "/latency") or "").strip())
            flag = (files.value(directory + "/disable") or "").strip()
            if latency is not None and latency > limits.deep_cstate_latency_us and flag == "0":
                key = (name, directory.rsplit("/", 1)[1], latency)
                enabled.setdefault(key, []).append(cpu_name)
    if limit:
        return [
            Good(
                f"idle states limited on the command line ({' '.join(limit)})",
                (f"{PROC_CMDLINE}: {files.value(PROC_CMDLINE)}",),
            )
        ]
    if not enabled:
        return [
            Good(
                f"no idle state with exit latency above {limits.deep_cstate_latency_us} us "
                "is enabled",
                (f"{cpu.STATE_LATENCY}, {cpu.STATE_DISABLE}",),
            )
        ]
    evidence = (
        *(
            f"{cpu.CPUS}/cpu*/cpuidle/{state}/{{name,latency,disable}}: {name}, {latency}, 0 "
            f"on {cpus(names)}"
            for (name, state, latency), names in sorted(enabled.items())
        ),
        f"{PROC_CMDLINE}: {files.value(PROC_CMDLINE)}",
    )
    names = sorted({name for name, _, _ in enabled})
    return [
        Problem(
            P0,
            "; ".join(
                f"{name} (exit latency {latency} us) enabled on {count(len(c), 'CPU')}"
                for (name, _, latency), c in sorted(enabled.items())
            )
            + "; no processor.max_cstate or idle= on the command line",
            evidence,
            "waking from a deep idle state takes hundreds of microseconds; the CPU threads that "
            "launch kernels and move tokens pay it between every step",
            (Fix("cpu", ("idle_states",), {"disable": names}),),
        )
    ]


PSTATE_DRIVERS = {
    # CPU flag -> (kernel parameter, value, what to enable in the BIOS if it is ignored)
    "cppc": ("amd_pstate", "active", "CPPC (AMD CBS > NBIO > SMU > CPPC)"),
    "hwp": ("intel_pstate", "active", "HWP (Intel Speed Shift)"),
}


@rule("cpufreq-driver", Area.CPU, cpu.SCALING_DRIVER, cpu.CPUINFO)
def cpufreq_driver(facts: Facts, limits: Thresholds) -> list[Verdict]:
    drivers = facts.per_cpu(cpu.SCALING_DRIVER)
    if not drivers:
        return []
    found = sorted(set(drivers.values()))
    evidence = (f"{cpu.SCALING_DRIVER}: {', '.join(found)} on {cpus(drivers)}",)
    if "acpi-cpufreq" not in found:
        return [Good(f"cpufreq driver {', '.join(found)}", evidence)]
    flag = next((f for f in PSTATE_DRIVERS if f in facts.cpu.flags), None)
    if flag is None:
        return [
            NotIssue(
                "cpufreq driver acpi-cpufreq",
                (*evidence, f"{cpu.CPUINFO}: flags without cppc or hwp"),
                "the CPU has neither CPPC nor HWP, so acpi-cpufreq is the only driver it can use",
            )
        ]
    param, value, bios = PSTATE_DRIVERS[flag]
    return [
        Problem(
            P1,
            f"cpufreq driver acpi-cpufreq on a CPU with {flag} ({facts.cpu.model})",
            (*evidence, f"{cpu.CPUINFO}: flags include {flag}"),
            f"acpi-cpufreq only knows the few P-states the ACPI tables list; {param} drives "
            "the CPU's own performance control with finer steps and faster ramps",
            (Fix("cmdline", ("set", param), value),),
            remedy=f"{param}={value} is on the command line and ignored: enable {bios} in the BIOS",
        )
    ]


@rule("cpufreq-governor", Area.CPU, cpu.GOVERNOR)
def cpufreq_governor(facts: Facts, limits: Thresholds) -> list[Verdict]:
    governors = facts.per_cpu(cpu.GOVERNOR)
    if not governors:
        return []
    others: dict[str, list[str]] = {}
    for cpu_name, governor in governors.items():
        if governor != "performance":
            others.setdefault(governor, []).append(cpu_name)
    if not others:
        return [
            Good(
                f"governor performance on {count(len(governors), 'CPU')}",
                (f"{cpu.GOVERNOR}: performance on {cpus(governors)}",),
            )
        ]
    return [
        Problem(
            P1,
            "; ".join(f"governor {g} on {count(len(c), 'CPU')}" for g, c in sorted(others.items())),
            tuple(f"{cpu.GOVERNOR}: {g} on {cpus(c)}" for g, c in sorted(others.items())),
            "demand-based governors raise the frequency after the load arrives; kernel launches "
            "and tokenizer threads run in the ramp",
            (Fix("cpu", ("governor",), "performance"),),
        )
    ]
