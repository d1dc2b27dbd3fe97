"""What an engine reads of tune on a host without parsing text: `/var/lib/tune/status.json`.

One small JSON object, replaced whole (write to a new file, then rename) by `tune apply`,
`tune verify`, `tune check` and `tune rollback`, and printed by `tune status`. Slurm's health
check, the Node Feature Discovery labels, the kured sentinel and the Ansible module read it;
nothing else of tune's state is a contract with an engine. Like the journal, the format only
grows: a reader ignores fields it does not know, and a field it knows has its type
(`records.conforms`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .records import RecordError, conforms
from .state import STATE

STATUS = f"{STATE}/status.json"
STATUS_FORMAT = 1


@dataclass(frozen=True)
class Verification:
    """The last `tune verify`: on which boot, of which run, and what it came to."""

    boot_id: str
    run_id: str
    verdict: str  # "held" | "failed" (rolled back) | "not-rebooted"
    at: str  # ISO 8601, UTC


@dataclass(frozen=True)
class Status:
    profile: str | None = None  # the profile's name (its file name without .yaml)
    profile_digest: str | None = None  # "sha256:..." of the profile as loaded
    updated: str | None = None  # ISO 8601, UTC, when this file was written
    updated_by: str | None = None  # "apply" | "verify" | "check" | "rollback"
    boot_id: str | None = None  # the boot this was written in
    in_sync: bool | None = None  # None: not known (an apply that did not check)
    drift: int | None = None  # changes that differ from the profile, when known
    # A boot configuration waits for the next boot (pending.json of this boot; one of an earlier
    # boot awaits `tune verify`, no reboot: pending_run still names it).
    reboot_pending: bool = False
    armed: bool = False  # that boot is a try-once boot, arranged and not yet booted
    pending_run: str | None = None  # the run whose boot is pending
    last_run: str | None = None  # the newest run that wrote the host
    last_verification: Verification | None = None
    format_version: int = STATUS_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)  # fields a newer tune wrote

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if k != "extra"}
        return json.dumps({**self.extra, **data}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> Status:
        """The status a file holds; `RecordError` when it is not one tune wrote."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RecordError(f"{STATUS} is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise RecordError(f"{STATUS} is not a JSON object")
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        verification = data.get("last_verification")
        if isinstance(verification, dict):
            names = set(Verification.__dataclass_fields__)
            missing = names - set(verification)
            if missing:
                raise RecordError(f"{STATUS}: last_verification lacks {sorted(missing)}")
            verification = Verification(**{k: verification[k] for k in names})
        values = {k: data[k] for k in known if k in data}
        values["last_verification"] = verification
        extra = {k: v for k, v in data.items() if k not in known}
        try:
            status = cls(**values, extra=extra)
        except TypeError as exc:
            raise RecordError(f"{STATUS}: {exc}") from None
        conforms(status, "status")
        return status

    def but(self, **changes: Any) -> Status:
        return replace(self, **changes)
