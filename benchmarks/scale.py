"""A rollout over a simulated fleet of N hosts from one controller: threads, connections, peak
memory and wall time per N, each against its target.

    python benchmarks/scale.py [--sizes 50,200,1000] [--real 10] [--forks 20]
                               [--serial 100%] [--reboot-seconds 5]

Needs root and openssh-server (as the SSH tests do). The fleet is `--real` lab hosts (real sshd
on loopback addresses, each with its own snapshot of the untuned example host cut to what the
Blackwell profile reads, its live settings applied beforehand, its reboot emulated and taking
`--reboot-seconds`) and, for the rest, a transport stub that replays recorded answers: one lab
host's reboot-phase rollout is recorded first (each script's answer and how long the real
round trip took), and every stub host answers its scripts in that order, each after the
recorded time, its boot id changing `--reboot-seconds` after its reboot was asked. So the
controller does all of its own work for every host (plans, scripts, journals, verification),
and only the targets are simulated.

Each N runs in its own process, `tune`'s rollout (`run_rollout`, as `tune apply --reboot
--reboot-phase --serial S` runs it) over the fleet, with a sampler thread counting every 20 ms:
threads alive (tune's workers, and all of them: paramiko adds one a real connection) and
connections open (stubs count theirs; a real host's is its SSH transport). It prints them with
the peak resident memory and the wall time, and "met" or "missed" for each target:

- workers at most --forks, whatever --serial says (a host waiting for its reboot holds none);
- connections at most --forks + SPARE_CONNECTIONS (a waiting host keeps its own only while
  one is spare);
- threads at most the workers, one a real connection (paramiko's), and 3 (this process's main
  thread, the sampler, and one to spare);
- peak memory under 150 MB at 1,000 hosts, growing at most linearly (MB per host between two
  sizes no more than 1.25x that between the two smaller sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(PROJECT), str(PROJECT / "benchmarks"), str(PROJECT / "tests")]

from rollout import BLACKWELL, applied_copy, reset, template  # noqa: E402

from reconciler.hosts.shell import ScriptResult, ShellHost  # noqa: E402

MEMORY_TARGET_MB = 150.0
_TICKS = re.compile(r"\[ \$i -lt (\d+) \]")
_SLEEP = re.compile(r"sleep ([0-9.]+); i=")


def is_wait(script: str) -> bool:
    """The boot id's wait (`ShellHost.value_unlike`)."""
    return "while :" in script and "boot_id" in script


class Meter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open = 0


class ReplayHost(ShellHost):
    """A stub target: each script answered by the recorded answer of the same turn, after the
    recorded round trip's time; the boot id's wait answers the old boot id until
    `reboot_seconds` after the host's first wait began, then the new one."""

    def __init__(self, name: str, recording: dict[str, Any], reboot_s: float, meter: Meter):
        self.name = name
        self.turns = recording["turns"]
        self.old, self.new = recording["old_boot"], recording["new_boot"]
        self.rtt = recording["rtt"]
        self.reboot_s = reboot_s
        self.meter = meter
        self.turn = 0
        self.boots_at: float | None = None
        self.connected = False

    def describe(self) -> str:
        return f"stub {self.name}"

    def run_script(self, script: str, timeout: float | None = None) -> ScriptResult:
        with self.meter.lock:
            if not self.connected:
                self.connected = True
                self.meter.open += 1
        if is_wait(script):
            return self._wait(script)
        stdout, stderr, status, took, marked = self.turns[self.turn]
        if ("TUNE-READ-1" in script) != marked:
            raise AssertionError(f"{self.name}: turn {self.turn} is not the one recorded")
        self.turn += 1
        time.sleep(took)
        return ScriptResult(stdout.encode("latin-1"), stderr.encode("latin-1"), status)

    def _wait(self, script: str) -> ScriptResult:
        now = time.monotonic()
        if self.boots_at is None:
            self.boots_at = now + self.reboot_s
        ticks = _TICKS.search(script)
        pause = _SLEEP.search(script)
        within = int(ticks.group(1)) * float(pause.group(1)) if ticks and pause else 0.0
        left = self.boots_at - now
        time.sleep(self.rtt + max(0.0, min(left, within)))
        booted = time.monotonic() >= self.boots_at
        return ScriptResult((self.new if booted else self.old).encode(), b"", 0)

    def close(self) -> None:
        with self.meter.lock:
            if self.connected:
                self.connected = False
                self.meter.open -= 1
        self.library = None


