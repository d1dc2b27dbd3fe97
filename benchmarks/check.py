"""Whole-process time of `tune check` on the tuned example host, against a baseline: a plain
Python process that reads the very same files (and walks the same directories) and nothing else.

The ratio is what tune's interpreter start-up, imports, profile validation, parsing and plan
cost on top of the reads a check cannot avoid. Run from the repository root:

    PYTHONPATH=$PWD python benchmarks/check.py [--runs N]
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(PROJECT / "tests"))

from applied_state import write_applied  # noqa: E402

from reconciler.apply import applied  # noqa: E402
from reconciler.drift.check import gather  # noqa: E402
from reconciler.hosts.directory import SnapshotHost  # noqa: E402
from reconciler.plan.observe import request  # noqa: E402

TUNED = PROJECT / "examples/hosts/rtx6000bw-tuned"
PROFILE = PROJECT / "profiles/blackwell-8x.yaml"

# Reads exactly the listed files and walks the listed directories, as plain Python.
BASELINE = """
import os, sys
paths, walks = sys.argv[1], sys.argv[2]
for path in open(paths).read().splitlines():
    with open(path, "rb") as handle:
        handle.read()
for top in open(walks).read().splitlines():
    for _base, _dirs, _files in os.walk(top):
        pass
"""


def files_read(root: Path, profile: str | None) -> tuple[list[str], list[str]]:
    """Every file and directory listing `tune check` asks the host for, as local paths."""
    host = SnapshotHost(root)
    gathered = gather(host, profile)
    wanted = request(gathered.loaded.profile)
    contents = host.fetch(wanted).contents
    paths = sorted(set(contents) | set(gathered.runs.contents))
    walks = sorted(wanted.listings | {applied.RUNS})
    if profile is None:
        paths.append(applied.STORED_PROFILE)
    return [str(root) + p for p in paths], [str(root) + d for d in walks]


def timed(argv: list[str], runs: int, ok: tuple[int, ...]) -> float:
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        code = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL).returncode
        samples.append(time.perf_counter() - start)
        if code not in ok:
            raise SystemExit(f"{argv} exited {code}")
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "tuned"
        shutil.copytree(TUNED, root, symlinks=True)
        write_applied(root)
        metrics = str(Path(scratch) / "tune.prom")
        cases = {
            "tune check PROFILE --quiet": (
                [str(PROFILE), "--quiet"],
                str(PROFILE),
            ),
            "tune check --quiet --since-apply --prometheus (the cron line)": (
                ["--quiet", "--since-apply", "--prometheus", metrics],
                None,
            ),
        }
        python = sys.executable
        print(f"{'case':<64} {'tune':>8} {'baseline':>9} {'ratio':>6}")
        for name, (extra, profile) in cases.items():
            paths, walks = files_read(root, profile)
            paths_file = Path(scratch) / "paths"
            walks_file = Path(scratch) / "walks"
            paths_file.write_text("\n".join(paths))
            walks_file.write_text("\n".join(walks))
            tune = timed(
                [python, "-m", "reconciler.cli", "check", *extra, "--root", str(root)],
                args.runs,
                ok=(0,),
            )
            base = timed(
                [python, "-c", BASELINE, str(paths_file), str(walks_file)], args.runs, ok=(0,)
            )
            print(f"{name:<64} {tune * 1000:>6.0f}ms {base * 1000:>7.0f}ms {tune / base:>5.1f}x")
            print(
                f"{'':<4}({len(paths)} files, {len(walks)} directory walks, median of {args.runs})"
            )


if __name__ == "__main__":
    main()
