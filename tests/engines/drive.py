"""The two apply engines behind one test interface, and what a scenario leaves behind.

`PythonEngine` applies through `apply.python_engine` to a snapshot (`SnapshotHost`, the emulation in
`hosts/emulate.py`); `ShEngine` renders the same work as the sh script and runs it with this
machine's `sh` rooted at the snapshot (`TUNE_ROOT`, the emulation in `apply/lib.sh`), exactly as
an SSH target would run it, minus sshd. A scenario written against `Engine` runs against both;
`left_behind` is what must then be identical between them: every file byte for byte, and every
journal record for record but its timestamps and run ids.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from small_host import whole_tree
from test_apply_faults import Crash, FaultyHost
from test_shell_read import LocalShellHost

from reconciler.apply.journal import LOCK, RUNS, new_run_id, read_run, run_ids
from reconciler.apply.preflight import unloadable_here
from reconciler.apply.python_engine import execute, extend, restore_run
from reconciler.apply.restored import RollbackResult, roll_back_chain
from reconciler.apply.sh_engine import (
    apply_remote,
    extend_remote,
    outcome_error,
    restore_remote,
    unloadable_remote,
)
from reconciler.apply.work import Work, prepare
from reconciler.core.errors import HostError, RunKilled
from reconciler.hosts.base import Host
from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.lock import Holder
from reconciler.profile.load import load_profile
from reconciler.steps.ops import PutFile, Step
from reconciler.steps.records import parse_line, render

# The process that applied died between a journal record and its write (kill -9, power
# loss): nothing in tune may catch it, and recovery is `tune rollback`.
Killed = Crash


# Fields that differ between any two runs, whatever applied them.
VOLATILE = frozenset({"run_id", "started", "finished"})


@dataclass
class Engine:
    """One engine, as a scenario drives it: `apply` a profile to a snapshot root, `rollback`
    a run (the newest by default, then the chain `tune rollback` undoes), `promote` (append
    steps to an applied run). Every root it touched is kept in `roots`, for `left_behind`."""

    name: str
    roots: list[Path] = field(default_factory=list)

    def host(self, root: Path) -> Host:
        raise NotImplementedError

    def _touch(self, root: Path) -> None:
        if root not in self.roots:
            self.roots.append(root)

    def prepare(self, root: Path, profile: Path, **how: Any) -> Work:
        """`apply.work.prepare` as this engine's apply calls it (`how`: runtime_only,
        reboot_phase, with_persistence, skip_missing; runtime_only defaults to True)."""
        raise NotImplementedError

    def unloadable(self, root: Path, modules: tuple[str, ...]) -> Mapping[str, str]:
        """The modules the host cannot load, as this engine asks (`--skip-missing`)."""
        raise NotImplementedError

    def _how(self, root: Path, how: dict[str, Any]) -> dict[str, Any]:
        how.setdefault("runtime_only", True)
        if how.pop("skip_missing", False):
            how["unloadable"] = lambda modules: self.unloadable(root, modules)
        return how

    def apply(
        self,
        root: Path,
        profile: Path,
        *,
        phase: str = "runtime",
        after: tuple[PutFile, ...] = (),
        **how: Any,
    ) -> str | None:
        """Apply `profile`; the run id, None when there is nothing to change. Raises
        `HostError` when a requirement is unmet (nothing written), `ApplyFailed` when the run
        failed and was rolled back. `after`: files the run writes once every step holds
        (pending.json)."""
        self._touch(root)
        loaded = load_profile(profile)
        work = self.prepare(root, profile, **how)
        return self.execute(root, work, loaded, phase, after) if work.steps else None

    def execute(
        self, root: Path, work: Work, loaded: Any, phase: str, after: tuple[PutFile, ...] = ()
    ) -> str:
        raise NotImplementedError

    def rollback(self, root: Path, run_id: str | None = None) -> list[RollbackResult]:
        raise NotImplementedError

    def promote(self, root: Path, run_id: str, steps: tuple[Step, ...]) -> None:
        raise NotImplementedError


FAULT = "/.tune-emulate/fault"


class MarkedFault(FaultyHost):
    """The fault a snapshot's marker asks for (`FAULT`: "N fail|ignore|crash", as lib.sh
    reads it), made by the Python engine's host; none without the marker."""

    def __init__(self, root: Path) -> None:
        marker = root / FAULT.lstrip("/")
        at, how = marker.read_text().split() if marker.exists() else ("-1", "fail")
        super().__init__(root, int(at), how)


@dataclass
class PythonEngine(Engine):
    """`make_host`: the snapshot host an apply writes through."""

    name: str = "python"
    make_host: Callable[[Path], SnapshotHost] = MarkedFault

    def host(self, root: Path) -> Host:
        return self.make_host(root)

    def prepare(self, root: Path, profile: Path, **how: Any) -> Work:
        return prepare(self.host(root), load_profile(profile), **self._how(root, how))

    def unloadable(self, root: Path, modules: tuple[str, ...]) -> Mapping[str, str]:
        return unloadable_here(self.host(root), modules)

    def execute(
        self, root: Path, work: Work, loaded: Any, phase: str, after: tuple[PutFile, ...] = ()
    ) -> str:
        return execute(self.host(root), work, loaded, phase=phase, sync=False, after=after)

    def rollback(self, root: Path, run_id: str | None = None) -> list[RollbackResult]:
        self._touch(root)
        host = SnapshotHost(root)
        return roll_back_chain(host, run_id, lambda run: restore_run(host, run))

    def promote(self, root: Path, run_id: str, steps: tuple[Step, ...]) -> None:
        self._touch(root)
        extend(SnapshotHost(root), run_id, steps)


