"""Pull mode on a real systemd: the example units installed in the guest as docs/fleets/pull.md
tells a user to (`tune examples systemd`, /etc/tune/pull.env naming a released profile by
file:// URL and digest), each timer fired by systemd itself, and what tune then did on the
guest's kernel: the textfile collector's metrics, the live sysctl, the run in `tune history`;
and a push from the controller while the pull's apply holds the host's lock.

A drop-in moves each timer from its quarter hour to a second after it starts (with a small
randomized delay, as a fleet's); restarting the timer fires it again. The test leaves the
guest as it found it: units, environment file, profile and metrics removed, the apply rolled
back by the guest's own `tune rollback`, tune uninstalled at the end of the module.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run_tune
from prometheus_client.parser import text_string_to_metric_families

from . import guest, over_ssh
from .over_ssh import write_profile
from .vm import Vm

PROFILE_NAME = "pull-e2e"
PROFILE = "/srv/tune/gpu.yaml"
ENV_FILE = "/etc/tune/pull.env"
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"  # node_exporter's package creates it
METRICS = f"{TEXTFILE_DIR}/tune.prom"
UNIT_DIR = "/etc/systemd/system"
TIMERS = {
    "tune-pull.timer": "tune-pull.service",
    "tune-pull-apply.timer": "tune-pull-apply.service",
}
LOCK = "/run/tune/tune.lock"
# A sysctl every kernel has, at a value the guest's default (60) is not.
KEY, WANTED = "vm.swappiness", "10"
FIRE_NOW = "[Timer]\nOnCalendar=\nOnActiveSec=1s\nRandomizedDelaySec=2s\n"
# One run is tune's start-up (importing pydantic) and a check or an apply, under TCG.
RUN_TIMEOUT = 300.0


@dataclass(frozen=True)
class Released:
    tune: str  # the guest's
    profile: Path  # the controller's copy
    digest: str


@pytest.fixture
def released(vm: Vm, guest_tune_path: str, tmp_path: Path, clean_state: None) -> Iterator[Released]:
    """The profile released to the guest and the pull units installed, timers stopped."""
    profile = write_profile(tmp_path, f"name: {PROFILE_NAME}\nsysctl:\n  {KEY}: {WANTED}\n")
    # Where the profile is released: the controller's tune prints its digest.
    digest = run_tune("validate", profile).out.rsplit("; ", 1)[1].strip()
    assert digest.startswith("sha256:"), digest
    tune = guest_tune_path
    try:
        vm.run("mkdir", "-p", "/srv/tune", "/etc/tune", TEXTFILE_DIR)
        guest.write_file(vm, PROFILE, profile.read_text())
        example_env = vm.run(tune, "examples", "systemd", "tune-pull.env").stdout
        env = re.sub(r"(?m)^PROFILE_URL=.*$", f"PROFILE_URL=file://{PROFILE}", example_env)
        env = re.sub(r"(?m)^PROFILE_DIGEST=.*$", f"PROFILE_DIGEST={digest}", env)
        guest.write_file(vm, ENV_FILE, env)
        for timer, service in TIMERS.items():
            for unit in (timer, service):
                vm.sh(f"{tune} examples systemd {unit} > {UNIT_DIR}/{unit}")
            vm.run("mkdir", "-p", f"{UNIT_DIR}/{timer}.d")
            guest.write_file(vm, f"{UNIT_DIR}/{timer}.d/fire-now.conf", FIRE_NOW)
        vm.run("systemctl", "daemon-reload")
        yield Released(tune, profile, digest)
    finally:
        vm.run("systemctl", "disable", "--now", *TIMERS, check=False)
        units = [f"{UNIT_DIR}/{u}" for pair in TIMERS.items() for u in pair]
        drop_ins = [f"{UNIT_DIR}/{t}.d" for t in TIMERS]
        vm.run("rm", "-rf", *units, *drop_ins, "/etc/tune", "/srv/tune", TEXTFILE_DIR)
        vm.run("systemctl", "daemon-reload")
        vm.run("systemctl", "reset-failed", *TIMERS.values(), check=False)


def shown(vm: Vm, unit: str, *props: str) -> dict[str, str]:
    args = [arg for prop in props for arg in ("-p", prop)]
    lines = vm.run("systemctl", "show", unit, *args).stdout.splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def fire(vm: Vm, timer: str) -> dict[str, str]:
    """(Re)start `timer` and wait until the run of its service that the timer started has
    ended; returns that run's properties as `systemctl show` gives them."""
    before = shown(vm, TIMERS[timer], "InvocationID")["InvocationID"]
    vm.run("systemctl", "enable", timer)
    vm.run("systemctl", "restart", timer)
    return wait_for_end(vm, timer, before)


