"""The e2e fixture: one real-kernel VM for the whole test session, always stopped.

Every test in this directory is marked `e2e` and `slow` (`pytest -m e2e` runs only these,
`-m "not e2e"` or `-m "not slow"` skips them). They skip with the reason when this host cannot
run a VM (no QEMU, no cached image and no root, no Debian mirror) or when `TUNE_E2E=0`.
"""

from __future__ import annotations

import atexit
import os
import shlex
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from reconciler.steps.persist import OWNED

from . import guest_tune
from .over_ssh import STATE
from .vm import Slot, Unavailable, Vm, preflight

HERE = Path(__file__).resolve().parent
# How many steps of niceness the VM and its tests get ahead of the rest of the suite.
PRIORITY = 5


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def vm() -> Iterator[Vm]:
    """A booted guest, reachable with `vm.sh(...)`, `vm.run(...)` and `vm.ssh_argv()`."""
    try:
        image = preflight()
        disk = image.ensure()
    except Unavailable as exc:
        pytest.skip(f"e2e: {exc}")
    machine = Vm(disk)
    slot = Slot(image.cache)
    slot.claim(machine)

    def stop() -> None:
        machine.stop()
        slot.release(machine)

    def stop_then_die(signum: int, _frame: FrameType | None) -> None:
        # SIGTERM (a CI timeout): stop the VM first, then die of the signal as usual. Raising
        # instead would let a test's own cleanup, failing against a dead VM, swallow it.
        stop()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    atexit.register(stop)
    previous = signal.signal(signal.SIGTERM, stop_then_die)
    # The VM's tests are the suite's longest chain (reboots under TCG), run beside the rest of
    # it: QEMU and this worker's ssh and tune go first when the CPUs are busy, and the other
    # workers take what the guest leaves idle. Only root may raise a priority.
    raised = _raise_priority()
    try:
        machine.start()
        yield machine
    finally:
        stop()
        if raised:
            os.nice(PRIORITY)
        signal.signal(signal.SIGTERM, previous)
        atexit.unregister(stop)


def _raise_priority() -> bool:
    try:
        os.nice(-PRIORITY)
    except PermissionError:
        return False
    return True


@pytest.fixture
def clean_state(vm: Vm) -> Iterator[None]:
    """No journal, stored profile or owned file from an earlier test, before and after."""
    wipe = shlex.join(["rm", "-rf", STATE, *OWNED])
    vm.sh(wipe)
    yield
    vm.sh(wipe)


@pytest.fixture(scope="session")
def guest_tune_path(vm: Vm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """tune installed in the guest, as an operator installs it, once for every test that runs
    the guest's own tune (a local apply, the pull timers): an install costs 30 s under TCG."""
    path = guest_tune.install(vm, tmp_path_factory.mktemp("guest-tune"))
    yield path
    guest_tune.uninstall(vm)