def record(lab_config: Path, name: str, reboot_phase_job: Any, run_id: str) -> dict[str, Any]:
    """One real lab host's rollout, each script's answer and round trip kept in turn."""
    import reconciler.rollout.run as run_module
    from reconciler.apply.engines import engine_for
    from reconciler.cli.remote import RemoteOptions
    from reconciler.rollout import journal
    from reconciler.rollout.run import Pace, RolloutShow, run_rollout
    from reconciler.rollout.waves import FailureBudget

    run_module.new_run_id = lambda: run_id  # type: ignore[attr-defined]
    (host,) = RemoteOptions(hosts=(name,), ssh_config=str(lab_config)).open()
    turns: list[Any] = []
    waits: list[tuple[str, str, float]] = []
    sent = host.run_script

    def recorded(script: str, timeout: float | None = None) -> ScriptResult:
        start = time.perf_counter()
        done = sent(script, timeout)
        took = time.perf_counter() - start
        if is_wait(script):
            before = re.search(r'\[ "\$v" = (\S+) \]', script)
            old = before.group(1).strip("'") if before else ""
            waits.append((old, done.stdout.decode(), took))
        else:
            turns.append(
                (
                    done.stdout.decode("latin-1"),
                    done.stderr.decode("latin-1"),
                    done.status,
                    took,
                    "TUNE-READ-1" in script,
                )
            )
        return done

    host.run_script = recorded  # type: ignore[method-assign]
    rollout = journal.Rollout(
        journal.new_rollout_id(), str(BLACKWELL), "0", {}, [[name]], {name: journal.HostEntry(0)}
    )
    pace = Pace(forks=1, budget=FailureBudget.parse("0"), poll=0.25)
    run_rollout({name: engine_for(host)}, reboot_phase_job, rollout, pace, RolloutShow())
    host.close()
    entry = rollout.hosts[name]
    assert entry.state == journal.DONE, entry.why
    (old, new, rtt) = next(w for w in waits if w[1] != w[0])
    # The round trip of a wait with nothing to wait for: the latency the stub adds to each.
    quick = min(t for *_, t in waits)
    return {"turns": turns, "old_boot": old, "new_boot": new, "rtt": min(quick, rtt)}


def job() -> Any:
    from reconciler.flow.orchestration import ApplyJob
    from reconciler.profile.load import load_profile

    return ApplyJob(
        load_profile(str(BLACKWELL)),
        reboot_phase=True,
        reboot=True,
        reboot_timeout=300,
        probes=False,
    )


RUN_ID = "20260101T000000Z-5ca1e0"


