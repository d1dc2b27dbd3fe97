"""`tune apply --reboot` over a fleet, in waves (`--serial`, `--canary`, `--max-fail`, the
hooks), and `tune rollout list|status|resume`: the command line around `reconciler.rollout`.

Text: on a terminal a live table of every host, elsewhere a line per host as it moves (wave,
host, step, elapsed), then the summary; JSON: one object per host as it ends (JSON lines), the
rollout's summary object last (`rollout_show`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import click

from ..apply.engines import engine_for
from ..core.errors import ExitCode, TuneError, UsageError
from ..core.words import counted
from ..flow.orchestration import ApplyJob
from ..hosts.base import Host
from ..hosts.fleet import HostResult, fleet_exit_code
from ..hosts.targets import Identity
from ..profile.bundled import shown
from ..profile.load import LoadedProfile, load_profile
from ..render import rollout as render
from ..rollout import journal
from ..rollout.journal import DONE, IN_FLIGHT, NOT_STARTED, HostEntry, Rollout
from ..rollout.run import Pace, Stopped, run_rollout
from ..rollout.waves import FailureBudget, parse_sizes, waves
from .complete import rollout_ids
from .consent import confirm, yes_option
from .exits import exits
from .helptext import SummaryGroup, examples
from .output import Output, output_options
from .remote import RemoteOptions
from .rollout_show import rollout_show

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, option: str) -> float:
    """`30s`, `2m`, `500ms`, `1.5` (seconds)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise UsageError(f"{option} {text!r}: give a duration such as 30s, 2m or 500ms.")
    return float(match.group(1)) * _UNITS[match.group(2)]


@dataclasses.dataclass(frozen=True)
class RolloutOptions:
    """What `tune apply` was given for the waves; kept in the journal for resume."""

    serial: str = "100%"
    max_fail: str = "0"
    canary: tuple[str, ...] = ()
    before_reboot: str | None = None
    after_verify: str | None = None
    pause_between: float = 0.0
    poll: float = 2.0

    @property
    def asked(self) -> bool:
        """Whether any option of the waves was given (then even one -H host rolls out)."""
        return self != RolloutOptions(poll=self.poll)

    def pace(self, forks: int, hook_timeout: float) -> Pace:
        return Pace(
            forks=forks,
            budget=FailureBudget.parse(self.max_fail),
            pause_between=self.pause_between,
            poll=self.poll,
            before_reboot=self.before_reboot,
            after_verify=self.after_verify,
            hook_timeout=hook_timeout,
            canaries=bool(self.canary),
        )


