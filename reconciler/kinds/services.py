"""systemd services: resource limits as a drop-in tune owns, unit state, logind's settings.

```yaml
services:
  containerd.service:
    limits: {LimitMEMLOCK: infinity, LimitSTACK: 67108864}
    reason: "CUDA pinned memory and RDMA registration in containers"
  nvidia-persistenced.service: {state: enabled}
  irqbalance.service: {state: disabled, reason: "tune pins the IRQs"}
  nvidia-fabricmanager.service: {state: masked, reason: "no NVSwitch here"}
  systemd-logind.service:
    logind: {RemoveIPC: no}
    reason: "NCCL's shared memory segments outlive a user's last session"
```
`limits.d` does not apply to services: a unit's limits come from its unit file and drop-ins,
resolved as systemd does; tune writes `/etc/systemd/system/UNIT.d/90-tune.conf` and runs
`systemctl daemon-reload`. A running service keeps the limits it started with: where its main
process's `/proc/PID/limits` differ from the configured ones, the plan shows a pending restart
(`tune apply --restart-services` restarts it). logind's settings go to
`/etc/systemd/logind.conf.d/90-tune.conf`, read by systemd-logind when it starts. `state` is
what `systemctl is-enabled` says (read from the mask and the links in /etc), set with
`systemctl enable|disable|mask|unmask` and undone command by command.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

from ..core.changes import Change, Note, Outcome, Pending, Phase
from ..core.errors import HostError
from ..core.files import Files, Request
from ..core.schema import After, Before, invalid
from ..facts import systemd
from ..steps.ops import Command, Need, Probe, Read, Require, Step
from .base import Kind, Meta, file_step, missing_note, safe, safe_scalar

UnitName = safe(systemd.UNIT_NAME, "systemd unit name", "containerd.service")
LimitName = Literal[tuple(systemd.LIMITS)]  # type: ignore[valid-type]
LimitValue = safe_scalar(
    systemd.LIMIT_VALUE,
    "systemd limit (infinity, a number, a size such as 64M, or soft:hard)",
    "infinity",
)
LogindKey = safe(r"[A-Z][A-Za-z]+", "logind.conf setting", "RemoveIPC")
_LogindWord = safe_scalar(r"[A-Za-z0-9_.,:%+-]*", "logind.conf value", "no")
# YAML reads a bare `no` as false: logind's booleans (parse_boolean) as systemd writes them.
_BOOLEANS = {"1": "yes", "yes": "yes", "y": "yes", "true": "yes", "t": "yes", "on": "yes"} | {
    "0": "no",
    "no": "no",
    "n": "no",
    "false": "no",
    "f": "no",
    "off": "no",
}


def _yes_no(value: Any) -> Any:
    return ("yes" if value else "no") if isinstance(value, bool) else value


def logind_value(raw: str | None) -> str | None:
    """A logind.conf value as compared: a boolean in any spelling logind takes as yes or no."""
    return None if raw is None else _BOOLEANS.get(raw.lower(), raw)


LogindValue = Annotated[_LogindWord, Before(_yes_no, accepts=bool | str)]  # type: ignore[valid-type]
LOGIND = "systemd-logind.service"
RELOAD = Command(("systemctl", "daemon-reload"))


def _sizes_only_where_sizes(limits: dict[str, str]) -> dict[str, str]:
    for key, value in limits.items():
        try:
            systemd.normalize_limit(key, value)
        except ValueError:
            raise invalid(
                "limit_value",
                "{key}={value}: systemd takes a size suffix only for limits in bytes; "
                "{key} is a count",
                key=key,
                value=value,
            ) from None
    return limits


@dataclass(frozen=True, kw_only=True)
class UnitEntry(Meta):
    limits: Annotated[
        dict[LimitName, LimitValue],  # type: ignore[valid-type]
        After(_sizes_only_where_sizes),
    ] = field(default_factory=dict)
    state: Literal["enabled", "disabled", "masked"] | None = field(
        default=None,
        metadata={
            "description": "as `systemctl is-enabled` says it; set with enable, "
            "disable, mask or unmask"
        },
    )
    logind: dict[LogindKey, LogindValue] = field(  # type: ignore[valid-type]
        default_factory=dict,
        metadata={"description": f"logind.conf settings; only under {LOGIND}"},
    )


def _logind_only_for_logind(spec: dict[str, UnitEntry]) -> dict[str, UnitEntry]:
    for unit, item in spec.items():
        if item.logind and unit != LOGIND:
            raise invalid(
                "logind_elsewhere",
                "{unit}: logind settings belong to {logind}",
                unit=unit,
                logind=LOGIND,
            )
    return spec


ServicesSpec = Annotated[
    dict[UnitName, UnitEntry],  # type: ignore[valid-type]
    After(_logind_only_for_logind),
]


def dropin_text(unit: str, limits: dict[str, str]) -> str:
    body = "".join(f"{key}={value}\n" for key, value in limits.items())
    return f"# Written by tune for {unit}; tune owns this file.\n[Service]\n{body}"


def logind_text(settings: dict[str, str]) -> str:
    body = "".join(f"{key}={value}\n" for key, value in settings.items())
    return f"# Written by tune; tune owns this file.\n[Login]\n{body}"


def _overridden(unit: systemd.Unit, source: str | None) -> str | None:
    if source is None or source not in unit.dropins:
        return None
    if posixpath.basename(source) > systemd.OWN_DROPIN:
        return source
    return None


class Services(Kind[dict[str, UnitEntry]]):
    section = "services"
    spec_type = ServicesSpec
    kind = "service"
    phase = Phase.RUNTIME
    reads = (
        "unit files and `UNIT.d/*.conf` drop-ins in `/etc`, `/run`, `/usr/lib`, `/lib` "
        "`systemd/system`; the main process's `/proc/PID/limits`; `logind.conf(.d)`"
    )
    compared = (
        "the value systemd resolves (later drop-ins win), sizes in bytes; configured but not "
        "in the running process is a *pending restart*"
    )
    noun = "units"
    waits_for_restarts = True

    def services_to_restart(self, steps: Sequence[Step]) -> list[str]:
        # What logind runs with cannot be read from a file: a changed setting is its restart.
        return [LOGIND] if any(s.id.startswith("service:logind:") for s in steps) else []

    def request(self, spec: dict[str, UnitEntry]) -> Request:
        found = Request()
        for unit, item in spec.items():
            found |= systemd.request(unit) | Request.of(edited=[systemd.dropin(unit)])
            if item.limits:
                found |= systemd.running_request(unit)
            if item.logind:
                found |= systemd.logind_request()
        return found

    def compare(self, spec: dict[str, UnitEntry], files: Files) -> Outcome:
        outcome = Outcome()
        for name, item in spec.items():
            unit = systemd.resolve(files, name)
            missing = not unit.exists
            if missing:
                said = f"{name} is not installed on this host (no unit file)."
                outcome.notes.append(Note(missing_note(said, item), f"services:{name}"))
            outcome.extend(self._limits(name, item, unit, files, missing))
            if item.state is not None:
                current = systemd.unit_state(files, unit)
                if current == "static":
                    outcome.notes.append(
                        Note(
                            f"{name} is static: its unit file has no [Install] section, so it "
                            "cannot be enabled or disabled, only masked.",
                            f"services:{name}",
                        )
                    )
                outcome.changes.append(
                    self.change(
                        f"{name}:state",
                        current,
                        item.state,
                        item,
                        fix=" && ".join(
                            shlex.join(c.argv) for c in state_commands(name, current, item.state)
                        ),
                        missing=missing,
                    )
                )
            for key, value in item.logind.items():
                current = logind_value(systemd.logind_setting(files, key))
                outcome.changes.append(
                    self.change(
                        f"logind:{key}",
                        current,
                        logind_value(str(value)),
                        item,
                        fix=f"printf '[Login]\\n{key}={value}\\n' > {systemd.LOGIND_DROPIN}",
                        missing=missing,
                    )
                )
                if current != logind_value(str(value)) and not missing:
                    outcome.notes.append(
                        Note(
                            f"logind reads {key} when it starts: the new value takes effect "
                            f"when {LOGIND} restarts (`tune apply --restart-services`) or at "
                            "the next boot.",
                            f"services:{name}",
                        )
                    )
        return outcome

    def _limits(
        self, name: str, item: UnitEntry, unit: systemd.Unit, files: Files, missing: bool
    ) -> Outcome:
        outcome = Outcome()
        running: dict[str, str] | None = None
        for key, value in item.limits.items():
            desired = systemd.normalize_limit(key, str(value))
            raw, source = systemd.setting(files, unit, "Service", key)
            current = systemd.configured_limit(key, raw)
            overridden = _overridden(unit, source)
            if overridden is not None and current != desired:
                outcome.notes.append(
                    Note(
                        f"{name}: {key} is set by {overridden}, which systemd reads after "
                        f"tune's {systemd.OWN_DROPIN}: remove it there, or tune cannot set it.",
                        f"services:{name}",
                    )
                )
            outcome.changes.append(
                self.change(
                    f"{name}:{key}",
                    current,
                    desired,
                    item,
                    fix=f"systemctl edit {shlex.quote(name)}  # [Service] {key}={value}",
                    missing=missing,
                )
            )
            if current != desired or missing:
                continue
            if running is None:
                running = _running_limits(files, unit)
                if running is None:
                    running = {}
                    outcome.notes.append(
                        Note(
                            f"{name}: the limits of its running process cannot be read (the "
                            "command that lists its processes failed): a restart may be due.",
                            f"services:{name}",
                        )
                    )
            now = running.get(key)
            if now is not None and now != desired:
                outcome.pending.append(
                    Pending(self.kind, f"{name}:{key}", now, desired, restart=name)
                )
        return outcome

    def step(self, spec: dict[str, UnitEntry], change: Change, files: Files) -> Step:
        name, _, key = change.target.partition(":")
        if key == "state":
            return _state_step(change, name, files)
        if name == "logind":
            item = next(e for e in spec.values() if e.logind)
            path, text = (
                systemd.LOGIND_DROPIN,
                logind_text({k: str(v) for k, v in item.logind.items()}),
            )
            reload: tuple[Command, ...] = ()
        else:
            unit = systemd.resolve(files, name)
            _, source = systemd.setting(files, unit, "Service", key)
            overridden = _overridden(unit, source)
            if overridden is not None:
                raise HostError(
                    f"{change.id} cannot be set: {overridden} sets {key} and systemd reads it "
                    f"after tune's {systemd.OWN_DROPIN}."
                )
            item = spec[name]
            path = systemd.dropin(name)
            text = dropin_text(name, {k: str(v) for k, v in item.limits.items()})
            reload = (RELOAD,)
        if path in files.errors:
            raise HostError(f"{change.id}: {path} cannot be read ({files.errors[path]}).")
        step = file_step(change, path, files.read(path), text.encode(), reload)
        needs = tuple(Require(Need.COMMAND, "systemctl") for _ in reload)
        return replace(step, requires=(*step.requires, *needs))


def state_commands(unit: str, current: str | None, desired: str) -> list[Command]:
    """What takes `unit` from `current` to `desired`: a mask is undone first, and masking
    leaves the links that enable a unit, so unmasking gives its prior state back."""
    commands = []
    if current == "masked" and desired != "masked":
        commands.append(Command(("systemctl", "unmask", unit)))
    if desired == "masked":
        commands.append(Command(("systemctl", "mask", unit)))
    elif desired == "enabled":
        commands.append(Command(("systemctl", "enable", unit)))
    elif current == "enabled":
        commands.append(Command(("systemctl", "disable", unit)))
    return commands


# Each command's inverse: undone in reverse order, they give back the links and the mask
# exactly (a masked unit keeps the links that enable it).
INVERSE = {"enable": "disable", "disable": "enable", "mask": "unmask", "unmask": "mask"}


def _state_step(change: Change, name: str, files: Files) -> Step:
    unit = systemd.resolve(files, name)
    current, desired = change.current, change.desired
    if not isinstance(current, str) or not isinstance(desired, str):
        raise HostError(f"{change.id} cannot be set: {name} is not installed on this host.")
    targets = systemd.link_targets(files, unit)
    if "static" in (current, desired) or (not targets and "masked" not in (current, desired)):
        raise HostError(
            f"{change.id} cannot be set: {name} has no [Install] section to enable it by; "
            "it can only be masked."
        )
    do = state_commands(name, current, desired)
    # One file shows the change: the mask in /etc (an empty file or a link to /dev/null
    # reads empty), or the link `enable` makes (it reads as the unit file).
    if "masked" in (current, desired):
        probe = Probe(f"{systemd.ADMIN}/{name}", Read.TEXT)
        seen: dict[str, str | None] = {"masked": ""}
    else:
        probe = Probe(f"{systemd.ADMIN}/{targets[0]}/{name}", Read.TEXT)
        seen = {"enabled": files.text(unit.path or "")}
    return Step.of(
        change,
        probe=probe,
        expect=seen.get(desired),
        restored=seen.get(current),
        do=tuple(do),
        undo=tuple(Command((c.argv[0], INVERSE[c.argv[1]], *c.argv[2:])) for c in reversed(do)),
        requires=(Require(Need.COMMAND, "systemctl"),),
    )


def _running_limits(files: Files, unit: systemd.Unit) -> dict[str, str] | None:
    """The limits of the unit's main process, where they are the same for every process that
    could be it; empty when it is not running, None when they cannot be read."""
    processes = systemd.main_processes(files, unit)
    if processes is None:
        return None
    found: dict[str, str] = {}
    for process in processes:
        for key, value in systemd.process_limits(process.limits or "").items():
            found.setdefault(key, value)
    return found


KIND = Services()


def restarts(pending: Iterable[Pending]) -> list[str]:
    """The units whose restart `pending` (a plan's) waits for, once each, in order."""
    return list(dict.fromkeys(p.restart for p in pending if p.restart))
