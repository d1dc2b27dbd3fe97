"""Rollouts of the reboot phase over a fleet of lab hosts (real sshd on loopback addresses,
the sh library's emulated reboot): waves, canaries, the failure budget, the hooks, the
controller's journal, resume after a SIGKILL, a host that never comes back."""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import BLACKWELL, UNTUNED, copy_host, run_tune, write
from small_host import SmallHost, build
from ssh_fixture import SshLab, StartLab, minimal_host, sshd_available

from reconciler.apply.journal import read_run, run_ids
from reconciler.core.errors import JournalError
from reconciler.hosts.directory import SnapshotHost
from reconciler.rollout import journal
from reconciler.rollout.waves import FailureBudget, Size, parse_sizes, waves

lab_only = pytest.mark.skipif(
    not sshd_available(), reason="needs root and openssh-server (.ci/run installs it)"
)

NEW_CMDLINE = "BOOT_IMAGE=/vmlinuz quiet amd_pstate=active processor.max_cstate=1\n"
BOOT_ID = "proc/sys/kernel/random/boot_id"
# A boot is seen within one poll of the emulated reboot; the timeout only bounds a failure, and a
# loaded 2-core machine has taken over 20 s to schedule a detached reboot.
FAST = ("--reboot-poll", "0.1", "--reboot-timeout", "120", "--no-probes", "-y")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The untuned example cut down to what the Blackwell profile reads, GRUB_DEFAULT=saved
    (a try-once boot)."""
    root = minimal_host(UNTUNED, BLACKWELL, tmp_path_factory.mktemp("t") / "untuned")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0", "GRUB_DEFAULT=saved"))
    return root


def fleet(tmp_path: Path, template: Path, count: int) -> dict[str, Path]:
    # Copies, not hard links: the emulated reboot rewrites /proc/cmdline in place.
    return {f"h{n}": copy_host(template, tmp_path / f"h{n}") for n in range(1, count + 1)}


def hosts_args(lab: SshLab) -> list[str]:
    return [arg for name in lab.roots for arg in ("-H", name)]


def rollout(lab: SshLab, *args: str | Path, terminal: bool = False) -> Any:
    return run_tune(
        "apply",
        BLACKWELL,
        "--reboot",
        "--ssh-config",
        lab.config,
        *FAST,
        *hosts_args(lab),
        *args,
        terminal=terminal,
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_reboot_is_waited_for_on_the_host_not_by_a_round_trip_a_poll(
    tmp_path: Path, template: Path, start_lab: StartLab
) -> None:
    """Two hosts in one wave, polled every 0.1 s; h2's reboot takes 3 s, h1's none. h2 reads
    its boot id 30 times more, on the host (`ShellHost.value_unlike`): at most one round trip
    more than h1, not an SSH session a poll."""
    roots = fleet(tmp_path, template, 2)
    write(roots["h1"], ".tune-emulate/reboot-seconds", "0\n")
    write(roots["h2"], ".tune-emulate/reboot-seconds", "3\n")
    lab = start_lab(roots)
    done = rollout(lab)
    assert done.code == 0, done.out + done.err
    requests = lab.exec_requests()
    assert requests["h2"] - requests["h1"] <= 1, requests
    for root in roots.values():
        assert len((root / ".tune-emulate/boots").read_text().split()) == 1


# Waves, as Ansible cuts them.


def test_serial_is_read_as_ansible_reads_it() -> None:
    hosts = [f"h{n}" for n in range(1, 21)]
    assert parse_sizes("1,5,25%", "--serial") == [Size(1), Size(5), Size(25, percent=True)]
    cut = waves(hosts, parse_sizes("1,5,25%", "--serial"))
    assert [len(w) for w in cut] == [1, 5, 5, 5, 4]
    assert [n for w in cut for n in w] == hosts
    # A percentage rounds down, never to 0.
    assert [len(w) for w in waves(hosts[:3], [Size(10, percent=True)])] == [1, 1, 1]
    # The canaries alone first; percentages still count the whole fleet.
    cut = waves(hosts, parse_sizes("25%", "--serial"), ["h7"])
    assert cut[0] == ["h7"] and [len(w) for w in cut[1:]] == [5, 5, 5, 4]
    assert "h7" not in [n for w in cut[1:] for n in w]


@pytest.mark.parametrize("text", ["0", "", "a", "1,,2", "150%", "-1"])
def test_a_serial_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(Exception, match="--serial"):
        parse_sizes(text, "--serial")


def test_the_failure_budget_counts_hosts_or_a_share_of_the_fleet() -> None:
    assert FailureBudget.parse("0").allowed(20) == 0
    assert FailureBudget.parse("2").allowed(20) == 2
    assert FailureBudget.parse("10%").allowed(20) == 2
    assert FailureBudget.parse("10%").allowed(9) == 0


def test_options_of_the_waves_that_cannot_apply_are_refused(tmp_path: Path) -> None:
    untuned = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    hosts = ("-H", "a", "-H", "b")
    hooked = run_tune("apply", BLACKWELL, "--runtime-only", *hosts, "--before-reboot", "true")
    assert hooked.code == 64 and "--before-reboot and --after-verify run around a reboot" in (
        hooked.err
    )
    local = run_tune("apply", BLACKWELL, "--root", untuned, "--serial", "1", "-y")
    assert local.code == 64 and "roll out over -H hosts" in local.err
    bad = run_tune("apply", BLACKWELL, "--reboot", *hosts, "--serial", "1,0")
    assert bad.code == 64 and "--serial '1,0'" in bad.err
    unknown = run_tune("apply", BLACKWELL, "--reboot", *hosts, "--canary", "c", "-y")
    assert unknown.code == 64 and "--canary c is not one of the hosts" in unknown.err


def test_status_without_a_rollout_says_so_and_resume_reads_only_a_private_journal() -> None:
    none = run_tune("rollout", "status")
    assert (none.code, none.err) == (0, "")
    assert none.out.startswith("No rollout journaled in ")
    saved = journal.Rollout(
        journal.new_rollout_id(), str(BLACKWELL), "0", {}, [["h1"]], {"h1": journal.HostEntry(0)}
    )
    saved.save()
    shown = run_tune("rollout", "status", saved.rollout_id)
    assert shown.code == 0 and "1 not started" in shown.out
    assert saved.path is not None
    saved.path.chmod(0o622)  # others may write it: resume would run their hooks
    refused = run_tune("rollout", "resume", "-y")
    assert refused.code == 6 and "not this user's alone" in refused.err
    assert run_tune("rollout", "status", "20990101T000000Z-abcdef").code == 64


def _three_hosts() -> journal.Rollout:
    hosts = {name: journal.HostEntry(0) for name in ("h1", "h2", "h3")}
    saved = journal.Rollout(journal.new_rollout_id(), str(BLACKWELL), "0", {}, [list(hosts)], hosts)
    saved.save()
    return saved


def test_a_transition_appends_one_line_and_leaves_the_rest_of_the_journal_as_it_was() -> None:
    saved = _three_hosts()
    assert saved.path is not None
    started = saved.path.read_bytes()
    saved.update("h2", state=journal.IN_FLIGHT, run_id="r2", rebooting=True)
    saved.update("h2", state=journal.DONE, configuration="new")
    saved.stop("waiting")
    text = saved.path.read_bytes()
    assert text.startswith(started) and text.count(b"\n") == started.count(b"\n") + 3
    # The whole rollout is not written again: a transition's line names its host and changes.
    assert len(text) - len(started) < len(started)
    loaded = journal.load(saved.rollout_id)
    assert loaded.hosts == saved.hosts and loaded.stopped == "waiting"
    assert loaded.hosts["h2"] == journal.HostEntry(
        0, journal.DONE, run_id="r2", rebooting=True, configuration="new"
    )


def test_a_last_transition_cut_short_is_left_out_and_a_damaged_one_before_it_is_refused() -> None:
    saved = _three_hosts()
    assert saved.path is not None
    saved.update("h1", state=journal.IN_FLIGHT, run_id="r1")
    whole = saved.path.read_bytes()
    saved.path.write_bytes(whole + b'{"host": "h1", "set": {"rebo')
    assert journal.load(saved.rollout_id).hosts["h1"].rebooting is False
    saved.path.write_bytes(whole + b'{"host": "h1", "set": {"rebo\n' + whole.splitlines()[-1])
    with pytest.raises(JournalError):
        journal.load(saved.rollout_id)
    saved.path.write_bytes(whole + b'{"host": "h1", "set": {"state": "sideways"}}\n')
    with pytest.raises(JournalError, match="state tune does not know"):
        journal.load(saved.rollout_id)


# The lab.


@pytest.mark.slow
@lab_only
def test_waves_reboot_verify_and_journal_every_host(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots = fleet(tmp_path, template, 4)
    lab = start_lab(roots)
    result = rollout(lab, "--serial", "1,2", "--format", "json")
    assert result.code == 0, result.out + result.err
    lines = json_lines(result.out)
    hosts = [line for line in lines if "host" in line]
    # In wave order; within a wave, as the hosts end.
    assert [h["wave"] for h in hosts] == [1, 2, 2, 3]
    assert sorted((h["host"]["name"], h["wave"], h["state"]) for h in hosts) == [
        ("h1", 1, "done"),
        ("h2", 2, "done"),
        ("h3", 2, "done"),
        ("h4", 3, "done"),
    ]
    summary = lines[-1]
    assert summary["kind"] == "rollout"
    assert summary["counts"]["done"] == 4
    assert summary["configurations"]["new"] == ["h1", "h2", "h3", "h4"]
    for root in roots.values():
        assert (root / "proc/cmdline").read_text() == NEW_CMDLINE
        assert not (root / "var/lib/tune/pending.json").exists()
        host = SnapshotHost(root)
        (run_id,) = run_ids(host)
        run = read_run(host, run_id)
        assert run is not None and run.outcome == "applied"
    saved = journal.load(None)
    assert saved.waves == [["h1"], ["h2", "h3"], ["h4"]]
    assert {e.state for e in saved.hosts.values()} == {journal.DONE}
    assert saved.path is not None and saved.path.stat().st_mode & 0o777 == 0o600
    assert saved.path.parent.stat().st_mode & 0o777 == 0o700


@pytest.mark.slow
@lab_only
def test_an_emulated_reboot_of_fixed_duration_keeps_the_old_boot_id_meanwhile(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots = fleet(tmp_path, template, 2)
    for root in roots.values():
        write(root, ".tune-emulate/reboot-seconds", "2\n")
    boot_ids = {n: (r / "proc/sys/kernel/random/boot_id").read_text() for n, r in roots.items()}
    lab = start_lab(roots)
    started = time.monotonic()
    result = rollout(lab, "--serial", "1")
    took = time.monotonic() - started
    assert result.code == 0, result.out + result.err
    # Two waves of one host, each rebooting for 2 s, one after the other.
    assert took >= 4, took
    for name, root in roots.items():
        assert (root / "proc/sys/kernel/random/boot_id").read_text() != boot_ids[name]
        assert (root / "proc/cmdline").read_text() == NEW_CMDLINE
    assert "wave 2  h2  rebooting" in result.out
    assert "2 applied, 0 rolled back, 0 failed, 0 not started" in result.out


def boots(root: Path) -> list[str]:
    """The boot ids the emulated reboots made, in order."""
    log = root / ".tune-emulate/boots"
    return log.read_text().split() if log.exists() else []


def emulated(roots: dict[str, Path]) -> None:
    for root in roots.values():
        (root / ".tune-emulate").mkdir(exist_ok=True)


def fails_verification(root: Path) -> None:
    """Its next boot comes up without the new parameters (the boot loader ignored them)."""
    write(root, ".next-boot/proc/cmdline", "BOOT_IMAGE=/vmlinuz quiet\n")


HOOK = """#!/bin/sh
# $1: which hook; what the host looks like to the hook: its boot id now.
printf '%s %s %s %s %s\\n' "$1" "$TUNE_HOST" "$TUNE_WAVE" "$TUNE_ROLLOUT" \\
    "$(cat "$ROOTS/$TUNE_HOST/proc/sys/kernel/random/boot_id")" >>"$LOG"