@dataclass
class ShEngine(Engine):
    """`timeout`: how long the controller waits for the script's `end` record."""

    name: str = "sh"
    timeout: float = 60

    def host(self, root: Path) -> LocalShellHost:
        host = LocalShellHost(root)
        host.name = SnapshotHost(root).name  # what a run record says when /etc has no name
        return host

    def prepare(self, root: Path, profile: Path, **how: Any) -> Work:
        how = self._how(root, how)
        return prepare(self.host(root), load_profile(profile), preflight_here=False, **how)

    def unloadable(self, root: Path, modules: tuple[str, ...]) -> Mapping[str, str]:
        return unloadable_remote(self.host(root), modules)

    def execute(
        self, root: Path, work: Work, loaded: Any, phase: str, after: tuple[PutFile, ...] = ()
    ) -> str:
        host, run_id = self.host(root), new_run_id()
        try:
            apply_remote(
                host,
                work,
                loaded,
                phase=phase,
                timeout=self.timeout,
                interval=0.02,
                run_id=run_id,
                after=after,
            )
        except RunKilled:
            return self._ended(root, run_id)
        except HostError as exc:
            if "has not finished" not in str(exc):
                raise
            return self._ended(root, run_id)
        return run_id

    def _ended(self, root: Path, run_id: str) -> str:
        """A script that did not end in `timeout`: once its process is gone (the pid in the
        lock), `Killed` when its journal has no `end`, else its outcome as `apply_remote`'s."""
        holder = Holder.parse((root / LOCK.lstrip("/")).read_bytes())
        assert holder is not None
        pid = int(holder.pid)
        with contextlib.suppress(ProcessLookupError):
            while True:
                os.kill(pid, 0)
                time.sleep(0.05)
        run = read_run(SnapshotHost(root), run_id)
        assert run is not None
        if run.outcome == "interrupted":
            raise Killed
        if run.outcome != "applied":
            raise outcome_error(run)
        return run_id

    def rollback(self, root: Path, run_id: str | None = None) -> list[RollbackResult]:
        self._touch(root)
        host = self.host(root)
        return roll_back_chain(host, run_id, lambda run: restore_remote(host, run))

    def promote(self, root: Path, run_id: str, steps: tuple[Step, ...]) -> None:
        self._touch(root)
        extend_remote(self.host(root), run_id, steps)


ENGINES: dict[str, Callable[[], Engine]] = {"python": PythonEngine, "sh": ShEngine}


def journals(root: Path) -> list[list[dict[str, Any]]]:
    """Every run's records in run order, without what differs between any two runs."""
    host = SnapshotHost(root)
    out = []
    for run_id in run_ids(host):
        # The snapshot's own path names the host when /etc does not: each test has its own.
        data = (root / RUNS.lstrip("/") / f"{run_id}.jsonl").read_bytes()
        for line in data.splitlines():
            conforming(line)
        text = data.decode().replace(str(root), "/R")
        out.append([_stable(json.loads(line)) for line in text.splitlines()])
    return out


def conforming(line: bytes) -> None:
    """A journal line as the journal's schema has it (`steps.records`): the strict reader takes
    it, and it holds exactly the record's fields, each as that record writes it (a field the
    reader would skip as a newer tune's, a misspelt one, is no record either engine writes)."""
    record = parse_line(line)
    assert json.loads(line) == record.to_json(), f"{line!r:.600} != {render(record)!r:.600}"


def _stable(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in VOLATILE}


@dataclass(frozen=True)
class LeftBehind:
    """What one scenario left on each root it touched, in the order it touched them."""

    trees: tuple[dict[str, Any], ...]
    journals: tuple[list[list[dict[str, Any]]], ...]


def left_behind(engine: Engine) -> LeftBehind:
    return LeftBehind(
        tuple(whole_tree(root) for root in engine.roots),
        tuple(journals(root) for root in engine.roots),
    )


def differences(mine: LeftBehind, theirs: LeftBehind) -> list[str]:
    """Where two scenarios' remains differ: each file, and the first record of each journal."""
    out: list[str] = []
    for at, (a, b) in enumerate(zip(mine.trees, theirs.trees, strict=True)):
        out += [
            f"root {at}: {p}: {a.get(p)!r:.200} != {b.get(p)!r:.200}"
            for p in sorted(set(a) | set(b))
            if a.get(p) != b.get(p)
        ]
    for at, (a_runs, b_runs) in enumerate(zip(mine.journals, theirs.journals, strict=True)):
        if len(a_runs) != len(b_runs):
            out.append(f"root {at}: {len(a_runs)} runs != {len(b_runs)} runs")
        for run, (a, b) in enumerate(zip(a_runs, b_runs, strict=False)):
            for line, (x, y) in enumerate(zip(a, b, strict=False)):
                if x != y:
                    out.append(f"root {at}, run {run}, record {line}: {x!r:.600} != {y!r:.600}")
                    break
            else:
                if len(a) != len(b):
                    out.append(
                        f"root {at}, run {run}: {len(a)} records != {len(b)}: "
                        f"{(a[len(b) :] or b[len(a) :])[0]!r:.600}"
                    )
    return out