def rollout_options(command: Callable[..., int]) -> Callable[..., int]:
    """`tune apply`'s options of the waves; the command receives them as `waves`."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        kept = {name: kwargs.pop(name) for name in _OPTION_NAMES}
        waves = RolloutOptions(
            serial=kept["serial"],
            max_fail=kept["max_fail"],
            canary=tuple(kept["canary"]),
            before_reboot=kept["before_reboot"],
            after_verify=kept["after_verify"],
            pause_between=parse_duration(kept["pause_between"], "--pause-between"),
            poll=kept["reboot_poll"],
        )
        parse_sizes(waves.serial, "--serial")
        FailureBudget.parse(waves.max_fail)
        return command(*args, waves=waves, **kwargs)

    decorated: Callable[..., int] = wrapper
    for option in reversed(_OPTIONS):
        decorated = option(decorated)
    return decorated


_OPTIONS = [
    click.option(
        "--serial",
        default="100%",
        show_default=True,
        metavar="N|P%|N,M,P%",
        help="Hosts per wave, as Ansible's serial: a number, a percentage of the fleet, or a "
        "list of them whose last repeats (1,5,25%).",
    ),
    click.option(
        "--max-fail",
        default="0",
        show_default=True,
        metavar="N|P%",
        help="Failed hosts the rollout tolerates; past it, it stops before the next wave.",
    ),
    click.option(
        "--canary",
        multiple=True,
        metavar="HOST",
        help="Roll out to HOST first, alone, then ask before the rest (repeatable).",
    ),
    click.option(
        "--before-reboot",
        metavar="CMD",
        help="Run CMD (/bin/sh -c, on this machine) before each host's reboot, e.g. to drain "
        "it; TUNE_HOST, TUNE_WAVE, TUNE_ROLLOUT and the JSON file TUNE_HOST_JSON_FILE names "
        "(also in TUNE_HOST_JSON up to 32 KiB) describe the host.",
    ),
    click.option(
        "--after-verify",
        metavar="CMD",
        help="Run CMD after each host's boot is verified, e.g. to undrain it (same environment).",
    ),
    click.option(
        "--pause-between",
        default="0s",
        metavar="DURATION",
        help="Wait this long between two waves (30s, 2m).",
    ),
    click.option(
        "--reboot-poll",
        type=click.FloatRange(min=0.05),
        default=2.0,
        show_default=True,
        metavar="SECONDS",
        help="How often a rebooting host's boot id is read (on the host while it is up).",
    ),
]
_OPTION_NAMES = (
    "serial",
    "max_fail",
    "canary",
    "before_reboot",
    "after_verify",
    "pause_between",
    "reboot_poll",
)


# The fields of `ApplyJob` a rollout keeps (the profile is the journal's own field).
_JOB_FIELDS = (
    "runtime_only",
    "reboot_phase",
    "reboot",
    "reboot_timeout",
    "with_persistence",
    "after_interrupted",
    "probes",
    "keep_on_regression",
    "restart_containers",
    "skip_missing",
)


def profile_digest(loaded: LoadedProfile) -> str:
    """Of the resolved profile (parents merged): what the hosts are rolled onto."""
    text = json.dumps(loaded.data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _remote_json(remote: RemoteOptions) -> dict[str, Any]:
    kept = dataclasses.asdict(remote.resolved())
    for name in ("inventory", "ssh_config"):
        if kept[name] not in (None, "-"):
            kept[name] = os.path.abspath(kept[name])
    kept["hosts"] = list(kept["hosts"])
    return kept


def start_rollout(
    job: ApplyJob, remote: RemoteOptions, options: RolloutOptions, yes: bool, out: Output
) -> int:
    """A new rollout over the hosts `remote` names: journaled, asked once, then run."""
    if remote.inventory == "-":
        raise UsageError(
            "a rollout reads its inventory again to resume: give a file, not standard input."
        )
    hosts = remote.open()
    names = [host.name for host in hosts]
    cut = waves(names, parse_sizes(options.serial, "--serial"), options.canary)
    shape = " + ".join(str(len(wave)) for wave in cut)
    reboots = "rebooting each" if job.reboot else "no reboot"
    question = (
        f"Roll {shown(job.loaded.path)} out to {counted(len(names), 'host')} in "
        f"{counted(len(cut), 'wave')} ({shape}), "
        f"{reboots}?"
    )
    # A rollout has no --dry-run (`tune plan -i` shows what each host would change).
    confirm(question, yes=yes, command="tune apply", err=out.json or out.to_file, dry_run=False)
    identities = {host.name: host.identity() for host in hosts}
    rollout = Rollout(
        rollout_id=journal.new_rollout_id(),
        profile=os.path.abspath(job.loaded.path),
        digest=profile_digest(job.loaded),
        options={
            "job": {name: getattr(job, name) for name in _JOB_FIELDS},
            "remote": _remote_json(remote),
            "rollout": dataclasses.asdict(options),
        },
        waves=cut,
        hosts={
            name: _pinned(HostEntry(wave=index), identities[name])
            for index, wave in enumerate(cut)
            for name in wave
        },
    )
    rollout.save()
    click.echo(
        f"Rollout {rollout.rollout_id} ({rollout.path}): `tune rollout status` shows it, "
        "`tune rollout resume` continues it.",
        err=True,
    )
    return _run(rollout, job, remote, options, hosts, yes, out)


def _run(
    rollout: Rollout,
    job: ApplyJob,
    remote: RemoteOptions,
    options: RolloutOptions,
    hosts: Sequence[Host],
    yes: bool,
    out: Output,
) -> int:
    show = rollout_show(rollout, yes, out)
    engines = {host.name: engine_for(host, timeout=remote.command_timeout) for host in hosts}
    pace = options.pace(remote.fleet_forks(), job.reboot_timeout)
    # Ctrl-C too stops the live table: its last state stays, the cursor comes back.
    with show.showing():
        try:
            run_rollout(engines, job, rollout, pace, show)
        except Stopped:
            pass  # in the summary
        finally:
            for host in hosts:
                host.close()
    show.summary()
    results = [
        HostResult(name, value=entry)
        if entry.state == DONE
        else HostResult(name, error=TuneError(entry.why or entry.state))
        for name, entry in rollout.hosts.items()
    ]
    return fleet_exit_code(results, lambda _: True)


@examples(
    (
        "The newest rollout",
        "tune rollout status",
    ),
)
@click.group("rollout", cls=SummaryGroup)
def rollout_group() -> None:
    """Rollouts of `tune apply --reboot` over a fleet: list them, show one, or resume it."""


def _none(out: Output) -> int:
    if out.json:
        out.document(render.no_rollout_document(journal.rollouts_directory()))
    else:
        out.echo(f"No rollout journaled in {journal.rollouts_directory()}.")
    return ExitCode.IN_SYNC


@exits(ExitCode.IN_SYNC, ExitCode.JOURNAL, ExitCode.USAGE)
@examples(
    (
        "The newest rollout: each host's wave and state",
        "tune rollout status",
    ),
    (
        "The same as JSON",
        "tune rollout status --format json",
    ),
)
@rollout_group.command("status")
@click.argument("rollout_id", required=False, metavar="[ID]", shell_complete=rollout_ids)
@output_options("text", "json")
def status(rollout_id: str | None, out: Output) -> int:
    """Show a rollout (by default the newest): each host's wave, state, configuration and
    time, and why a host failed."""
    rollout = journal.load(rollout_id) if rollout_id else journal.newest()
    if rollout is None:
        return _none(out)
    if out.json:
        out.document(render.status_document(rollout))
        return ExitCode.IN_SYNC
    out.echo(render.table(rollout), nl=False)
    out.echo(render.summary(rollout), nl=False)
    return ExitCode.IN_SYNC


@exits(ExitCode.IN_SYNC, ExitCode.JOURNAL, ExitCode.USAGE)
@examples(
    (
        "The rollouts this controller journaled, newest first, with their state",
        "tune rollout list",
    ),
    (
        "The same as JSON",
        "tune rollout list --format json",
    ),
)
@rollout_group.command("list")
@output_options("text", "json")
def list_rollouts(out: Output) -> int:
    """The rollouts this controller knows, newest first: each one's state (finished, stopped
    before a wave, or interrupted: hosts left and no stop journaled), its hosts' counts and
    its profile."""
    found = journal.known()
    if not found:
        return _none(out)
    rows: list[Rollout | render.UnreadableRollout] = []
    for path in found:
        try:
            rows.append(journal.load(path.stem))
        except TuneError as exc:  # one damaged journal hides none of the others
            rows.append(render.UnreadableRollout(path.stem, str(exc)))
    if out.json:
        out.document(render.list_document(rows))
    else:
        out.echo(render.list_table(rows), nl=False)
    return ExitCode.IN_SYNC


# What `tune rollout resume` may change of a rollout: how fast it goes and how much failure it
# tolerates, nothing of what it does. The waves (--serial, --canary) are cut when it starts
# and each host's place in them is journaled; the hooks (--before-reboot, --after-verify) pair
# a drain with its undrain on every host; the profile, the hosts and the apply's options are
# what the hosts done so far got: a change of any of these would make it another rollout.
_RESUME_OPTIONS = [
    click.option(
        "--max-fail",
        metavar="N|P%",
        help="Failed hosts the rollout tolerates from now on (default: as it started, or as "
        "the last resume set it); a larger one goes on past the wave it stopped before.",
    ),
    click.option(
        "--forks",
        type=click.IntRange(1, 1000),
        help="Hosts to work on at once (default: as the rollout started).",
    ),
    click.option(
        "--pause-between",
        metavar="DURATION",
        help="Wait this long between two waves (default: as the rollout started).",
    ),
    click.option(
        "--reboot-poll",
        type=click.FloatRange(min=0.05),
        metavar="SECONDS",
        help="How often a rebooting host's boot id is read (default: as the rollout started).",
    ),
    click.option(
        "--reboot-timeout",
        type=click.FloatRange(min=1),
        metavar="SECONDS",
        help="How long a host's reboot is waited for (default: as the rollout started).",
    ),
]


def _resume_options(command: Callable[..., int]) -> Callable[..., int]:
    decorated = command
    for option in reversed(_RESUME_OPTIONS):
        decorated = option(decorated)
    return decorated


def _changed_options(
    max_fail: str | None,
    forks: int | None,
    pause_between: str | None,
    reboot_poll: float | None,
    reboot_timeout: float | None,
) -> dict[str, dict[str, Any]]:
    """What the resume's command line changes, by the journal's groups of options."""
    waves: dict[str, Any] = {}
    if max_fail is not None:
        FailureBudget.parse(max_fail)
        waves["max_fail"] = max_fail
    if pause_between is not None:
        waves["pause_between"] = parse_duration(pause_between, "--pause-between")
    if reboot_poll is not None:
        waves["poll"] = reboot_poll
    changes = {
        "rollout": waves,
        "remote": {} if forks is None else {"forks": forks},
        "job": {} if reboot_timeout is None else {"reboot_timeout": reboot_timeout},
    }
    return {group: values for group, values in changes.items() if values}


@exits(
    ExitCode.IN_SYNC,
    ExitCode.HOST_ERROR,
    ExitCode.JOURNAL,
    ExitCode.NOT_CONFIRMED,
    ExitCode.USAGE,
    ExitCode.INVALID_PROFILE,
)
@examples(
    (
        "Go on with the newest rollout where it stopped",
        "tune rollout resume",
    ),
)
@rollout_group.command("resume")
@click.argument("rollout_id", required=False, metavar="[ID]", shell_complete=rollout_ids)
@_resume_options
@yes_option
@output_options("text", "json")
def resume(
    rollout_id: str | None,
    max_fail: str | None,
    forks: int | None,
    pause_between: str | None,
    reboot_poll: float | None,
    reboot_timeout: float | None,
    yes: bool,
    out: Output,
) -> int:
    """Continue a rollout (by default the newest) where it stopped: a host in flight is asked
    where it is (its pending record, its run journal, its boot id against the one recorded
    before its reboot) and goes on from there; none is rebooted twice, none skipped. A
    rollout stopped by --max-fail goes on with a larger --max-fail; a failed host stays as it
    ended. The profile must be the one the rollout started with; only the options above may
    change (journaled: the next resume keeps them)."""
    changes = _changed_options(max_fail, forks, pause_between, reboot_poll, reboot_timeout)
    rollout = journal.load(rollout_id) if rollout_id else journal.newest()
    if rollout is None:
        return _none(out)
    loaded = load_profile(rollout.profile)
    if profile_digest(loaded) != rollout.digest:
        raise UsageError(
            f"{rollout.profile} changed since rollout {rollout.rollout_id} started: resume rolls "
            "out the profile it started with; start a new rollout for this one."
        )
    job, remote, wave_options = _kept_options(rollout, loaded, changes)
    hosts = [host for host in remote.open() if host.name in rollout.hosts]
    missing = sorted(set(rollout.hosts) - {host.name for host in hosts})
    if missing:
        raise UsageError(f"host {missing[0]} of the rollout is no longer in its inventory.")
    for host in hosts:
        entry = rollout.hosts[host.name]
        pinned, now = entry.identity(), host.identity()
        if entry.state in (NOT_STARTED, IN_FLIGHT) and pinned is not None and now is not None:
            changed = pinned.changes(now)
            if changed:
                raise UsageError(
                    f"host {host.name} of rollout {rollout.rollout_id} is not the machine it "
                    f"started on: {'; '.join(changed)}; resume reaches no other machine under "
                    "its name (restore the inventory or ssh_config as it was)."
                )
    if changes:  # once the resume is known to reach the same machines
        rollout.change_options(changes)
    return _run(rollout, job, remote, wave_options, hosts, yes, out)


def _pinned(entry: HostEntry, identity: Identity | None) -> HostEntry:
    if identity is None:
        return entry
    return dataclasses.replace(
        entry, address=identity.address, port=identity.port, user=identity.user
    )


def _kept_options(
    rollout: Rollout, loaded: LoadedProfile, changes: dict[str, dict[str, Any]]
) -> tuple[ApplyJob, RemoteOptions, RolloutOptions]:
    """The options the rollout started with, as its journal keeps them, and `changes` (a
    resume's): each of the type tune wrote, or a `JournalError` naming the file."""
    path = rollout.path or journal.rollouts_directory()
    options = journal.merged_options(rollout.options, changes)
    kept = journal.fields(
        {"job": "dict", "remote": "dict", "rollout": "dict"}, options, path, "options"
    )
    # Fields a later tune added are absent from an older journal: their defaults hold.
    job = journal.fields(
        journal.dataclass_fields(ApplyJob, _JOB_FIELDS), kept["job"], path, "job", required=False
    )
    remote = journal.fields(
        journal.dataclass_fields(RemoteOptions), kept["remote"], path, "remote", required=False
    )
    waves = journal.fields(
        journal.dataclass_fields(RolloutOptions), kept["rollout"], path, "rollout", required=False
    )
    return (
        ApplyJob(loaded, **job),
        RemoteOptions(**remote | {"hosts": tuple(remote.get("hosts", ()))}),
        RolloutOptions(**waves | {"canary": tuple(waves.get("canary", ()))}),
    )
