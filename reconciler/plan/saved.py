"""Saved plans: what `tune plan` leaves in `.tune/plan.json` (or `-o FILE`) for `tune apply`.

A saved plan records the profile, the host it was made for, the phases it covers, every
observed value and the boot id, with a fingerprint of those. `tune apply` re-observes and refuses
the plan when the fingerprint moved, or when it was made for another host: the operator approved
changes from those values, on that host, not others.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.bounded import MAX_SAVED_PLAN_BYTES, read_bounded
from ..core.changes import Phase, Plan
from ..core.errors import StalePlan, UsageError, reason
from ..hosts.replaced import write_output
from ..hosts.trust import Owned, check, private_directory
from ..kinds import boot_files
from ..profile.load import LoadedProfile

DEFAULT = Path(".tune") / "plan.json"
VERSION = 2  # 2: "phases" and "saved_at" (a version 1 plan covers both phases)
BOTH = (Phase.RUNTIME, Phase.REBOOT)


def chosen_phases(runtime_only: bool, reboot_phase: bool) -> tuple[Phase, ...]:
    """The phases `--runtime-only` / `--reboot-phase` (or neither: both) choose."""
    if runtime_only:
        return (Phase.RUNTIME,)
    return (Phase.REBOOT,) if reboot_phase else BOTH


def of_phases(plan: Plan, phases: tuple[Phase, ...]) -> Plan:
    """The plan cut to the changes of `phases` (checks, notes and pending reboots kept)."""
    if phases == BOTH:
        return plan
    return replace(plan, compared=tuple(c for c in plan.compared if c.phase in phases))


def phases_text(phases: tuple[Phase, ...]) -> str:
    return "both phases" if phases == BOTH else f"the {phases[0].value} phase only"


def observed_values(plan: Plan, with_files: bool = True) -> dict[str, Any]:
    return {
        c.id: list(c.current) if isinstance(c.current, tuple) else c.current
        for c in plan.compared
        if with_files or not boot_files(c.kind)
    }


def fingerprint(observed: dict[str, Any], boot_id: str | None) -> str:
    blob = json.dumps({"boot_id": boot_id, "observed": observed}, sort_keys=True)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def profile_digest(loaded: LoadedProfile) -> str:
    blob = json.dumps(loaded.data, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class SavedPlan:
    path: str
    profile_path: str
    profile_digest: str
    root: str | None
    boot_id: str | None
    observed: dict[str, Any]
    fingerprint: str
    persist: bool
    host_name: str | None = None
    profile_name: str | None = None
    phases: tuple[Phase, ...] = BOTH
    saved_at: float | None = None  # seconds since the epoch

    def phases_for(self, runtime_only: bool, reboot_phase: bool) -> tuple[Phase, ...]:
        """The phases an apply of this plan writes: those asked for, which this plan must
        cover; with neither flag, the phases it covers (the operator saw those, no others)."""
        asked = chosen_phases(runtime_only, reboot_phase)
        if asked == BOTH:
            return self.phases
        if not set(asked) <= set(self.phases):
            raise UsageError(
                f"{self.path} covers {phases_text(self.phases)}, not the {asked[0].value} "
                "phase: run tune plan again without --runtime-only or --reboot-phase."
            )
        return asked

    def described(self, now: float) -> str:
        """Which plan an apply uses, for the operator: where, how old, of what."""
        age = "" if self.saved_at is None else f", saved {_age(now - self.saved_at)} ago"
        of = f"profile {self.profile_name or self.profile_path}"
        on = f" for {self.host_name}" if self.host_name else ""
        covers = phases_text(self.phases)
        return f"tune: applying the plan in {self.path}{age} ({of}{on}, {covers})."

    def check(self, plan: Plan, loaded: LoadedProfile, persist: bool) -> None:
        """Raise `StalePlan` unless `plan` (made now) is of the host this one was made for and
        starts from the values this one saw."""
        where = self.path
        if profile_digest(loaded) != self.profile_digest:
            raise StalePlan(
                f"stale plan: {self.profile_path} changed since {where} was made; "
                "run tune plan again."
            )
        if self.host_name is not None and plan.host.name != self.host_name:
            raise StalePlan(
                f"{where} was made for host {self.host_name}, not {plan.host.name}: "
                "run tune plan on this host."
            )
        plan = of_phases(plan, self.phases)
        if plan.host.boot_id != self.boot_id:
            raise StalePlan(
                f"stale plan: the host rebooted since {where} was made; run tune plan again."
            )
        with_files = persist and self.persist
        before = {k: v for k, v in self.observed.items() if with_files or not k.startswith("file:")}
        now = observed_values(plan, with_files)
        if fingerprint(before, self.boot_id) != fingerprint(now, plan.host.boot_id):
            raise StalePlan(
                f"stale plan: the host changed since {where} was made "
                f"({moved(before, now)}); run tune plan again."
            )


def moved(before: dict[str, Any], now: dict[str, Any]) -> str:
    """What differs, briefly: deepdiff explains it (imported only here, off the plan path)."""
    from deepdiff import DeepDiff

    diff = DeepDiff(before, now, verbose_level=2)
    parts: list[str] = []
    for key, change in diff.get("values_changed", {}).items():
        parts.append(f"{_id(key)}: {change['old_value']} -> {change['new_value']}")
    for key, change in diff.get("type_changes", {}).items():
        parts.append(f"{_id(key)}: {change['old_value']} -> {change['new_value']}")
    for key in diff.get("dictionary_item_added", {}):
        parts.append(f"{_id(key)} appeared")
    for key in diff.get("dictionary_item_removed", {}):
        parts.append(f"{_id(key)} disappeared")
    for key in list(diff.get("iterable_item_added", {})) + list(
        diff.get("iterable_item_removed", {})
    ):
        parts.append(f"{_id(key)} changed")
    parts = list(dict.fromkeys(parts))
    if not parts:
        return "values moved"
    more = f" and {len(parts) - 3} more" if len(parts) > 3 else ""
    return ", ".join(parts[:3]) + more


def _age(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count > 1 else ''}"
    return "less than a minute"


def _id(deepdiff_path: str) -> str:
    """`root['sysctl:vm.swappiness'][2]` -> `sysctl:vm.swappiness`."""
    inner = deepdiff_path.removeprefix("root[")
    return inner.split("]", 1)[0].strip("'\"")


def save(
    target: str | os.PathLike[str],
    loaded: LoadedProfile,
    plan: Plan,
    root: str | None,
    persist: bool,
    phases: tuple[Phase, ...] = BOTH,
) -> None:
    """Save `plan`, made of `phases` (`of_phases`), for `tune apply`."""
    observed = observed_values(plan)
    data = {
        "version": VERSION,
        "saved_at": time.time(),
        "phases": [phase.value for phase in phases],
        "profile_path": str(Path(loaded.path).resolve()),
        "profile": plan.profile,
        "profile_digest": profile_digest(loaded),
        "root": None if root is None else str(Path(root).resolve()),
        "persist": persist,
        "host": plan.host.to_json(),
        "fingerprint": fingerprint(observed, plan.host.boot_id),
        "observed": observed,
        "plan": plan.to_json(),
    }
    path = Path(target)
    # 0700 whatever the umask (under umask 000 a plain mkdir made .tune 0777, which the trust
    # check then refused): the plan holds what tune observed of the host.
    private_directory(path.parent)
    _trusted_directory(path)
    # Compact: json.dumps with indent falls back to the pure-Python encoder (slow).
    text = json.dumps(data, separators=(",", ":")) + "\n"
    write_output(path, text, "save the plan", mode=0o600)


def _trusted_directory(path: Path) -> None:
    """`UntrustedState` unless the plan's directory is one only root or the caller can write:
    `tune apply` without a profile would otherwise apply a plan another user left there. The
    directory is judged as named, not where a link leads: a `.tune` link planted in a shared
    directory would send root's plan into a directory of its choosing (and apply's read
    there)."""
    directory = path.parent
    check(os.geteuid(), {str(directory): Owned.of(os.lstat(directory))})


def _read_trusted(path: Path) -> bytes:
    """The plan's bytes, read only when it and its directory pass `trust.check` (the file
    opened without following a link, then judged by what was opened)."""
    _trusted_directory(path)
    if path.is_symlink():
        check(os.geteuid(), {str(path): Owned.of(os.lstat(path))}, [str(path)])

    def judge(info: os.stat_result) -> None:
        check(os.geteuid(), {str(path): Owned.of(info)}, [str(path)])

    return read_bounded(path, MAX_SAVED_PLAN_BYTES, "a saved plan", follow=False, judge=judge)


def load(path: str | os.PathLike[str]) -> SavedPlan:
    try:
        data = json.loads(_read_trusted(Path(path)))
        return SavedPlan(
            path=str(path),
            profile_path=data["profile_path"],
            profile_digest=data["profile_digest"],
            root=data.get("root"),
            boot_id=data["host"].get("boot_id"),
            observed=data["observed"],
            fingerprint=data["fingerprint"],
            persist=bool(data.get("persist", True)),
            host_name=data["host"].get("name"),
            profile_name=data.get("profile"),
            phases=_phases(data.get("phases", BOTH)),
            saved_at=None if data.get("saved_at") is None else float(data["saved_at"]),
        )
    except FileNotFoundError:
        raise UsageError(
            f"no saved plan at {path}: run tune plan PROFILE first, or give a profile."
        ) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path} is not a plan saved by tune plan ({reason(exc)}).") from None


def _phases(names: list[str]) -> tuple[Phase, ...]:
    """The phases a plan file names, in apply's order; none named is a damaged file."""
    named = {Phase(name) for name in names}
    if not named:
        raise ValueError("it covers no phase")
    return tuple(phase for phase in BOTH if phase in named)


def is_saved_plan(path: str) -> bool:
    return path.endswith(".json")
