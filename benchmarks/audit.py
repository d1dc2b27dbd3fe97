#!/usr/bin/env python3
"""How long `tune audit` takes on the example host, against reading the same files in plain
Python; and the whole `tune audit` process against the 500 ms budget.

Run from the repository root: `python benchmarks/audit.py`. Best of N runs each (the minimum is
the least disturbed by other load), measured in this process and in fresh processes. Fresh
processes get compiled bytecode as an installed tune has it (in a temporary PYTHONPYCACHEPREFIX,
after a warm-up run), even where PYTHONDONTWRITEBYTECODE is set, and their own profile cache
(warmed by that run: the audit's fixes, validated once, are reused while the host's findings
stay the same); a last series runs with the cache off, as a first audit of a host does.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from reconciler.audit.engine import audit, request  # noqa: E402
from reconciler.audit.rules import RULES  # noqa: E402
from reconciler.hosts.directory import SnapshotHost  # noqa: E402

HOST = PROJECT / "examples" / "hosts" / "rtx6000bw-untuned"
BUDGET_S = 0.5
RUNS = 15
PROCESS_RUNS = 7


def best(action: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def best_process(run: Callable[[], object], runs: int) -> tuple[float, float]:
    """Least wall time and least CPU time (user + system) of `runs` runs of a process: CPU
    time shows what the process costs when other work shares the machine."""
    walls, cpus = [], []
    for _ in range(runs):
        cpu, start = children_cpu(), time.perf_counter()
        run()
        walls.append(time.perf_counter() - start)
        cpus.append(children_cpu() - cpu)
    return min(walls), min(cpus)


def read_plainly(paths: list[str]) -> None:
    for path in paths:
        with open(path, "rb") as handle:
            handle.read()


BYTECODE = tempfile.mkdtemp(prefix="tune-bench-pyc-")
CACHE = tempfile.mkdtemp(prefix="tune-bench-cache-")


def process(*argv: str, cache: str = CACHE) -> Callable[[], object]:
    env = dict(os.environ, PYTHONPATH=str(PROJECT), PYTHONPYCACHEPREFIX=BYTECODE)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["TUNE_CACHE_DIR"] = cache

    def run() -> None:
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=False)

    run()  # warm-up: writes the bytecode
    return run


def main() -> None:
    host = SnapshotHost(HOST)
    files = host.fetch(request(RULES))
    paths = [str(HOST) + p for p in sorted(files.contents)]
    plain = best(lambda: read_plainly(paths), RUNS)
    audited = best(lambda: audit(host), RUNS)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"files read: {len(paths)} ({sum(map(len, files.contents.values())) // 1024} KiB)")
    print(f"baseline, plain Python reads of the same files: {plain * 1000:7.1f} ms")
    print(f"audit in process (observe, rules, fixes):       {audited * 1000:7.1f} ms"
          f"  ratio {audited / plain:.1f}x")  # fmt: skip

    reader = "import sys\nfor p in sys.argv[1:]:\n    with open(p, 'rb') as h: h.read()"
    python = best_process(process(sys.executable, "-c", "pass"), PROCESS_RUNS)
    plain_process = best_process(process(sys.executable, "-c", reader, *paths), PROCESS_RUNS)
    cli = best_process(process(sys.executable, "-m", "reconciler.cli", "--version"), PROCESS_RUNS)
    audit_argv = (sys.executable, "-m", "reconciler.cli", "audit", "--root", str(HOST))
    whole = best_process(process(*audit_argv), PROCESS_RUNS)
    cold = best_process(process(*audit_argv, cache=""), PROCESS_RUNS)
    print("processes (wall / CPU):")
    for label, (wall, cpu) in (
        ("python startup alone", python),
        ("`tune --version`: python and tune's imports", cli),
        ("baseline: plain reads of the same files", plain_process),
        (f"whole `tune audit --root {HOST.name}`", whole),
        ("the same with the profile cache off", cold),
    ):
        print(f"  {label:52} {wall * 1000:7.1f} ms / {cpu * 1000:6.1f} ms")
    print(
        f"whole audit against the baseline process: {whole[0] / plain_process[0]:.1f}x; "
        f"budget {BUDGET_S * 1000:.0f} ms: {'within' if whole[0] < BUDGET_S else 'OVER'} "
        f"(wall), {'within' if whole[1] < BUDGET_S else 'OVER'} (CPU); cache off: "
        f"{'within' if cold[0] < BUDGET_S else 'OVER'} (wall)"
    )


if __name__ == "__main__":
    main()
