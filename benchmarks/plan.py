"""How long a whole `tune plan` process takes on the example host, against a baseline process
that only reads the same files in plain Python.

    python benchmarks/plan.py [--runs 15] [--profile P] [--root DIR]

All are fresh interpreter processes, run alternately so that load on a shared machine hits
them alike; the script prints each median and the ratios. Two `tune plan` series: the usual run
(the profile read before: its validated form comes from tune's profile cache, like bytecode
from .pyc files) and a run with the cache off (a profile read for the first time: ruamel.yaml
and pydantic imported, the profile parsed and validated). Bytecode is written as an installed
package has it (pip compiles at install), even where PYTHONDONTWRITEBYTECODE is set. The targets
for the bundled example (issue 36): a `tune plan` median under 200 ms, and at most 4x the
baseline's median measured in the same run, on a 2-core machine.

Then a cost table by kind, so that a kind that becomes slow shows by name: for each kind of the
registry, in a fresh process each time (medians of `--kind-runs`), the import of its module
alone (tune's shared modules already imported: what the kind adds, its facts included), and for
the kinds with work in the profile, what its request asks (paths, patterns, listings,
commands), the files read for it, and the time of that read and of its compare (the first call,
as a plan makes it), and the changes it found.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

# One kind's costs, as JSON: import alone, then (profile using it) request, read, compare.
KIND_COSTS = """
import dataclasses, json, sys, time
import reconciler.kinds, reconciler.hosts.directory, reconciler.profile.load
from reconciler.kinds import LINES, load
name, profile, root = sys.argv[1:4]
line = next(line for line in LINES if line.kind == name)
start = time.perf_counter()
kind = load(line)
found = {"import": time.perf_counter() - start}
loaded = reconciler.profile.load.load_profile(profile)
spec = dict(loaded.profile.work()).get(kind)
if spec is not None:
    start = time.perf_counter()
    asked = kind.request(spec)
    found["request"] = time.perf_counter() - start
    start = time.perf_counter()
    files = reconciler.hosts.directory.SnapshotHost(root).fetch(asked)
    found["read"] = time.perf_counter() - start
    start = time.perf_counter()
    outcome = kind.compare(spec, files)
    found["compare"] = time.perf_counter() - start
    found["asks"] = sum(len(getattr(asked, f.name)) for f in dataclasses.fields(asked))
    found["files"] = len(files.contents)
    found["changes"] = len(outcome.changes)
print(json.dumps(found))
"""

BASELINE = """
import sys
for path in open(sys.argv[1]).read().splitlines():
    with open(path, "rb") as handle:
        handle.read()
"""


def files_read(profile: Path, root: Path) -> list[str]:
    """Every file a plan of `profile` reads: the profiles themselves and the host's files."""
    from reconciler.hosts.directory import SnapshotHost
    from reconciler.plan.observe import request
    from reconciler.profile.load import load_profile

    loaded = load_profile(profile)
    files = SnapshotHost(root).fetch(request(loaded.profile))
    host = [str(root) + path for path in sorted(files.contents)]
    return [str(Path(p).resolve()) for p in loaded.files] + host


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one process (CPU time varies less on a busy machine).
    `cwd`: where `python -m` finds no other tune than PYTHONPATH's, and `.tune/` is written."""
    cpu, start = cpu_of_children(), time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 2):
        sys.exit(f"{argv}: exit {done.returncode}: {done.stderr.decode()}")
    return elapsed, cpu_of_children() - cpu


