"""One run of tune on a copy of an example host, made once and shared by the tests of a module
that each assert something else about it (a fixture of `scope="module"`: pytest-xdist keeps a
file on one worker, tests/conftest.py, so it is made once a file).

A test reads `SharedRun.root` as it is and never writes to it: one that writes (a second apply,
a rollback, a reboot) works on its own `copy`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from conftest import SCRATCH, Result, copy_host, run_tune
from small_host import listing, tree


@dataclass(frozen=True)
class SharedRun:
    root: Path  # the host after the run: read it, never write to it
    before: dict[str, bytes]  # the host's files before the run (`small_host.tree`)
    result: Result  # what tune said

    def copy(self, target: Path) -> Path:
        """A writable copy of the host after the run, its journal included."""
        return copy_host(self.root, target)


@contextlib.contextmanager
def run_once(source: Path, *args: str | Path) -> Iterator[SharedRun]:
    """`tune ARGS --root COPY` on a copy of `source` (on tmpfs where there is one), from a
    working directory of its own. Afterwards the copy must be as the run left it (no test
    wrote to it, its journal included), and is removed."""
    top = Path(tempfile.mkdtemp(dir=SCRATCH, prefix="tune-shared-"))
    cwd = Path.cwd()
    try:
        root = copy_host(source, top / source.name)
        before = tree(root)
        os.chdir(top)
        try:
            result = run_tune(*args, "--root", root)
        finally:
            os.chdir(cwd)
        after = listing(root)
        yield SharedRun(root, before, result)
        assert listing(root) == after, f"a test wrote to the shared host {root}"
    finally:
        shutil.rmtree(top, ignore_errors=True)
