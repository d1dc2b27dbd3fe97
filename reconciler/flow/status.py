"""/var/lib/tune/status.json (`steps.status.Status`) as apply, verify and check leave it.

Each command reads the status before (an apply in its observation's batch, verify with
pending.json) and replaces it whole with what it came to; fields it does not decide it keeps
(an apply keeps the last verification, a verify the drift an apply or check found). Written
through the host (`put_file`: a new file, then a rename) or, over SSH and on this machine
through sh, in the script that writes the rest: an apply's inside its run, with pending.json
(no round trip of its own); verify's and an in-sync apply's in one script each.

Where each command writes it: `tune apply` and `tune verify` wherever they write (this
machine, an SSH host, a snapshot with --root); `tune check`, which is read-only, only where it
keeps its first sightings of drift already (`drift.first_seen`: this machine or a snapshot
directory where tune's state directory exists and is tune's), never over SSH.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..apply.pending import PENDING, PendingBoot
from ..core.changes import Note
from ..core.errors import HostError
from ..core.files import Files
from ..hosts import trust
from ..hosts.base import Host, ReadableHost
from ..hosts.directory import DirectoryHost
from ..steps.ops import PutFile
from ..steps.records import RecordError
from ..steps.state import STATE
from ..steps.status import STATUS, Status, Verification

if TYPE_CHECKING:
    from ..apply.work import Work
    from ..drift.check import DriftReport
    from ..profile.load import LoadedProfile

MODE = 0o644  # in tune's 0700 state directory: readable by what runs as root (an engine)

HELD, FAILED, NOT_REBOOTED = "held", "failed", "not-rebooted"


def stamp(now: float | None = None) -> str:
    when = datetime.now(UTC) if now is None else datetime.fromtimestamp(now, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(data: bytes | None) -> Status:
    """The status a file holds; all defaults where there is none; `HostError` for one that is
    not a status tune wrote."""
    if data is None:
        return Status()
    try:
        return Status.from_json(data)
    except RecordError as exc:
        raise HostError(f"{STATUS} is not a status tune wrote ({exc}).") from None


def read_status(host: ReadableHost) -> Status:
    return parse(host.read_file(STATUS))


def previous(files: Files) -> Status:
    """The status before a command that replaces it: a damaged one is replaced, never fatal."""
    try:
        return parse(files.read(STATUS))
    except HostError:
        return Status()


def pending_fields(pending: PendingBoot | None) -> dict[str, object]:
    return {
        "reboot_pending": pending is not None,
        "armed": pending is not None and pending.armed,
        "pending_run": pending.run_id if pending is not None else None,
    }


def pending_on(files: Files) -> PendingBoot | bool | None:
    """pending.json as `files` hold it; True for one that exists but is not a record tune
    wrote (a boot is pending all the same, of which run is not known)."""
    data = files.read(PENDING)
    if data is None:
        return None
    try:
        return PendingBoot.from_json(json.loads(data))
    except (ValueError, KeyError, TypeError):
        return True


def _pending_fields(
    pending: PendingBoot | bool | None, boot_id: str | None = None
) -> dict[str, object]:
    """`pending_fields`; a pending record of an earlier boot than `boot_id` (the boot it
    waited for came, `tune verify` has yet to judge it) no longer waits for a reboot."""
    if isinstance(pending, bool):
        return {"reboot_pending": pending, "armed": False, "pending_run": None}
    if pending is not None and boot_id is not None and pending.boot_id != boot_id:
        return {**pending_fields(pending), "reboot_pending": False, "armed": False}
    return pending_fields(pending)


def left(work: Work) -> int:
    """The changes of `work`'s plan its run does not make: those of a phase not applied
    (--runtime-only, --reboot-phase); not those --skip-missing left out."""
    made = {step.id for step in work.planned} | work.left_out
    return sum(1 for change in work.plan.changes if change.id not in made)


def after_apply(
    before: Status,
    loaded: LoadedProfile,
    work: Work,
    run_id: str | None,
    pending: PendingBoot | bool | None,
) -> Status:
    """An apply that ended (its run applied, or nothing to change): in sync, drift 0, when it
    made every change of the plan (a boot still to come is not drift, as `tune check` says);
    not known (null) when a phase was left (`tune check` then says which)."""
    synced = left(work) == 0
    return before.but(
        profile=loaded.profile.name,
        profile_digest=loaded.pinned_as,
        updated=stamp(),
        updated_by="apply",
        boot_id=work.plan.host.boot_id,
        in_sync=True if synced else None,
        drift=0 if synced else None,
        last_run=run_id or before.last_run,
        **_pending_fields(pending, work.plan.host.boot_id),
    )


def after_verify(before: Status, pending: PendingBoot, verdict: str, boot_id: str | None) -> Status:
    """A verification of `pending`'s boot: held (promoted), failed (rolled back: the drift is
    no longer known) or not rebooted yet (nothing checked, the boot still pending)."""
    status = before.but(
        updated=stamp(),
        updated_by="verify",
        boot_id=boot_id,
        last_verification=Verification(boot_id or "", pending.run_id, verdict, stamp()),
        **pending_fields(pending if verdict == NOT_REBOOTED else None),
    )
    return status.but(in_sync=None, drift=None) if verdict == FAILED else status


def after_check(
    before: Status, report: DriftReport, pending: PendingBoot | bool | None, digest: str | None
) -> Status:
    """A check: in sync or the drift it found. The profile's digest where a profile file was
    given (`digest`); checked against the stored profile, the one the last apply recorded."""
    name = report.plan.profile or None
    if digest is None and name == before.profile:
        digest = before.profile_digest
    return before.but(
        profile=name,
        profile_digest=digest,
        updated=stamp(),
        updated_by="check",
        boot_id=report.plan.host.boot_id,
        in_sync=not report.needs_attention if report.compared else None,
        drift=len(report.drift) + len(report.changed) if report.compared else None,
        **_pending_fields(pending, report.plan.host.boot_id),
    )


def after_rollback(before: Status, pending: PendingBoot | bool | None) -> Status:
    """A rollback that restored something: the host is no longer what the profile says, nor
    known to be anything else until a check (drift null); a boot still pending stays so."""
    return before.but(
        updated=stamp(),
        updated_by="rollback",
        in_sync=None,
        drift=None,
        **_pending_fields(pending),
    )


def saying_the_same(status: Status, before: Status) -> bool:
    """Whether `status` says what `before` says, but for when it was written."""
    return status.but(updated=None) == before.but(updated=None)


def status_file(status: Status) -> PutFile:
    return PutFile(STATUS, status.to_json().encode(), MODE)


def check_writes(host: ReadableHost) -> bool:
    """Whether `tune check` writes the status on `host`: where it keeps first sightings (a
    directory host whose state directory exists and is tune's), and the file there is too."""
    if not isinstance(host, DirectoryHost):
        return False
    caller, owned = host.owned([STATE, STATUS])
    if owned[STATE] is None:
        return False  # never applied: a check does not make tune's state directory
    trust.check(caller, {STATE: owned[STATE]})
    trust.check(caller, {STATUS: owned[STATUS]}, files=[STATUS])
    return True


def write_after_check(
    host: ReadableHost, report: DriftReport, digest: str | None
) -> tuple[Note, ...]:
    """`tune check`'s status, where it writes one (`check_writes`); a status that cannot be
    written costs a note, never the check."""
    from ..apply.pending import read_pending

    try:
        if not check_writes(host):
            return ()
        assert isinstance(host, Host)
        try:
            pending: PendingBoot | bool | None = read_pending(host)
        except HostError:
            pending = True
        try:
            before = read_status(host)
        except HostError:
            before = Status()  # damaged: replaced
        host.put_file(STATUS, after_check(before, report, pending, digest).to_json().encode(), MODE)
    except HostError as exc:
        return (Note(f"{STATUS} is not updated: {exc}", "check"),)
    return ()