def kind_costs(profile: Path, root: Path, runs: int, env: dict[str, str]) -> None:
    """The table of each kind's costs (module docstring), medians of `runs` processes."""
    from reconciler.kinds import LINES

    print(f"\ncost by kind, medians of {runs} fresh processes each; load {os.getloadavg()[0]:.1f}")
    print("kind            import ms   asks  files  read ms  compare ms  changes")
    for line in LINES:
        code = [sys.executable, "-c", KIND_COSTS, line.kind, str(profile), str(root)]
        found = []
        for _ in range(runs):
            done = subprocess.run(
                code, env=env, capture_output=True, text=True, check=True, cwd=PROJECT.parent
            )
            found.append(json.loads(done.stdout))
        ms = {key: statistics.median(run[key] for run in found) * 1000 for key in found[0]}
        row = f"{line.kind:<14} {ms['import']:9.1f}"
        if "read" in found[0]:
            row += f"  {found[0]['asks']:5}  {found[0]['files']:5}"
            row += f"  {ms['read']:7.1f}  {ms['compare']:10.1f}"
            row += f"  {found[0]['changes']:7}"
        else:
            row += "  (no work in this profile)"
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--profile", type=Path, default=PROJECT / "profiles/blackwell-8x.yaml")
    parser.add_argument("--root", type=Path, default=PROJECT / "examples/hosts/rtx6000bw-untuned")
    parser.add_argument("--kind-runs", type=int, default=5, help="0: no table by kind")
    args = parser.parse_args()

    env = dict(os.environ, PYTHONPATH=str(PROJECT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cache = tempfile.TemporaryDirectory(prefix="tune-bench-cache-")
    warm_env = dict(env, TUNE_CACHE_DIR=cache.name)
    cold_env = dict(env, TUNE_CACHE_DIR="")
    paths = files_read(args.profile, args.root)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
        listing.write("\n".join(paths))
    tune = [
        sys.executable,
        "-m",
        "reconciler.cli",
        "plan",
        str(args.profile),
        "--root",
        str(args.root),
        "-o",
        os.path.join(cache.name, "plan.json"),
    ]
    baseline = [sys.executable, "-c", BASELINE, listing.name]
    try:
        # Warm the page cache, the .pyc files and the profile cache.
        here = cache.name
        timed(tune, warm_env, here), timed(baseline, env, here)
        tune_s, cold_s, baseline_s = [], [], []
        for _ in range(args.runs):
            tune_s.append(timed(tune, warm_env, here))
            cold_s.append(timed(tune, cold_env, here))
            baseline_s.append(timed(baseline, env, here))
    finally:
        os.unlink(listing.name)
        cache.cleanup()

    def median_ms(runs: list[tuple[float, float]], which: int) -> float:
        return statistics.median(run[which] for run in runs) * 1000

    tune_ms, base_ms = median_ms(tune_s, 0), median_ms(baseline_s, 0)
    tune_cpu, base_cpu = median_ms(tune_s, 1), median_ms(baseline_s, 1)
    cold_ms, cold_cpu = median_ms(cold_s, 0), median_ms(cold_s, 1)
    load = os.getloadavg()
    print(
        f"files read: {len(paths)}; {args.runs} runs each, alternating; "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    print("                              wall median   CPU median")
    print(f"baseline (read only)          {base_ms:8.1f} ms  {base_cpu:8.1f} ms")
    print(f"tune plan                     {tune_ms:8.1f} ms  {tune_cpu:8.1f} ms")
    print(f"tune plan, profile cache off  {cold_ms:8.1f} ms  {cold_cpu:8.1f} ms")
    print(f"ratio tune/baseline           {tune_ms / base_ms:8.2f}x    {tune_cpu / base_cpu:8.2f}x")
    print(f"ratio cache off/baseline      {cold_ms / base_ms:8.2f}x    {cold_cpu / base_cpu:8.2f}x")
    met = {True: "met", False: "missed"}
    print(f"target: tune plan under 200 ms median wall: {met[tune_ms < 200]}")
    print(f"target: tune plan at most 4x the baseline: {met[tune_ms <= 4 * base_ms]}")
    if args.kind_runs:
        with tempfile.TemporaryDirectory(prefix="tune-bench-cache-") as folder:
            kind_costs(args.profile, args.root, args.kind_runs, dict(env, TUNE_CACHE_DIR=folder))


if __name__ == "__main__":
    main()
