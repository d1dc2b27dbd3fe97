"""Fault injection at every step of an apply, over random small hosts and random profiles:
whatever fails, and wherever, the host's files end byte-identical to before."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conftest import SCRATCH
from hypothesis import event, given, settings
from hypothesis import strategies as st
from small_host import GOVERNORS, THP_OPTIONS, SmallHost, build, tree, write_profile

from reconciler.apply.journal import read_run, run_ids
from reconciler.apply.python_engine import execute, rollback
from reconciler.apply.work import prepare
from reconciler.core.errors import ApplyFailed, HostError
from reconciler.hosts.base import Completed
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile


class Crash(BaseException):
    """The process dies here: nothing in tune may catch it."""


class FaultyHost(SnapshotHost):
    """A snapshot whose `fault_at`-th write fails, silently does nothing (the kernel kept or
    clamped the value while reporting success), or kills the process (after the journal
    record, before the write)."""

    def __init__(self, root: Path, fault_at: int, fault: str) -> None:
        super().__init__(root)
        self.fault_at, self.fault, self.writes = fault_at, fault, 0

    def _hit(self) -> bool:
        self.writes += 1
        if self.writes - 1 != self.fault_at:
            return False
        if self.fault == "fail":
            raise HostError("injected: the write failed (Input/output error).")
        if self.fault == "crash":
            raise Crash
        return True  # "ignore": report success, change nothing

    def set_attr(self, path: str, value: str) -> None:
        if not self._hit():
            super().set_attr(path, value)

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        if not self._hit():
            super().put_file(path, data, mode)

    def delete_file(self, path: str) -> None:
        if not self._hit():
            super().delete_file(path)

    def run(self, argv: Sequence[str]) -> Completed:
        if "--dry-run" in argv:
            return super().run(argv)
        return Completed(0) if self._hit() else super().run(argv)


SYSCTL_POOL = {
    "vm.swappiness": st.sampled_from(["0", "10", "60"]),
    "kernel.numa_balancing": st.sampled_from(["0", "1"]),
    "net.ipv4.tcp_rmem": st.sampled_from(["4096 131072 6291456", "4096 87380 268435456"]),
}
MODULES = ("dummy", "veth", "bonding")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[SmallHost, dict[str, Any], bool]:
    cpus = draw(st.integers(1, 3))
    keys = draw(st.lists(st.sampled_from(sorted(SYSCTL_POOL)), unique=True, max_size=3))
    host = SmallHost(
        sysctls={k: draw(SYSCTL_POOL[k]) for k in keys},
        thp=draw(st.sampled_from(THP_OPTIONS)),
        governors=draw(st.lists(st.sampled_from(GOVERNORS), min_size=cpus, max_size=cpus)),
        c2_disabled=draw(st.lists(st.booleans(), min_size=cpus, max_size=cpus)),
        modules=draw(st.lists(st.sampled_from(MODULES), unique=True, max_size=2)),
        gpus=draw(st.lists(st.sampled_from([128, 512, 4096]), max_size=2)),
    )
    if draw(st.booleans()):
        host.etc["etc/sysctl.d/90-tune.conf"] = "# left by an earlier run\nvm.swappiness = 1\n"
    profile: dict[str, Any] = {}
    wanted = draw(st.lists(st.sampled_from(sorted(SYSCTL_POOL)), unique=True, max_size=3))
    profile["sysctl"] = {k: draw(SYSCTL_POOL[k]) for k in wanted if k in host.sysctls}
    if draw(st.booleans()):
        profile["sysfs"] = {
            "/" + "sys/kernel/mm/transparent_hugepage/enabled": draw(st.sampled_from(THP_OPTIONS))
        }
    cpu: dict[str, Any] = {}
    if draw(st.booleans()):
        cpu["governor"] = draw(st.sampled_from(GOVERNORS))
    if draw(st.booleans()):
        cpu["idle_states"] = {draw(st.sampled_from(["disable", "enable"])): ["C2"]}
    if cpu:
        profile["cpu"] = cpu
    modules = draw(st.lists(st.sampled_from(MODULES), unique=True, max_size=2))
    if modules:
        profile["modules"] = {m: draw(st.sampled_from(["loaded", "absent"])) for m in modules}
    if draw(st.booleans()):
        size = draw(st.sampled_from([256, 512, 4096]))
        profile["pci"] = [{"select": {"vendor": 0x10DE}, "max_read_request": size}]
    return host, profile, draw(st.booleans())


def _apply(root: Path, profile: Path, persist: bool, host: SnapshotHost) -> str | None:
    """What `tune apply` does, minus the lock and the output."""
    loaded = load_profile(profile)
    work = prepare(host, loaded, runtime_only=True, with_persistence=persist)
    return execute(host, work, loaded, sync=False) if work.steps else None


def _runtime_changes(root: Path, profile: Path, persist: bool) -> list[str]:
    loaded = load_profile(profile)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, persist), persist)
    return [c.id for c in plan.changes if c.phase.value == "runtime"]


@settings(max_examples=200)
@given(scenarios(), st.integers(0, 12), st.sampled_from(["fail", "ignore", "crash"]))
def test_any_fault_anywhere_leaves_the_host_as_it_was(
    scenario: tuple[SmallHost, dict[str, Any], bool], fault_at: int, fault: str
) -> None:
    spec, data, persist = scenario
    scratch = Path(tempfile.mkdtemp(dir=SCRATCH))
    try:
        root = build(scratch / "host", spec)
        profile = write_profile(scratch / "p.yaml", data)
        before = tree(root)
        host = FaultyHost(root, fault_at, fault)
        try:
            _apply(root, profile, persist, host)
        except HostError:
            # Refused before the first write (no such device, ...): nothing written at all.
            event("refused before any write")
            assert tree(root) == before
            assert run_ids(SnapshotHost(root)) == []
            return
        except ApplyFailed:
            event(f"fault '{fault}' rolled back")
            assert tree(root) == before
            (run_id,) = run_ids(SnapshotHost(root))
            run = read_run(SnapshotHost(root), run_id)
            assert run is not None and run.outcome == "rolled-back"
            return
        except Crash:
            # Killed between the journal and the write: recovery is `tune rollback`.
            event("crashed, then tune rollback")
            done = rollback(SnapshotHost(root))
            assert done.result.failures == []
            assert tree(root) == before
            return
        # The fault lay beyond the last write, or hit the stored profile.yaml unnoticed
        # (tune's own record, not a knob): every change holds.
        event("applied, then tune rollback")
        assert host.writes <= fault_at or fault == "ignore"
        assert _runtime_changes(root, profile, persist) == []
        if not run_ids(SnapshotHost(root)):
            assert tree(root) == before
            return
        done = rollback(SnapshotHost(root))
        assert done.result.failures == []
        assert tree(root) == before
    finally:
        shutil.rmtree(scratch)