printf '%s\\n' "$TUNE_HOST_JSON" >>"$LOG.json"
"""


def recording_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The test hook script and the log it appends each call to (it finds the hosts' roots
    under $ROOTS)."""
    log = tmp_path / "hooks.log"
    monkeypatch.setenv("ROOTS", str(tmp_path))
    monkeypatch.setenv("LOG", str(log))
    return write(tmp_path, "hook.sh", HOOK), log


@pytest.mark.slow
@lab_only
def test_twenty_hosts_in_waves_with_a_canary_hooks_and_one_failure_within_the_budget(
    tmp_path: Path, start_lab: StartLab, template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = fleet(tmp_path, template, 20)
    emulated(roots)
    fails_verification(roots["h9"])
    before = {
        n: (r / "proc/sys/kernel/random/boot_id").read_text().strip() for n, r in roots.items()
    }
    hook, log = recording_hook(tmp_path, monkeypatch)
    lab = start_lab(roots)
    result = rollout(
        lab,
        "--serial", "1,5,25%",
        "--canary", "h20",
        "--max-fail", "1",
        "--before-reboot", f"sh {hook} before",
        "--after-verify", f"sh {hook} after",
        "--forks", "5",
    )  # fmt: skip
    assert result.code == 1, result.out + result.err  # a host failed: as other fleet commands
    saved = journal.load(None)
    # The canary alone, then 1, 5, 5 (25% of 20), 5 and the 3 left.
    assert [len(w) for w in saved.waves] == [1, 1, 5, 5, 5, 3]
    assert saved.waves[0] == ["h20"]
    states = {n: e.state for n, e in saved.hosts.items()}
    assert states.pop("h9") == journal.ROLLED_BACK, saved.hosts["h9"].why
    assert set(states.values()) == {journal.DONE}
    assert saved.hosts["h9"].configuration == "prior"
    assert "processor.max_cstate" in (saved.hosts["h9"].why or "")
    assert "19 applied, 1 rolled back, 0 failed, 0 not started" in result.out
    assert "on the prior configuration: h9" in result.out
    # h9 is back on its prior boot configuration; every host booted exactly once.
    assert not (roots["h9"] / "etc/default/grub.d/90-tune.cfg").exists()
    for name, root in roots.items():
        assert len(boots(root)) == 1, name
    # The hooks: before each reboot (the old boot id), after each verified boot (the new), in
    # the host's wave; none after h9's failed verification; the waves in order.
    lines = [line.split() for line in log.read_text().splitlines()]
    assert all(rollout_id == saved.rollout_id for *_, rollout_id, _ in lines)
    seen = {(hook, host): (int(wave), boot) for hook, host, wave, _, boot in lines}
    for name, entry in saved.hosts.items():
        wave, boot = seen[("before", name)]
        assert (wave, boot) == (entry.wave + 1, before[name])
        if name != "h9":
            assert seen[("after", name)] == (entry.wave + 1, boots(roots[name])[0])
    assert ("after", "h9") not in seen
    waves_seen = [int(wave) for _, _, wave, _, _ in lines]
    assert waves_seen == sorted(waves_seen)
    described = [
        json.loads(line) for line in (tmp_path / "hooks.log.json").read_text().splitlines()
    ]
    first = next(d for d in described if d["host"] == "h20")
    # The address is what ssh connects to: here the lab's ssh_config alias.
    assert first["address"] == "h20" and first["run"] == saved.hosts["h20"].run_id
    assert first["wave"] == 1 and first["rollout"] == saved.rollout_id


@pytest.mark.slow
@lab_only
def test_a_wave_wider_than_forks_reboots_together(
    tmp_path: Path, start_lab: StartLab, template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host waiting for its reboot holds no fork: with --forks 1, the second host of the wave
    is written and asked to reboot while the first one is still rebooting; before, it waited
    out the first one's whole reboot and verification. (The first host polls again only once
    the second has let its fork go, so the order does not depend on the machine's speed.)"""
    roots = fleet(tmp_path, template, 2)
    for root in roots.values():
        write(root, ".tune-emulate/reboot-seconds", "5\n")
    hook, log = recording_hook(tmp_path, monkeypatch)
    lab = start_lab(roots)
    result = rollout(
        lab,
        "--serial", "2",
        "--forks", "1",
        "--before-reboot", f"sh {hook} before",
        "--after-verify", f"sh {hook} after",
    )  # fmt: skip
    assert result.code == 0, result.out + result.err
    hooks = [line.split()[0] for line in log.read_text().splitlines()]
    assert hooks == ["before", "before", "after", "after"], result.out
    assert [len(boots(root)) for root in roots.values()] == [1, 1]


@pytest.mark.slow
@lab_only
def test_failures_past_the_budget_stop_before_the_next_wave(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots = fleet(tmp_path, template, 4)
    fails_verification(roots["h2"])
    lab = start_lab(roots)
    result = rollout(lab, "--serial", "1,2", "--max-fail", "0", "--format", "json")
    assert result.code == 1, result.out + result.err
    summary = json_lines(result.out)[-1]
    # Wave 2 (h2, h3) ends whole; wave 3 (h4) never starts.
    assert summary["counts"] == {
        "done": 2, "rolled-back": 1, "failed": 0, "not-started": 1, "in-flight": 0
    }, result.out  # fmt: skip
    assert summary["configurations"]["prior"] == ["h2", "h4"]
    assert "more than --max-fail allows (0)" in summary["stopped"]
    assert (roots["h4"] / "proc/cmdline").read_text() != NEW_CMDLINE


@pytest.mark.slow
@lab_only
def test_a_host_that_never_comes_back_fails_with_exit_4_and_counts(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots = fleet(tmp_path, template, 3)
    write(roots["h1"], ".tune-emulate/reboot-seconds", "3600\n")  # its reboot never ends
    lab = start_lab(roots)
    result = run_tune(
        "apply", BLACKWELL, "--reboot", "--ssh-config", lab.config, "--reboot-poll", "0.1",
        "--reboot-timeout", "2", "--no-probes", "-y", "--serial", "1", "--max-fail", "0",
        "--format", "json", *hosts_args(lab),
    )  # fmt: skip
    assert result.code == 1, result.out + result.err
    (down, summary) = json_lines(result.out)
    assert (down["host"]["name"], down["state"], down["exit_code"]) == ("h1", "failed", 4)
    assert down["configuration"] == "pending"
    assert "did not come back with a new boot id within 2 s" in down["why"]
    assert summary["counts"]["not-started"] == 2
    status = run_tune("rollout", "status")
    assert status.code == 0, status.err
    assert "boot not verified (tune verify -H HOST once it is up): h1" in status.out


@pytest.mark.slow
@lab_only
def test_on_a_terminal_a_live_table_ends_with_every_hosts_end_state(
    tmp_path: Path, start_lab: StartLab, template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("NO_COLOR", raising=False)
    roots = fleet(tmp_path, template, 4)
    fails_verification(roots["h2"])
    lab = start_lab(roots)
    result = rollout(lab, "--serial", "1,2", "--max-fail", "1", terminal=True)
    assert result.code == 1, result.out + result.err
    assert "\x1b[2K" in result.out, "redrawn in place"
    assert "wave 1  h1  applying" not in result.out, "no line per step on a terminal"
    last = re.sub(r"\x1b\[[0-9;]*m", "", result.out.split("WAVE")[-1])  # the colours
    table, summary = last.split("Rollout ")
    rows = {line.split()[1]: line.split()[2:] for line in table.splitlines()[2:] if "  h" in line}
    assert {name: row[0] for name, row in rows.items()} == {
        "h1": "done", "h2": "rolled-back", "h3": "done", "h4": "done"
    }  # fmt: skip
    assert "processor.max_cstate" in " ".join(rows["h2"])
    assert "on the new configuration" in " ".join(rows["h4"])
    assert summary.startswith(f"{journal.load(None).rollout_id}: 3 applied, 1 rolled back")


class Terminal(io.StringIO):
    """Standard input that is a terminal, with the operator's answers in it."""

    def isatty(self) -> bool:
        return True


@pytest.mark.slow
@lab_only
def test_the_canary_goes_first_alone_then_the_rollout_asks_and_resume_goes_on(
    tmp_path: Path, start_lab: StartLab, template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = fleet(tmp_path, template, 3)
    emulated(roots)
    lab = start_lab(roots)
    monkeypatch.setattr("sys.stdin", Terminal("y\nn\n"))  # the rollout: yes; the rest: no
    argv = ("apply", BLACKWELL, "--reboot", "--ssh-config", lab.config, *FAST[:-1])
    result = run_tune(*argv, *hosts_args(lab), "--canary", "h3", "--serial", "2")
    assert result.code == 7, result.out + result.err
    assert "The canaries h3 are verified. Go on with the other 2 hosts?" in result.out
    saved = journal.load(None)
    assert f"`tune rollout resume {saved.rollout_id} --yes` goes on" in result.err
    assert saved.waves == [["h3"], ["h1", "h2"]]
    assert {n: e.state for n, e in saved.hosts.items()} == {
        "h1": journal.NOT_STARTED, "h2": journal.NOT_STARTED, "h3": journal.DONE
    }  # fmt: skip
    assert saved.stopped is not None and "canaries" in saved.stopped
    assert [len(boots(root)) for root in roots.values()] == [0, 0, 1]

    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal, no --yes: still asks
    refused = run_tune("rollout", "resume")
    assert refused.code == 7, refused.out + refused.err
    assert [len(boots(root)) for root in roots.values()] == [0, 0, 1]

    resumed = run_tune("rollout", "resume", saved.rollout_id, "--yes")
    assert resumed.code == 0, resumed.out + resumed.err
    saved = journal.load(saved.rollout_id)
    assert {e.state for e in saved.hosts.values()} == {journal.DONE}
    assert saved.stopped is None
    assert [len(boots(root)) for root in roots.values()] == [1, 1, 1]


def reboot_asked(root: Path) -> bool:
    """The host's pending record carries the mark the reboot request writes before it asks."""
    pending = root / "var/lib/tune/pending.json"
    try:
        return json.loads(pending.read_text()).get("reboot_asked_in") is not None
    except (FileNotFoundError, ValueError):  # not yet written, or being replaced
        return False


@pytest.mark.slow
@lab_only
def test_a_controller_killed_in_a_wave_is_resumed_without_a_second_reboot(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots = fleet(tmp_path, template, 3)
    emulated(roots)
    # h1's reboot outlasts the controller's death and resume's start: resume must wait for it,
    # not ask for another.
    write(roots["h1"], ".tune-emulate/reboot-seconds", "8\n")
    lab = start_lab(roots)
    argv = ["apply", str(BLACKWELL), "--reboot", "--ssh-config", str(lab.config), *FAST]
    argv += [*hosts_args(lab), "--serial", "1,2"]
    controller = subprocess.Popen(
        [sys.executable, "-m", "reconciler.cli", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        # Killed once h1 has the reboot request's mark: the reboot is asked, its boot 8 s away.
        while not reboot_asked(roots["h1"]):
            assert controller.poll() is None, "the rollout ended before h1's reboot was asked"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        controller.kill()  # SIGKILL: nothing of the controller runs after it
        controller.wait()
    killed = journal.load(None)
    in_flight = [n for n, e in killed.hosts.items() if e.state == journal.IN_FLIGHT]
    assert in_flight == ["h1"]
    assert boots(roots["h1"]) == []  # not yet booted: resume finds the old boot id and the mark

    resumed = run_tune("rollout", "resume", "--yes")
    assert resumed.code == 0, resumed.out + resumed.err
    saved = journal.load(killed.rollout_id)
    assert {e.state for e in saved.hosts.values()} == {journal.DONE}
    for name, root in roots.items():
        assert len(boots(root)) == 1, name  # rebooted once: none twice, none skipped
        assert (root / "proc/cmdline").read_text() == NEW_CMDLINE
        assert not (root / "var/lib/tune/pending.json").exists()


# The controller, killing itself (SIGKILL) where the rollout journal says `rebooting` and the
# reboot request has not yet left for the host.
KILLED_BEFORE_ASKING = """
import os, signal
from reconciler.apply.engines import ShellEngine
ShellEngine.reboot = lambda self, *args: os.kill(os.getpid(), signal.SIGKILL)
from reconciler.cli.main import main
main()
"""


@pytest.mark.slow
@lab_only
def test_a_controller_killed_after_journaling_a_reboot_it_never_asked_is_resumed_with_one(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots = fleet(tmp_path, template, 3)
    emulated(roots)
    lab = start_lab(roots)
    argv = ["apply", str(BLACKWELL), "--reboot", "--ssh-config", str(lab.config), *FAST]
    # The emulated boot comes within the request: a wait for one never asked fails fast.
    argv += [*hosts_args(lab), "--serial", "1,2", "--reboot-timeout", "30"]
    controller = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_ASKING, *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=300,
    )
    assert controller.returncode == -signal.SIGKILL, controller.stderr
    killed = journal.load(None)
    h1 = killed.hosts["h1"]
    assert (h1.state, h1.rebooting) == (journal.IN_FLIGHT, True)
    assert not reboot_asked(roots["h1"]) and boots(roots["h1"]) == []

    resumed = run_tune("rollout", "resume", "--yes")
    assert resumed.code == 0, resumed.out + resumed.err
    saved = journal.load(killed.rollout_id)
    assert {e.state for e in saved.hosts.values()} == {journal.DONE}
    for name, root in roots.items():
        assert len(boots(root)) == 1, name  # asked once by resume: none twice, none skipped
        assert (root / "proc/cmdline").read_text() == NEW_CMDLINE
        assert not (root / "var/lib/tune/pending.json").exists()


def container_commands(root: Path) -> list[list[str]]:
    host = SnapshotHost(root)
    (run_id,) = run_ids(host)
    run = read_run(host, run_id)
    assert run is not None and run.outcome == "applied"
    return [r["argv"] for r in (r.to_json() for r in run.records) if r["type"] == "container"]


@pytest.mark.slow
@lab_only
def test_restart_containers_over_ssh_on_one_host_and_in_a_rollout(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots = fleet(tmp_path, template, 3)
    lab = start_lab(roots)
    one = run_tune(
        "apply", BLACKWELL, "--reboot", "--restart-containers", "--ssh-config", lab.config,
        "--no-probes", "-y", "-H", "h1",
    )  # fmt: skip
    assert one.code == 0, one.out + one.err
    assert "ok  container 101 restarted and sees 13 NVIDIA nodes" in one.out
    assert container_commands(roots["h1"]) == [
        ["pct", "reboot", "101"],
        ["pct", "exec", "101", "--", "ls", "/dev"],
    ]
    many = run_tune(
        "apply", BLACKWELL, "--reboot", "--restart-containers", "--ssh-config", lab.config,
        *FAST, "-H", "h2", "-H", "h3", "--serial", "1",
    )  # fmt: skip
    assert many.code == 0, many.out + many.err
    for name in ("h2", "h3"):
        assert container_commands(roots[name]) == container_commands(roots["h1"])


@pytest.mark.slow
@lab_only
def test_runtime_only_fleets_go_in_waves_within_the_same_budget(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots = fleet(tmp_path, template, 4)
    write(roots["h2"], ".tune-emulate/fault", "3 fail\n")  # its 4th write fails: rolled back
    lab = start_lab(roots)
    result = run_tune(
        "apply", BLACKWELL, "--runtime-only", "--ssh-config", lab.config, "--no-probes", "-y",
        "--serial", "1,2", "--max-fail", "0", *hosts_args(lab),
    )  # fmt: skip
    assert result.code == 1, result.out + result.err
    saved = journal.load(None)
    assert saved.waves == [["h1"], ["h2", "h3"], ["h4"]]
    assert {n: e.state for n, e in saved.hosts.items()} == {
        "h1": journal.DONE,
        "h2": journal.ROLLED_BACK,
        "h3": journal.DONE,
        "h4": journal.NOT_STARTED,
    }, result.out + result.err
    assert "injected: the write failed" in (saved.hosts["h2"].why or "")
    assert "2 applied, 1 rolled back, 0 failed, 1 not started" in result.out
    for name in ("h1", "h3"):
        assert (roots[name] / "proc/sys/vm/swappiness").read_text() != (
            template / "proc/sys/vm/swappiness"
        ).read_text()
    assert (roots["h4"] / "proc/sys/vm/swappiness").read_text() == (
        template / "proc/sys/vm/swappiness"
    ).read_text()
    assert not (roots["h1"] / ".tune-emulate/boots").exists()  # nothing rebooted


# A stopped rollout goes on (`tune rollout resume` with the options that may change), and the
# rollouts this controller knows are listed.


def _journaled(when: str, states: dict[str, str], stopped: str | None = None) -> journal.Rollout:
    """A rollout started at `when` (UTC, as its id says), its hosts in `states`."""
    from datetime import UTC, datetime

    started = datetime.fromisoformat(when).replace(tzinfo=UTC)
    hosts = {name: journal.HostEntry(0, state) for name, state in states.items()}
    saved = journal.Rollout(
        journal.new_rollout_id(started), str(BLACKWELL), "0", {}, [list(hosts)], hosts
    )
    saved.stopped = stopped
    saved.save()
    return saved


def test_rollout_list_shows_every_rollout_newest_first_with_its_state() -> None:
    none = run_tune("rollout", "list")
    assert none.code == 0 and none.out.startswith("No rollout journaled in "), none.err
    done = _journaled("2026-01-01T10:00:00", {"h1": journal.DONE, "h2": journal.DONE})
    stopped = _journaled(
        "2026-01-02T10:00:00",
        {"h1": journal.ROLLED_BACK, "h2": journal.NOT_STARTED},
        stopped="1 host failed, more than --max-fail allows (0): stopped after wave 1 of 2.",
    )
    broken = _journaled("2026-01-03T10:00:00", {"h1": journal.IN_FLIGHT, "h2": journal.DONE})
    listed = run_tune("rollout", "list")
    assert listed.code == 0, listed.err
    rows = [line.split() for line in listed.out.splitlines()]
    assert rows[0][:3] == ["ROLLOUT", "CREATED", "STATE"]
    assert [row[0] for row in rows[1:]] == [
        broken.rollout_id, stopped.rollout_id, done.rollout_id
    ]  # fmt: skip
    assert [row[2] for row in rows[1:]] == ["interrupted", "stopped", "finished"]
    as_json = json.loads(run_tune("rollout", "list", "--format", "json").out)
    assert as_json["kind"] == "rollout"
    assert [r["rollout"] for r in as_json["rollouts"]] == [
        broken.rollout_id, stopped.rollout_id, done.rollout_id
    ]  # fmt: skip
    assert as_json["rollouts"][1]["state"] == "stopped"
    assert as_json["rollouts"][1]["counts"]["rolled-back"] == 1
    assert as_json["rollouts"][1]["stopped"].startswith("1 host failed")


def test_options_changed_on_resume_are_journaled_for_the_next_resume() -> None:
    saved = _three_hosts()
    saved.options = {"job": {}, "remote": {"forks": 20}, "rollout": {"max_fail": "0"}}
    saved.save()
    saved.change_options({"rollout": {"max_fail": "2"}, "remote": {"forks": 5}})
    loaded = journal.load(saved.rollout_id)
    assert loaded.options == {"job": {}, "remote": {"forks": 5}, "rollout": {"max_fail": "2"}}
    assert saved.path is not None
    saved.path.write_bytes(saved.path.read_bytes() + b'{"options": {"hosts": ["x"]}}\n')
    with pytest.raises(JournalError, match="options"):
        journal.load(saved.rollout_id)


def test_resume_refuses_options_that_would_make_it_another_rollout() -> None:
    for option in ("--serial", "--canary", "--before-reboot", "--after-verify"):
        refused = run_tune("rollout", "resume", option, "1")
        assert refused.code == 64, (option, refused.err)


@pytest.mark.slow
@lab_only
def test_a_rollout_stopped_by_a_failed_canary_goes_on_with_a_larger_budget(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots = fleet(tmp_path, template, 4)
    emulated(roots)
    fails_verification(roots["h4"])
    lab = start_lab(roots)
    stopped = rollout(lab, "--canary", "h4", "--serial", "2", "--max-fail", "0")
    assert stopped.code == 1, stopped.out + stopped.err
    saved = journal.load(None)
    assert saved.hosts["h4"].state == journal.ROLLED_BACK
    assert saved.stopped is not None and "--max-fail" in saved.stopped
    assert f"tune rollout resume {saved.rollout_id} --max-fail 1" in stopped.out
    # Without a larger budget, resume stops where it stopped: nothing more is rebooted.
    again = run_tune("rollout", "resume", "--yes")
    assert again.code == 1, again.out + again.err
    assert [len(boots(root)) for root in roots.values()] == [0, 0, 0, 1]

    resumed = run_tune(
        "rollout", "resume", saved.rollout_id, "--max-fail", "1", "--forks", "1",
        "--reboot-poll", "0.2", "--yes",
    )  # fmt: skip
    assert resumed.code == 1, resumed.out + resumed.err  # h4 still failed: as other fleets
    saved = journal.load(saved.rollout_id)
    assert {n: e.state for n, e in saved.hosts.items()} == {
        "h1": journal.DONE, "h2": journal.DONE, "h3": journal.DONE, "h4": journal.ROLLED_BACK
    }  # fmt: skip
    assert saved.stopped is None
    assert "3 applied, 1 rolled back, 0 failed, 0 not started" in resumed.out
    # Every host booted once: h4 not again, the rest once each.
    assert [len(boots(root)) for root in roots.values()] == [1, 1, 1, 1]
    assert saved.options["rollout"]["max_fail"] == "1"
    assert saved.options["remote"]["forks"] == 1
    listed = run_tune("rollout", "list")
    assert f"{saved.rollout_id}" in listed.out and "finished" in listed.out
