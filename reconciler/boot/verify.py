"""What must hold after the boot that a reboot-phase apply prepared, and `tune verify`.

`tune apply` (reboot phase) records `/var/lib/tune/pending.json` on the target: the run, the
boot id before, what each kind's steps expect of the next boot (`Kind.after_boot`), and the
profile's container configs with whether to restart them (`--restart-containers`). After the
reboot, `verify` reads, in one batch, the boot id, the stored profile and what each of those
kinds asks for (`Kind.after_boot_request`) (with what the stored profile's runtime knobs read,
where the caller applied it: a rollout, `apply --reboot`), lets each kind judge its part
(`Kind.verify_after_boot`); on any failure the boot configuration is rolled back from the
run's journal. This module names no kind: a kind checks its own.

The boot is judged by what the run configured for the boot, nothing else. The stored profile's
runtime knobs that differ after the boot are reported, as `tune check` reports them, and never
roll the boot back (its configuration does not set them, and undoing it would not fix them):
those no run in effect applied (a host only ever given `--reboot-phase`) are not applied; those
a run applied that no longer hold (a persisted value the boot did not bring back) are drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import reduce
from operator import or_
from typing import TYPE_CHECKING, Any

from ..apply.pending import PENDING, PendingBoot
from ..core.changes import Change, Phase
from ..core.errors import HostError, NotRebooted
from ..core.files import Request
from ..facts.kernel import BOOT_ID
from ..hosts.base import Host, ReadableHost
from ..kinds import named
from ..kinds.base import Kind
from ..steps.state import PROFILE

if TYPE_CHECKING:
    from ..core.files import Files
    from ..probes.phase import GateFailure
    from ..probes.runner import Executor
    from ..profile.load import LoadedProfile


@dataclass
class BootVerdict:
    held: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # what the boot did not bring: rolled back
    boot_id: str | None = None  # the boot verified
    # The stored profile's runtime knobs that differ after the boot (see the module's
    # docstring): reported, never a reason to roll the boot back.
    not_applied: list[Change] = field(default_factory=list)  # no run in effect applied them
    drifted: list[Change] = field(default_factory=list)  # applied, and no longer hold


def verify(
    host: ReadableHost, pending: PendingBoot, applied: LoadedProfile | None = None
) -> BootVerdict:
    """Compare the booted host with `pending`; pure reads, one batch. `applied`: the profile
    the run stored, when the caller has it (a rollout, `apply --reboot`): what its runtime
    knobs read comes in the same batch, used if the host's stored profile is that one; else
    (`tune verify`, or another profile stored since) a second batch reads what the stored
    one asks for."""
    # In the record's order (the plan's). `read_pending` refuses a kind this tune does not know.
    kinds = [(_kind(name), part) for name, part in pending.expected.items() if part]
    asked = [kind.after_boot_request(expected) for kind, expected in kinds]
    wanted = reduce(or_, asked, Request.of(BOOT_ID, PROFILE))
    if applied is not None:
        wanted |= _runtime_request(applied)
    files = host.fetch(wanted)
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
    verdict.not_applied, verdict.drifted = _runtime_part(host, files, applied)
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


def _runtime_request(loaded: LoadedProfile) -> Request:
    """What judging `loaded`'s runtime knobs reads: their files, and the newest journals."""
    from ..apply.applied import JOURNAL_BATCH
    from ..plan.observe import request
    from ..steps.state import runs_request

    return request(loaded.profile, False) | runs_request(JOURNAL_BATCH)


def _runtime_part(
    host: ReadableHost, files: Files, applied: LoadedProfile | None
) -> tuple[list[Change], list[Change]]:
    """The stored profile's runtime knobs that differ now: those no run in effect applied, and
    those that drifted (`applied.runtime_not_applied`). The journals come in the observation's
    batch, older ones only on a host whose newest applied run wrote the reboot phase alone.
    Read in `files` already when the stored profile is `applied`."""
    stored = files.text(PROFILE)
    if stored is None:
        return [], []
    from ..apply.applied import fetch_journals, runtime_applied, runtime_not_applied
    from ..apply.work import profile_text
    from ..plan.make import make_plan
    from ..plan.observe import observation
    from ..profile.load import load_profile_text

    if applied is not None and stored == profile_text(applied):
        loaded = applied
    else:
        loaded = load_profile_text(stored, PROFILE)
        files = host.fetch(_runtime_request(loaded))
    plan = make_plan(loaded, observation(host, files), False)
    differ = [change for change in plan.changes if change.phase is Phase.RUNTIME]
    if not differ:
        return [], []
    runs = fetch_journals(host, files, until=runtime_applied)
    never = runtime_not_applied(runs, (change.id for change in differ))
    return [c for c in differ if c.id in never], [c for c in differ if c.id not in never]
