"""What must hold after the boot that a reboot-phase apply prepared, and `tune verify`.

`tune apply` (reboot phase) records `/var/lib/tune/pending.json` on the target: the run, the
boot id before, the kernel command-line parameters the next boot must carry (null: must be
absent), per container config, the NVIDIA majors its allow lines grant, and the profile's
container configs with whether to restart them (`--restart-containers`). After the reboot,
`verify` compares those with `/proc/cmdline`, `/proc/devices`, `/proc/driver/nvidia/params` (the
NVIDIA driver's parameters the boot was to bring), each GPU's `ecc.mode.current` (nvidia-smi's
query) and the stored profile's runtime part; on any failure the boot configuration is rolled
back from the run's journal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..apply.pending import PendingBoot
from ..core.changes import JsonValue, Phase
from ..core.errors import HostError
from ..core.files import Request
from ..facts import cmdline as cmdline_fmt
from ..facts import lxc as lxc_fmt
from ..facts import nvidia_params, nvidia_smi
from ..facts.cmdline import PROC_CMDLINE
from ..facts.kernel import BOOT_ID
from ..facts.nvidia_params import PARAMS as NVIDIA_PARAMS
from ..hosts.base import Host, ReadableHost
from ..steps.state import PROFILE

if TYPE_CHECKING:
    from ..probes.phase import GateFailure
    from ..probes.runner import Executor


@dataclass
class BootVerdict:
    held: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _words(name: str, value: JsonValue) -> str:
    """A parameter's value, or each of its occurrences, as the command line writes it."""
    if value is None:
        return name
    values = value if isinstance(value, list) else [value]
    return " ".join(cmdline_fmt.word(name, v) for v in values)


def verify(host: ReadableHost, pending: PendingBoot) -> BootVerdict:
    """Compare the booted host with `pending`; pure reads."""
    configs = tuple(pending.majors)
    files = host.fetch(
        Request.of(
            PROC_CMDLINE,
            lxc_fmt.PROC_DEVICES,
            BOOT_ID,
            PROFILE,
            NVIDIA_PARAMS,
            *configs,
            commands=[nvidia_smi.QUERY] if pending.ecc else [],
        )
    )
    verdict = BootVerdict()
    boot_id = files.value(BOOT_ID)
    if pending.boot_id is not None and boot_id == pending.boot_id:
        raise HostError(
            f"{host.describe()} has not rebooted since run {pending.run_id} (same boot id); "
            "reboot it, then run tune verify."
        )
    running = cmdline_fmt.running(files)
    for name, value in pending.cmdline.items():
        every: JsonValue = list(running.every(name)) or None
        got = every if isinstance(value, list) else running.get(name)
        word = _words(name, value)
        if got == value:
            verdict.held.append(f"{PROC_CMDLINE} {'lacks' if value is None else 'has'} {word}")
        elif value is None:
            verdict.failed.append(f"{PROC_CMDLINE} still has {_words(name, every)}")
        else:
            now = "nothing" if got is None else _words(name, got)
            verdict.failed.append(f"{PROC_CMDLINE} has {now}, not {word}")
    nvidia = lxc_fmt.nvidia_majors(files.text(lxc_fmt.PROC_DEVICES) or "")
    for config, majors in pending.majors.items():
        if sorted(nvidia) == majors:
            verdict.held.append(f"{config} allows the NVIDIA majors {majors}")
            continue
        names = ", ".join(f"{name} is {major}" for major, name in sorted(nvidia.items()))
        verdict.failed.append(
            f"{config} allows majors {majors} but /proc/devices now says {names or 'no NVIDIA'}"
        )
    _driver_params(verdict, pending.nvidia_params, files.text(NVIDIA_PARAMS))
    if pending.ecc:
        _ecc(verdict, pending.ecc, files.view(nvidia_smi.reading))
    verdict.failed += _runtime_drift(host, files.text(PROFILE))
    return verdict


