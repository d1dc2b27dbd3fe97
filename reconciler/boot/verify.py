"""What must hold after the boot that a reboot-phase apply prepared, and `tune verify`.

`tune apply` (reboot phase) records `/var/lib/tune/pending.json` on the target: the run, the
boot id before, what each kind's steps expect of the next boot (`Kind.after_boot`), and the
profile's container configs with whether to restart them (`--restart-containers`). After the
reboot, `verify` reads, in one batch, the boot id, the stored profile and what each of those
kinds asks for (`Kind.after_boot_request`), lets each kind judge its part
(`Kind.verify_after_boot`), and checks that the stored profile's runtime part still holds; on
any failure the boot configuration is rolled back from the run's journal. This module names no
kind: a kind checks its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import reduce
from operator import or_
from typing import TYPE_CHECKING, Any

from ..apply.pending import PENDING, PendingBoot
from ..core.changes import Phase
from ..core.errors import HostError, NotRebooted
from ..core.files import Request
from ..facts.kernel import BOOT_ID
from ..hosts.base import Host, ReadableHost
from ..kinds import named
from ..kinds.base import Kind
from ..steps.state import PROFILE

if TYPE_CHECKING:
    from ..probes.phase import GateFailure
    from ..probes.runner import Executor


@dataclass
class BootVerdict:
    held: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    boot_id: str | None = None  # the boot verified


def verify(host: ReadableHost, pending: PendingBoot) -> BootVerdict:
    """Compare the booted host with `pending`; pure reads, one batch."""
    # In the record's order (the plan's). `read_pending` refuses a kind this tune does not know.
    kinds = [(_kind(name), part) for name, part in pending.expected.items() if part]
    asked = [kind.after_boot_request(expected) for kind, expected in kinds]
    files = host.fetch(reduce(or_, asked, Request.of(BOOT_ID, PROFILE)))
    boot_id = files.value(BOOT_ID)
    verdict = BootVerdict(boot_id=boot_id)
    if pending.boot_id is not None and boot_id == pending.boot_id:
        raise NotRebooted(
            f"{host.describe()} has not rebooted since run {pending.run_id} (same boot id); "
            "reboot it, then run tune verify."
        )
    for kind, expected in kinds:
        checked = kind.verify_after_boot(expected, files)
        verdict.held += checked.held
        verdict.failed += checked.failed
    verdict.failed += _runtime_drift(host, files.text(PROFILE))
    return verdict


def _kind(name: str) -> Kind[Any]:
    kind = named(name)
    if kind is None:
        raise HostError(f"{PENDING} expects {name} settings, a kind this tune does not know.")
    return kind


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