def child(args: argparse.Namespace) -> None:
    """One N: the rollout, sampled; its numbers as one JSON line on standard output."""
    import reconciler.rollout.run as run_module
    from reconciler.apply.engines import engine_for
    from reconciler.cli.remote import RemoteOptions
    from reconciler.rollout import journal
    from reconciler.rollout.run import Pace, RolloutShow, run_rollout
    from reconciler.rollout.waves import FailureBudget, parse_sizes, waves

    recording = json.loads(Path(args.recording).read_text())
    # Every stub replays the recorded run: its journal names this run id.
    run_module.new_run_id = lambda: RUN_ID  # type: ignore[attr-defined]
    meter = Meter()
    real = RemoteOptions(hosts=tuple(args.real_names), ssh_config=args.lab_config).open()
    stubs = [
        ReplayHost(f"s{n}", recording, args.reboot_seconds, meter)
        for n in range(args.size - len(real))
    ]
    hosts: list[Any] = [*real, *stubs]
    names = [h.name for h in hosts]
    engines = {h.name: engine_for(h) for h in hosts}
    cut = waves(names, parse_sizes(args.serial, "--serial"))
    rollout = journal.Rollout(
        journal.new_rollout_id(),
        str(BLACKWELL),
        "0",
        {},
        cut,
        {name: journal.HostEntry(index) for index, wave in enumerate(cut) for name in wave},
    )
    pace = Pace(forks=args.forks, budget=FailureBudget.parse("0"), poll=args.reboot_poll)
    peak = {"threads": 0, "workers": 0, "connections": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            alive = threading.enumerate()
            workers = sum(t.name == "tune-host" for t in alive)
            opened = meter.open + sum(getattr(h, "_open", None) is not None for h in real)
            peak["threads"] = max(peak["threads"], len(alive))
            peak["workers"] = max(peak["workers"], workers)
            peak["connections"] = max(peak["connections"], opened)

    sampler = threading.Thread(target=sample, daemon=True)
    before_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sampler.start()
    start = time.perf_counter()
    cpu = time.process_time()
    run_rollout(engines, job(), rollout, pace, RolloutShow())
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    done.set()
    sampler.join()
    for host in real:
        host.close()
    counts = rollout.counts()
    print(
        json.dumps(
            {
                "size": args.size,
                "real": len(real),
                "waves": len(cut),
                "wall": wall,
                "cpu": cpu,
                "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "before_mb": before_mb,
                "done": counts["done"],
                "failed": {n: e.why for n, e in rollout.hosts.items() if e.state != "done"},
                **peak,
            }
        )
    )


def verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,200,1000")
    parser.add_argument("--real", type=int, default=10, help="Real lab hosts (sshd) in each N.")
    parser.add_argument("--forks", type=int, default=20)
    parser.add_argument("--serial", default="100%")
    parser.add_argument("--reboot-seconds", type=float, default=5.0)
    parser.add_argument("--reboot-poll", type=float, default=0.25)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--recording", help=argparse.SUPPRESS)
    parser.add_argument("--lab-config", help=argparse.SUPPRESS)
    parser.add_argument("--real-names", nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        args.size = args.child
        child(args)
        return

    from fleet import prepare_lab
    from ssh_fixture import SshLab

    from reconciler.rollout.pool import SPARE_CONNECTIONS

    sizes = [int(s) for s in args.sizes.split(",")]
    prepare_lab()
    load = os.getloadavg()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tune-scale-") as scratch:
        base = Path(scratch)
        os.environ["TUNE_STATE_DIR"] = str(base / "state")
        source = applied_copy(template(base), BLACKWELL, base / "runtime-applied")
        names = ["rec", *(f"r{n}" for n in range(1, args.real + 1))]
        roots = {name: base / name for name in names}
        for root in roots.values():
            root.mkdir()
        reset(roots, source, args.reboot_seconds)
        lab = SshLab(base / "lab", roots)
        try:
            lab.start()
            recording = record(lab.config, "rec", job(), RUN_ID)
            recorded = base / "recording.json"
            recorded.write_text(json.dumps(recording))
            for size in sizes:
                reset(roots, source, args.reboot_seconds)
                real = [n for n in names[1:]][: min(args.real, size)]
                argv = [sys.executable, __file__, "--child", str(size)]
                argv += ["--recording", str(recorded), "--lab-config", str(lab.config)]
                argv += ["--forks", str(args.forks), "--serial", args.serial]
                argv += ["--reboot-seconds", str(args.reboot_seconds)]
                argv += ["--reboot-poll", str(args.reboot_poll), "--real-names", *real]
                env = {**os.environ, "PYTHONPATH": str(PROJECT)}
                done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    raise SystemExit(f"N={size} failed: {done.stderr[-3000:]}")
                results.append(json.loads(done.stdout.splitlines()[-1]))
        finally:
            lab.stop()
    after = os.getloadavg()
    print(
        f"rollout of the reboot phase, --serial {args.serial}, --forks {args.forks}, reboot "
        f"{args.reboot_seconds:g} s, poll {args.reboot_poll:g} s; {os.cpu_count()} CPUs, load "
        f"average {load[0]:.2f} before, {after[0]:.2f} after (a shared machine)"
    )
    print(
        f"{'N':>5} {'real':>4} {'waves':>5} {'wall s':>7} {'ctl CPU s':>9} {'workers':>7} "
        f"{'threads':>7} {'conns':>5} {'start MB':>8} {'peak MB':>7} {'done':>5}"
    )
    for r in results:
        print(
            f"{r['size']:5d} {r['real']:4d} {r['waves']:5d} {r['wall']:7.1f} {r['cpu']:9.1f} "
            f"{r['workers']:7d} {r['threads']:7d} {r['connections']:5d} {r['before_mb']:8.1f} "
            f"{r['peak_mb']:7.1f} "
            f"{r['done']:5d}"
        )
        for name, why in list(r["failed"].items())[:3]:
            print(f"      not done: {name}: {why}")
    print()
    limit = args.forks + SPARE_CONNECTIONS
    for r in results:
        n = r["size"]
        threads = r["workers"] + min(r["real"], limit) + 3
        print(
            f"N={n}: workers {r['workers']} <= --forks {args.forks}: "
            f"{verdict(r['workers'] <= args.forks)}"
        )
        print(
            f"N={n}: connections {r['connections']} <= --forks + {SPARE_CONNECTIONS} = "
            f"{limit}: {verdict(r['connections'] <= limit)}"
        )
        print(f"N={n}: threads {r['threads']} <= {threads}: {verdict(r['threads'] <= threads)}")
        print(f"N={n}: every host done: {verdict(r['done'] == n)}")
    by_size = {r["size"]: r for r in results}
    if 1000 in by_size:
        mb = by_size[1000]["peak_mb"]
        print(
            f"N=1000: peak memory {mb:.1f} MB < {MEMORY_TARGET_MB:g} MB: "
            f"{verdict(mb < MEMORY_TARGET_MB)}"
        )
    if len(results) >= 3:
        a, b, c = results[0], results[1], results[2]
        low = (b["peak_mb"] - a["peak_mb"]) / (b["size"] - a["size"])
        high = (c["peak_mb"] - b["peak_mb"]) / (c["size"] - b["size"])
        grows = high <= 1.25 * max(low, 0.0) + 0.005
        print(
            f"memory per host: {1000 * low:.1f} kB ({a['size']}->{b['size']}), "
            f"{1000 * high:.1f} kB ({b['size']}->{c['size']}): at most linear: {verdict(grows)}"
        )


if __name__ == "__main__":
    main()
