#!/usr/bin/env python3
"""How long `tune audit` takes on the example host, against reading the same files in plain
Python; and the whole `tune audit` process against the 500 ms budget.

Run from the repository root: `python benchmarks/audit.py`. Best of N runs each (the minimum is
the least disturbed by other load), measured in this process and in fresh processes. Fresh
processes get compiled bytecode as an installed tune has it (in a temporary PYTHONPYCACHEPREFIX,
after a warm-up run), even where PYTHONDONTWRITEBYTECODE is set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from reconciler.audit import RULES, audit, request  # noqa: E402
from reconciler.host import SnapshotHost  # noqa: E402

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


def read_plainly(paths: list[str]) -> None:
    for path in paths:
        with open(path, "rb") as handle:
            handle.read()


BYTECODE = tempfile.mkdtemp(prefix="tune-bench-pyc-")


def process(*argv: str) -> Callable[[], object]:
    env = dict(os.environ, PYTHONPATH=str(PROJECT), PYTHONPYCACHEPREFIX=BYTECODE)
    env.pop("PYTHONDONTWRITEBYTECODE", None)

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
    python = best(process(sys.executable, "-c", "pass"), PROCESS_RUNS)
    plain_process = best(process(sys.executable, "-c", reader, *paths), PROCESS_RUNS)
    cli = best(process(sys.executable, "-m", "reconciler.cli", "--version"), PROCESS_RUNS)
    whole = best(
        process(sys.executable, "-m", "reconciler.cli", "audit", "--root", str(HOST)),
        PROCESS_RUNS,
    )
    print(f"python startup alone:                           {python * 1000:7.1f} ms")
    print(f"`tune --version` (python and tune's imports):  {cli * 1000:7.1f} ms")
    print(f"baseline process, plain reads of the same files: {plain_process * 1000:6.1f} ms")
    print(f"whole `tune audit --root {HOST.name}`: {whole * 1000:7.1f} ms"
          f"  ratio {whole / plain_process:.1f}x; budget {BUDGET_S * 1000:.0f} ms: "
          f"{'within' if whole < BUDGET_S else 'OVER'}")  # fmt: skip


if __name__ == "__main__":
    main()