def wait_for_end(vm: Vm, timer: str, before: str) -> dict[str, str]:
    """Wait until a run of `timer`'s service other than the run `before` (an invocation id) has
    ended; its properties."""
    service = TIMERS[timer]
    props = ("InvocationID", "ActiveState", "Result", "ExecMainStatus")
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        now = shown(vm, service, *props)
        ran = now["InvocationID"] not in ("", before)
        if ran and now["ActiveState"] in ("inactive", "failed"):
            return now
        if time.monotonic() > deadline:
            status = vm.run("systemctl", "status", "--no-pager", "-l", timer, service, check=False)
            journal = vm.run("journalctl", "-b", "--no-pager", "-u", timer, "-u", service)
            raise AssertionError(
                f"{timer} did not run {service} to its end within {RUN_TIMEOUT:.0f}s "
                f"(now {now})\n{status.stdout}\n{journal.stdout}"
            )
        time.sleep(2)


def run_log(vm: Vm, invocation: str) -> str:
    """What one run of a unit wrote to the journal (tune's output included)."""
    return vm.run(
        "journalctl", "-b", "--no-pager", "-o", "cat", f"_SYSTEMD_INVOCATION_ID={invocation}"
    ).stdout


def metrics(vm: Vm) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The textfile collector's file as Prometheus's own parser reads it: (name, labels) ->
    value."""
    text = vm.run("cat", METRICS).stdout
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def of_profile(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"profile": PROFILE_NAME, **labels}.items()))


KNOB = of_profile(kind="sysctl", target=KEY, phase="runtime")
# What makes the sysctl hold across a reboot (systemd-sysctl): the profile's second entry.
PERSISTED = of_profile(kind="file", target="/etc/sysctl.d/90-tune.conf", phase="runtime")


def history_of(vm: Vm, tune: str) -> list[dict[str, object]]:
    """`tune history` in the guest, run there as an operator on the host would."""
    out = vm.run(tune, "history", "--format", "json").stdout
    runs: list[dict[str, object]] = json.loads(out)["runs"]
    return runs


def test_the_check_timer_reports_the_drift_through_the_textfile_collector(
    vm: Vm, released: Released
) -> None:
    before = guest.sysctl(vm, KEY)
    assert before != WANTED
    printed = vm.run(released.tune, "examples", "systemd", "tune-pull.service").stdout
    assert f"ExecStart={released.tune} check ${{PROFILE_URL}} " in printed  # the guest's tune

    run = fire(vm, "tune-pull.timer")

    # Exit 2, never applied: a finding (SuccessExitStatus=2), not a failed unit.
    assert (run["Result"], run["ExecMainStatus"]) == ("success", "2"), run_log(
        vm, run["InvocationID"]
    )
    found = metrics(vm)
    assert found[("tune_check_success", ())] == 1
    assert found[("tune_knob_in_sync", KNOB)] == 0
    assert found[("tune_knob_in_sync", PERSISTED)] == 0
    assert found[("tune_knobs_drifted", of_profile())] == 2
    assert found[("tune_applied", of_profile())] == 0
    # Written in the state directory the unit's sandbox leaves writable.
    assert ("tune_drift_first_seen_timestamp_seconds", of_profile()) in found
    assert guest.sysctl(vm, KEY) == before  # the check only read


def test_the_apply_timer_applies_journals_and_then_changes_nothing(
    vm: Vm, released: Released
) -> None:
    tune = released.tune
    before = guest.sysctl(vm, KEY)
    assert before != WANTED
    try:
        first = fire(vm, "tune-pull-apply.timer")

        assert (first["Result"], first["ExecMainStatus"]) == ("success", "0"), run_log(
            vm, first["InvocationID"]
        )
        assert guest.sysctl(vm, KEY) == WANTED  # on the live kernel
        runs = history_of(vm, tune)
        assert [(r["profile"], r["phase"], r["outcome"], r["changes"]) for r in runs] == [
            (PROFILE_NAME, "runtime", "applied", 2)
        ], runs
        # The unit's ExecStopPost check, after the apply.
        found = metrics(vm)
        assert found[("tune_check_success", ())] == 1
        assert found[("tune_knob_in_sync", KNOB)] == 1
        assert found[("tune_knob_in_sync", PERSISTED)] == 1
        assert found[("tune_applied", of_profile())] == 1
        assert found[("tune_knobs_drifted", of_profile())] == 0
        checked = found[("tune_last_check_timestamp_seconds", ())]

        second = fire(vm, "tune-pull-apply.timer")

        assert (second["Result"], second["ExecMainStatus"]) == ("success", "0")
        assert "In sync: nothing to change" in run_log(vm, second["InvocationID"])
        assert history_of(vm, tune) == runs  # no second run journaled
        assert guest.sysctl(vm, KEY) == WANTED
        again = metrics(vm)
        assert again[("tune_last_check_timestamp_seconds", ())] > checked
        assert again[("tune_knob_in_sync", KNOB)] == 1
    finally:
        vm.run(tune, "rollback", "--yes", check=False)
    assert guest.sysctl(vm, KEY) == before


# In the guest: once the pull's apply holds the lock, stop its process there (SIGSTOP) and
# print its pid; polled in the guest, an SSH round trip under TCG is slower than a run.
# The whole unit is stopped, not only its main process: the apply runs in tune's sh script,
# detached from it (setsid), and that script holds the lock and names its own pid in it.
PULL_APPLY = TIMERS["tune-pull-apply.timer"]
STOP_THE_PULL = f"""
while :; do
    main=$(systemctl show -p MainPID --value {PULL_APPLY})
    # The holder's pid as the lock records it: alive once this run wrote its record.
    pid=$(head -n 1 {LOCK} 2>/dev/null | cut -d ' ' -f 1)
    if [ "$main" != 0 ] && ! flock -n {LOCK} true &&
        [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        systemctl kill --signal=SIGSTOP {PULL_APPLY}; echo "$pid"; exit
    fi
    sleep 0.1
done
"""


def test_a_push_while_the_pull_applies_gives_up_naming_the_pull(vm: Vm, released: Released) -> None:
    tune = released.tune
    before = guest.sysctl(vm, KEY)
    try:
        vm.run("systemctl", "enable", "--now", "tune-pull-apply.timer")
        pid = vm.sh(STOP_THE_PULL, timeout=RUN_TIMEOUT).stdout.strip()
        try:
            # Still held: the pull was stopped inside its run, not after it.
            assert vm.run("flock", "-n", LOCK, "true", check=False).returncode == 1
            # A push with something to write (the pull may have written its one knob before it
            # was stopped, and an apply in sync takes no lock): it must wait for the lock.
            other = write_profile(
                released.profile.parent, f"name: push-e2e\nsysctl:\n  {KEY}: 11\n", "push.yaml"
            )
            pushed = over_ssh.apply(vm, other)
        finally:
            vm.run("systemctl", "kill", "--signal=SIGCONT", PULL_APPLY)

        assert pushed.code == 1, pushed.out + pushed.err
        pull = (
            f"tune apply file://{PROFILE} --profile-digest {released.digest} --runtime-only --yes"
        )
        assert re.search(
            rf"another tune run holds {re.escape(LOCK)} \(pid {pid}, since [0-9TZ:-]+: "
            rf"{re.escape(pull)}\); gave up after 5 s\.",
            pushed.err,
        ), pushed.err
        # The pull goes on where it stopped, alone.
        run = wait_for_end(vm, "tune-pull-apply.timer", before="")
        assert (run["Result"], run["ExecMainStatus"]) == ("success", "0")
        assert guest.sysctl(vm, KEY) == WANTED
        runs = history_of(vm, tune)
        assert [(r["profile"], r["outcome"]) for r in runs] == [(PROFILE_NAME, "applied")]
    finally:
        vm.run(tune, "rollback", "--yes", check=False)
    assert guest.sysctl(vm, KEY) == before
