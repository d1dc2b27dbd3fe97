#!/usr/bin/env python3
"""Time `tune apply --runtime-only` of the blackwell profile on a copy of the untuned example
host, with the journal fsynced per record (what tune does) and without (the baseline), and the
`tune plan` process against a bare interpreter start. Prints times and ratios measured in this
run; no absolute target is asserted.

    PYTHONPATH=. python benchmarks/apply.py [ROUNDS]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from reconciler.apply.python_engine import execute  # noqa: E402
from reconciler.apply.work import prepare  # noqa: E402
from reconciler.hosts.directory import SnapshotHost  # noqa: E402
from reconciler.profile.load import load_profile  # noqa: E402

UNTUNED = PROJECT / "examples" / "hosts" / "rtx6000bw-untuned"
BLACKWELL = PROJECT / "profiles" / "blackwell-8x.yaml"


def one_apply(scratch: Path, sync: bool) -> tuple[float, int]:
    root = scratch / "host"
    shutil.copytree(UNTUNED, root, symlinks=True)
    try:
        host = SnapshotHost(root)
        start = time.perf_counter()
        loaded = load_profile(BLACKWELL)
        work = prepare(host, loaded, runtime_only=True)
        execute(host, work, loaded, sync=sync)
        return time.perf_counter() - start, len(work.steps)
    finally:
        shutil.rmtree(root)


def process_time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv,
        check=False,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(PROJECT)},
        cwd=tempfile.gettempdir(),
    )
    return time.perf_counter() - start


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    timings: dict[bool, list[float]] = {True: [], False: []}
    steps = 0
    # Scratch on the same disk as the checkout: fsync must reach a real device to cost anything.
    with tempfile.TemporaryDirectory(dir=PROJECT) as scratch:
        for _ in range(rounds):
            for sync in (False, True):  # interleaved so load drifts hit both alike
                seconds, steps = one_apply(Path(scratch), sync)
                timings[sync].append(seconds)
    with_fsync, without = statistics.median(timings[True]), statistics.median(timings[False])
    print(f"apply blackwell-8x to a copy of {UNTUNED.name}: {steps} changes, {rounds} rounds")
    print(f"  journal fsynced per record: {with_fsync * 1000:8.1f} ms (median)")
    print(f"  journal without fsync:      {without * 1000:8.1f} ms (median, baseline)")
    print(f"  cost of journaling (fsync): {with_fsync / without:.2f}x the baseline")
    bare = statistics.median(process_time([sys.executable, "-c", "pass"]) for _ in range(rounds))
    with tempfile.TemporaryDirectory() as saved:
        plan_argv = [
            sys.executable,
            "-m",
            "reconciler.cli",
            "plan",
            str(BLACKWELL),
            "--root",
            str(UNTUNED),
            "-o",
            str(Path(saved) / "plan.json"),
        ]
        plan = statistics.median(process_time(plan_argv) for _ in range(rounds))
    print(f"tune plan (whole process):    {plan * 1000:8.1f} ms (median; target 300 ms)")
    print(f"  bare interpreter start:     {bare * 1000:8.1f} ms ({plan / bare:.1f}x)")


if __name__ == "__main__":
    main()
