"""What an apply will do, decided before anything is written: `prepare` observes, refuses a
stale plan, turns each change into a `Step` (data, from its kind), leaves out what --skip-missing
drops, arranges a one-time boot, and checks every step's requirements (`apply.preflight`).
Nothing here writes; the executors (`apply.python_engine`, `apply.sh_engine`) run the `Work`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.bounded import size_text
from ..core.changes import Phase, Plan
from ..core.errors import BootConfigUnknown, HostError
from ..core.files import MAX_EDITED_BYTES, MAX_FILE_BYTES, Files, Request
from ..hosts.base import Host
from ..kinds import boot_kind
from ..kinds.files import KIND as BOOT_FILES
from ..plan.make import make_plan, missing_ids
from ..plan.observe import Observation
from ..plan.observe import observation as observation_of
from ..plan.observe import request as observed_request
from ..plan.saved import SavedPlan
from ..profile.load import LoadedProfile
from ..steps.ops import DeleteFile, Need, PutFile, Skipped, Step
from ..steps.status import STATUS
from .journal import PROFILE
from .pending import PENDING
from .preflight import preflight

# profile.yaml, and what the run's status.json keeps of the last (`flow.status`) and says of
# a boot still pending: read in the observation's batch, no round trip of their own.
PROFILE_REQUEST = Request.of(whole=[PROFILE, STATUS, PENDING])


@dataclass(frozen=True)
class Work:
    """What an apply will do, decided before anything is written."""

    plan: Plan
    steps: tuple[Step, ...]  # what the run writes, in order
    observation: Observation
    # The plan's steps: `steps` unless a rebooting apply boots the new command line once first
    # (`boot.tryonce`), which puts a try entry in place of the command-line steps.
    planned: tuple[Step, ...]
    promote: tuple[Step, ...] = ()  # appended to the run once the boot is verified
    try_once: str | None = None  # the one-time boot mechanism, None without one
    reboot_why: str = ""  # how the reboot reaches the new configuration ("": no reboot)
    # --skip-missing: the changes left out because the host lacks what they need.
    skipped: tuple[Skipped, ...] = ()
    # Their ids, and those of tune's boot-time files written without their lines: tune never
    # set these as the profile says, so `tune check` calls them not applied, not drift.
    left_out: frozenset[str] = frozenset()

    @property
    def stored_profile(self) -> bytes | None:
        """/var/lib/tune/profile.yaml as observed (read in the observation's batch)."""
        return self.observation.files.read(PROFILE)


def prepare_request(loaded: LoadedProfile, with_persistence: bool = True) -> Request:
    """What `prepare` reads: the observation, and profile.yaml in the same batch (an apply with
    nothing to change stores it when it differs)."""
    return observed_request(loaded.profile, with_persistence) | PROFILE_REQUEST


def prepare(
    host: Host,
    loaded: LoadedProfile,
    *,
    runtime_only: bool,
    with_persistence: bool = True,
    saved: SavedPlan | None = None,
    preflight_here: bool = True,
    reboot_phase: bool = False,
    reboot: bool = False,
    requirements: Callable[[tuple[Step, ...]], list[str]] | None = None,
    unloadable: ModuleCheck | None = None,
    fetched: Files | None = None,
) -> Work:
    """`runtime_only` leaves boot configuration alone; `reboot_phase` writes only it (runtime
    knobs are verified by `tune verify`, never written); neither: runtime, then reboot.
    `reboot`: the apply reboots after the run, so the steps boot the new command line once
    first where the boot loader allows (`boot.tryonce.arrange`); this is the one place that
    decides the steps. `requirements` checks the steps' requirements (this host's `preflight`
    by default; an engine's); `preflight_here=False` leaves them to the caller (a remote apply
    checks them on the target, in the script that starts the run). `unloadable` (--skip-missing)
    asks the host which modules it cannot load: a step that loads one the host does not have
    at all is left out, with a line in `Work.skipped`, and so are its lines in tune's boot-time
    files (`persisting_what_runs`). `fetched`: the host's answer to `prepare_request` read
    already, in a batch with other reads (`journal.before_apply`'s); None: read here."""
    from .tryonce import Boot, arrange

    request = prepare_request(loaded, with_persistence)
    if fetched is None:
        fetched = host.fetch(request)
    observation = observation_of(host, fetched)
    plan = make_plan(loaded, observation, with_persistence)
    if saved is not None:
        saved.check(plan, loaded, with_persistence)
    specs = {k.kind: (k, spec) for k, spec in loaded.profile.work(with_persistence)}
    problems: list[str] = []
    refusal: type[HostError] = HostError
    steps: list[Step] = []
    # What the host lacks is in no boot-time file, as the plan has them (`make_plan`).
    missing = missing_ids(plan.compared)
    # Runtime knobs and tune's boot-time files first; the boot configuration last.
    for change in sorted(plan.changes, key=lambda c: c.phase is not Phase.RUNTIME):
        if runtime_only and change.phase is not Phase.RUNTIME:
            continue
        if reboot_phase and change.phase is not Phase.REBOOT:
            continue
        try:
            kind, spec = specs[change.kind]
            if kind.kind == BOOT_FILES.kind:
                steps.append(BOOT_FILES.step(spec, change, observation.files, missing))
            else:
                steps.append(kind.step(spec, change, observation.files))
        except HostError as exc:
            problems.append(str(exc))
            if isinstance(exc, BootConfigUnknown):
                refusal = BootConfigUnknown  # its own exit code, whatever else is wrong
    planned, skipped = tuple(steps), tuple[Skipped, ...]()
    if unloadable is not None:
        planned, skipped = without_missing_modules(planned, unloadable)
    left_out = frozenset(s.id for s in skipped)
    if skipped and BOOT_FILES.kind in specs and not reboot_phase:
        boot_files = specs[BOOT_FILES.kind][1]
        planned, trimmed = persisting_what_runs(
            planned, left_out | missing, boot_files, observation.files, plan
        )
        left_out |= trimmed
    boot = arrange(planned, fetched) if reboot else Boot(None, "", planned)
    problems += not_read_whole(host, request, fetched, boot.now + boot.promote)
    if boot.now and preflight_here:
        # The promotion's too: what it needs after the boot is known to be there before.
        problems += (requirements or (lambda checked: preflight(host, checked)))(
            boot.now + boot.promote
        )
    if problems:
        raise refusal(*dict.fromkeys(problems))
    return Work(
        plan,
        boot.now,
        observation,
        planned,
        boot.promote,
        boot.try_once,
        boot.why,
        skipped,
        left_out,
    )


def not_read_whole(host: Host, request: Request, files: Files, steps: Sequence[Step]) -> list[str]:
    """A sentence for each file `steps` rewrite (replace, delete, or put back on undo) that
    observation did not read whole: tune journals a file's prior and writes an edit of it,
    so a prefix would lose the rest on apply and again on rollback (a Proxmox config's
    snapshot sections past 64 KiB). A file past MAX_EDITED_BYTES is named with its size,
    never shown; one a kind did not ask whole is tune's own error."""
    found = []
    written = (
        op.path for s in steps for op in (*s.do, *s.undo) if isinstance(op, PutFile | DeleteFile)
    )
    for path in dict.fromkeys(written):
        data = files.read(path)
        if data is None or len(data) < MAX_FILE_BYTES:
            continue  # absent, or shorter than any cap: whole
        if not request.read_whole(path):
            found.append(
                f"{path} was read only in part (its first {size_text(MAX_FILE_BYTES)}), and "
                "tune rewrites only a file it read whole; this is a bug of tune's."
            )
        elif len(data) > MAX_EDITED_BYTES:
            size = host.file_size(path)
            said = "larger than" if size is None else f"{size:,} bytes, more than"
            found.append(
                f"{path} is {said} the {size_text(MAX_EDITED_BYTES)} tune reads of a file it "
                "rewrites, so tune leaves it as it is and writes nothing."
            )
    return found


# Which modules a host cannot load: module name -> the first line modprobe printed.
ModuleCheck = Callable[[tuple[str, ...]], Mapping[str, str]]

# kmod's words for a module that no modules.dep of the running kernel lists: not there at all
# (nvidia_peermem on a VM without NVIDIA's driver), unlike one whose load fails.
NOT_FOUND = re.compile(r"\bModule \S+ not found\b")


def without_missing_modules(
    steps: tuple[Step, ...], unloadable: ModuleCheck
) -> tuple[tuple[Step, ...], tuple[Skipped, ...]]:
    """`steps` less those that load a module the running kernel does not have, and those."""
    wanted = [n.arg for step in steps for n in step.requires if n.need is Need.MODULE]
    if not wanted:
        return steps, ()
    said = unloadable(tuple(dict.fromkeys(wanted)))
    gone = {name: line for name, line in said.items() if NOT_FOUND.search(line)}
    kept: list[Step] = []
    skipped: list[Skipped] = []
    for step in steps:
        why = [gone[n.arg] for n in step.requires if n.need is Need.MODULE and n.arg in gone]
        if why:
            skipped.append(Skipped(step.id, why[0]))
        else:
            kept.append(step)
    return tuple(kept), tuple(skipped)


def persisting_what_runs(
    steps: tuple[Step, ...], left_out: frozenset[str], profile: Any, files: Files, plan: Plan
) -> tuple[tuple[Step, ...], frozenset[str]]:
    """`steps` with tune's boot-time files made again without the lines of the changes
    `left_out`: a module the kernel lacks in modules-load.d fails systemd-modules-load at every
    boot, also when an earlier run (or the module's removal since) left it there. A file that
    then stays as it is is not written, so a second run changes nothing. Also the ids of the
    files that hold less than the profile wants (`plan` compared them whole)."""
    whole = {c.id: c.desired for c in plan.compared if c.kind == BOOT_FILES.kind}
    outcome = BOOT_FILES.compare(profile, files, left_out)
    trimmed = frozenset(c.id for c in outcome.changes if whole.get(c.id) != c.desired)
    persisting = [
        BOOT_FILES.step(profile, change, files, left_out)
        for change in outcome.changes
        if not change.in_sync
    ]
    knobs = [s for s in steps if s.kind != BOOT_FILES.kind]
    # Where `prepare` puts them: after the runtime knobs, before the boot configuration.
    live = [s for s in knobs if not boot_kind(s.kind)]
    return (*live, *persisting, *(s for s in knobs if boot_kind(s.kind))), trimmed


def profile_text(loaded: LoadedProfile) -> str:
    return (
        "# The resolved profile (extends applied) of the last successful tune apply on this host.\n"
        + loaded.resolved_yaml
    )
