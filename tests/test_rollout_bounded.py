"""A rollout's threads and connections stay within --forks (and a few spare connections)
whatever --serial says: a host waiting for its reboot holds no thread, and its connection
only while a spare one is free. Counted on a transport stub: each host's scripts run by this
machine's `sh` on its own snapshot with the lab's emulation (a reboot of fixed duration), and
the stub counts the connections open at once (from a host's first script to its `close`) and
the threads alive while any script runs."""

from __future__ import annotations

import functools
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import cast

import pytest
from conftest import UNTUNED, copy_host, write
from hypothesis import given
from hypothesis import strategies as st
from lab import lab_env
from ssh_fixture import minimal_host

from reconciler.apply.engines import engine_for
from reconciler.apply.journal import run_path, trusted_run
from reconciler.boot.reboot import LONG_POLL_S
from reconciler.flow.orchestration import ApplyJob
from reconciler.hosts.base import Host
from reconciler.hosts.shell import ScriptResult, ShellHost
from reconciler.hosts.trust import UntrustedState
from reconciler.profile.load import load_profile
from reconciler.rollout import journal
from reconciler.rollout.pool import SPARE_CONNECTIONS, Steps, Waiting, poll_window, run_pool
from reconciler.rollout.run import Pace, RolloutShow, run_rollout
from reconciler.rollout.waves import FailureBudget


class Meter:
    """What the stub hosts saw at once, at their peak."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open = 0
        self.peak_open = 0
        self.peak_threads = 0
        self.scripts = 0


class StubHost(ShellHost):
    """A host reached through a stub transport: one "connection" from its first script until
    `close`, as `SshHost` holds one."""

    def __init__(self, name: str, root: Path, meter: Meter) -> None:
        self.name = name
        self.root = root
        self.meter = meter
        self.connected = False

    def describe(self) -> str:
        return f"stub {self.name}"

    def run_script(self, script: str, timeout: float | None = None) -> ScriptResult:
        meter = self.meter
        with meter.lock:
            if not self.connected:
                self.connected = True
                meter.open += 1
                meter.peak_open = max(meter.peak_open, meter.open)
            meter.peak_threads = max(meter.peak_threads, threading.active_count())
            meter.scripts += 1
        env = {"PATH": os.environ["PATH"], **lab_env(self.root)}
        done = subprocess.run(["sh"], input=script.encode(), capture_output=True, env=env)
        return ScriptResult(done.stdout, done.stderr, done.returncode)

    def close(self) -> None:
        with self.meter.lock:
            if self.connected:
                self.connected = False
                self.meter.open -= 1
        self.library = None


# One boot parameter: the rollout's reboot and verification, little else to write.
BOOT_ONLY = """
name: boot-only
cmdline:
  set:
    processor.max_cstate:
      value: "1"