def _driver_params(verdict: BootVerdict, expected: Mapping[str, str], text: str | None) -> None:
    """Whether the booted driver uses the parameters the boot was to bring."""
    running = nvidia_params.parse(text)
    if expected and running is None:
        verdict.failed.append(f"{NVIDIA_PARAMS} does not exist: the nvidia driver is not loaded")
        return
    for name, value in expected.items():
        got = (running or {}).get(name)
        if got == value:
            verdict.held.append(f"{NVIDIA_PARAMS} has {name}: {value}")
        else:
            now = "nothing" if got is None else got
            verdict.failed.append(f"{NVIDIA_PARAMS} has {name}: {now}, not {value}")


def _ecc(verdict: BootVerdict, expected: Mapping[str, str], read: nvidia_smi.Reading) -> None:
    """Whether each GPU runs with the ECC mode the boot was to bring."""
    if read.problem is not None:
        verdict.failed.append(f"ECC cannot be read: {read.problem}")
        return
    gpus = {gpu.bus_id: gpu for gpu in read.gpus}
    for bus, mode in expected.items():
        gpu = gpus.get(bus)
        got = None if gpu is None else gpu.get(nvidia_smi.ECC_CURRENT)
        if got == mode:
            verdict.held.append(f"GPU {bus} has {nvidia_smi.ECC_CURRENT}: {mode}")
        elif gpu is None:
            verdict.failed.append(f"nvidia-smi lists no GPU {bus} (its ECC was to be {mode})")
        else:
            now = "not available" if got is None else got
            verdict.failed.append(f"GPU {bus} has {nvidia_smi.ECC_CURRENT}: {now}, not {mode}")


def probe_after_boot(
    host: Host,
    pending: PendingBoot,
    verdict: BootVerdict,
    execute: Executor,
    env: Mapping[str, str],
    keep_on_regression: bool,
) -> list[GateFailure]:
    """The probes the run measured before the boot, run again now and journaled in that run
    (`probes` when after-boot, a `gate` each), judged against the last measurement before the
    boot. A failed gate joins `verdict.failed` (the boot configuration is then rolled back)
    unless `keep_on_regression`; the failures are returned either way. Nothing runs when the
    boot checks failed already, or the run measured nothing (no probes, --no-probes)."""
    from ..apply.journal import Journal, read_run
    from ..probes.phase import PhaseProbes
    from ..probes.runner import ProbeResult
    from ..profile.load import load_profile_text
    from ..steps.records import ProbesMeasured

    if verdict.failed:
        return []
    run = read_run(host, pending.run_id)
    measured = run.of_type(ProbesMeasured) if run else []
    if run is None or run.header is None or not measured:
        return []  # before profile.yaml is read: a round trip saved where nothing is measured
    stored = host.read_file(PROFILE)
    if stored is None:
        return []
    baseline = {r["name"]: ProbeResult.from_json(r) for r in measured[-1].results}
    specs = load_profile_text(stored.decode("utf-8", "replace"), PROFILE).profile.probes
    probes = PhaseProbes(
        {name: spec for name, spec in specs.items() if name in baseline},
        run.header.phase,
        env,
        keep_on_regression,
        execute,
        before_results=baseline,
    )
    journal = Journal(host, pending.run_id)
    failures = probes.after_boot(journal)
    if failures and not keep_on_regression:
        verdict.failed.append(f"probe gate failed: {probes.failed()}")
    else:
        # The records follow the run's `end`: a new one keeps its outcome the last record.
        journal.end(run.outcome)
    return failures


def _runtime_drift(host: ReadableHost, stored: str | None) -> list[str]:
    """The runtime part of the stored profile must still hold (it was persisted)."""
    if stored is None:
        return []
    from ..plan.make import make_plan
    from ..plan.observe import observe
    from ..profile.load import load_profile_text

    loaded = load_profile_text(stored, PROFILE)
    plan = make_plan(loaded, observe(host, loaded.profile, False), False)
    return [
        f"{change.id} is {change.current!r} after the boot, not {change.desired!r}"
        for change in plan.changes
        if change.phase is Phase.RUNTIME
    ]