"""


@pytest.mark.slow
def test_a_wave_of_any_width_holds_at_most_forks_threads_and_connections(tmp_path: Path) -> None:
    profile = write(tmp_path, "boot.yaml", BOOT_ONLY)
    template = minimal_host(UNTUNED, profile, tmp_path / "template")
    grub = template / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0", "GRUB_DEFAULT=saved"))
    forks, count = 2, 4 + SPARE_CONNECTIONS + 2
    meter = Meter()
    hosts = []
    for n in range(1, count + 1):
        root = copy_host(template, tmp_path / f"h{n}")
        write(root, ".tune-emulate/reboot-seconds", "1\n")
        hosts.append(StubHost(f"h{n}", root, meter))
    names = [host.name for host in hosts]
    engines = {host.name: engine_for(host) for host in hosts}
    job = ApplyJob(
        load_profile(str(profile)),
        reboot=True,
        reboot_timeout=120,
        probes=False,
    )
    # --serial 100%: one wave of every host.
    rollout = journal.Rollout(
        journal.new_rollout_id(),
        str(profile),
        "0",
        {},
        [names],
        {name: journal.HostEntry(0) for name in names},
    )
    pace = Pace(forks=forks, budget=FailureBudget.parse("0"), poll=0.1)
    before = threading.active_count()
    run_rollout(engines, job, rollout, pace, RolloutShow())
    assert {n: e.state for n, e in rollout.hosts.items()} == dict.fromkeys(names, journal.DONE), {
        n: e.why for n, e in rollout.hosts.items()
    }
    for host in hosts:
        assert len((host.root / ".tune-emulate/boots").read_text().split()) == 1, host.name
    # The workers, one a fork; nothing a waiting host: not one thread per host of the wave.
    assert meter.peak_threads - before <= forks, meter.peak_threads
    assert meter.peak_open <= forks + SPARE_CONNECTIONS < count, meter.peak_open
    assert meter.open == 0, "every connection closed at the end"


@pytest.mark.slow
def test_a_host_of_a_rollout_without_probes_costs_no_read_for_them_after_its_boot(
    tmp_path: Path,
) -> None:
    """After the boot, a run that measured no probes (--no-probes) is not read again for
    them: verify, the promotion (its journal read with the ownership check) and pending.json's
    removal are the round trips left."""
    profile = write(tmp_path, "boot.yaml", BOOT_ONLY)
    root = minimal_host(UNTUNED, profile, tmp_path / "h1")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0", "GRUB_DEFAULT=saved"))
    write(root, ".tune-emulate/reboot-seconds", "0\n")
    host = StubHost("h1", root, Meter())
    sent: list[str] = []
    run_script = host.run_script

    def recorded(script: str, timeout: float | None = None) -> ScriptResult:
        sent.append(script)
        return run_script(script, timeout)

    host.run_script = recorded  # type: ignore[method-assign]
    job = ApplyJob(load_profile(str(profile)), reboot=True, reboot_timeout=60, probes=False)
    rollout = journal.Rollout(
        journal.new_rollout_id(), str(profile), "0", {}, [["h1"]], {"h1": journal.HostEntry(0)}
    )
    pace = Pace(forks=1, budget=FailureBudget.parse("0"), poll=0.1)
    run_rollout({"h1": engine_for(host)}, job, rollout, pace, RolloutShow())
    assert rollout.hosts["h1"].state == journal.DONE, rollout.hosts["h1"].why
    waited = next(i for i, s in enumerate(sent) if "boot_id" in s and "while :" in s)
    after = sent[waited + 1 :]
    journal_reads = [s for s in after if "/var/lib/tune/runs/" in s and "TUNE-READ-1" in s]
    assert len(journal_reads) <= 1, [s[:200] for s in after]
    # Verify's reads in one batch: the boot's checks with what the applied profile's runtime
    # knobs read (this process stored that profile); then the promotion's read of the run,
    # the promotion, and pending.json's removal with status.json.
    assert len(after) == 4, [s[-200:] for s in after]

    # The promotion's read of the run: who owns tune's state and the journal itself, in one
    # round trip; a journal others may write is refused as before.
    run_id = rollout.hosts["h1"].run_id
    assert run_id is not None
    sent.clear()
    assert trusted_run(host, run_id).outcome == "applied"
    assert len(sent) == 1, [s[:200] for s in sent]
    (root / run_path(run_id).lstrip("/")).chmod(0o666)
    with pytest.raises(UntrustedState, match="refusing to use"):
        trusted_run(host, run_id)


class PolledHost:
    """A host whose boot id changes at `boot_at`; it records how long each poll before then
    was allowed to wait on it, and waits that long (read every `interval`) as the shell's
    `value_unlike` does."""

    def __init__(self, boot_at: float) -> None:
        self.boot_at = boot_at
        self.windows: list[float] = []

    def describe(self) -> str:
        return "polled"

    def value_unlike(
        self, path: str, before: str | None, within: float, interval: float
    ) -> str | None:
        if time.monotonic() < self.boot_at:  # no host ended yet: the whole wave is live
            self.windows.append(within)
        end = time.monotonic() + within
        while True:
            if time.monotonic() >= self.boot_at:
                return "new"
            if time.monotonic() + interval > end:
                return before
            time.sleep(interval)

    def close(self) -> None:
        pass


def polled_wave(count: int, forks: int, interval: float, reboot: float) -> list[PolledHost]:
    boot_at = time.monotonic() + reboot
    hosts = [PolledHost(boot_at) for _ in range(count)]

    def steps(host: PolledHost) -> Steps:
        yield Waiting(cast(Host, host), "old", 30.0, interval)

    run_pool([(cast(Host, h), functools.partial(steps, h)) for h in hosts], forks)
    return hosts


def test_a_wave_a_little_wider_than_forks_waits_on_its_hosts_not_a_read_a_poll() -> None:
    """5 hosts on 4 workers, a reboot of 0.8 s read every 0.05 s: each poll waits on the host
    for 0.2 s (the fifth host's turn comes within one interval), so a host costs a few polls,
    not the 16 one read each would take."""
    hosts = polled_wave(5, 4, 0.05, 0.8)
    polls = [len(h.windows) for h in hosts]
    assert all(w == pytest.approx(0.2) for h in hosts for w in h.windows), polls
    assert sum(polls) / len(polls) <= 8, polls


def test_a_wave_far_wider_than_forks_reads_once_a_poll() -> None:
    """20 hosts on 2 workers: a poll that waited would keep 18 hosts queued; each is one read."""
    hosts = polled_wave(20, 2, 0.05, 0.3)
    assert all(w == 0.0 for h in hosts for w in h.windows)


@given(
    live=st.integers(1, 2000),
    more=st.integers(0, 50),
    forks=st.integers(1, 200),
    interval=st.floats(0.01, 5.0),
    left=st.floats(-10.0, 100.0),
)
def test_a_poll_window_keeps_the_queued_hosts_turn_within_one_interval(
    live: int, more: int, forks: int, interval: float, left: float
) -> None:
    window = poll_window(live, forks, interval, left)
    assert window == 0.0 or interval <= window <= min(LONG_POLL_S, left)
    if live > forks:
        # The hosts queued behind `forks` polls of this length wait about one interval.
        assert window * (live - forks) / forks <= interval * (1 + 1e-9)
    else:
        assert window == (min(LONG_POLL_S, left) if min(LONG_POLL_S, left) >= interval else 0.0)
    # More hosts never lengthen a poll.
    assert poll_window(live + more, forks, interval, left) <= window
