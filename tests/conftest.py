"""Shared fixtures: example hosts as writable snapshot copies, and `tune` run in-process."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import struct
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

from reconciler.cli.main import main
from reconciler.hosts.local import LocalShell
from reconciler.hosts.shell import ScriptResult

if TYPE_CHECKING:
    from shared_run import SharedRun

# CI runs on 2 shared cores: judge properties by their examples, never by wall-clock deadlines.
settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("ci")

PROJECT = Path(__file__).resolve().parent.parent
# A case host with a real bridge chain: pciutils' tree-asus-p6t6 dump laid out as sysfs does.
ACS_CASE = PROJECT / "tests" / "kinds" / "acs" / "redirect-on-above-gpu-and-sas"
PROFILES = PROJECT / "profiles"
HOSTS = PROJECT / "examples" / "hosts"
BLACKWELL = PROFILES / "blackwell-8x.yaml"
UNTUNED = HOSTS / "rtx6000bw-untuned"
TUNED = HOSTS / "rtx6000bw-tuned"
SAVED = "tune: plan saved in .tune/plan.json; "  # the one line `tune plan` writes to stderr
# Where a test's hosts go when it has one: on tmpfs, a copy of an example host (3,800 files) takes
# a tenth of what it takes on a disk, and fsync costs nothing.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (pyproject.toml): a worker per CPU, and one more when the VM's tests run. Their
    worker mostly waits while QEMU boots the guest, and the scheduler gives it nothing else:
    without the extra worker, the rest of the suite would have one CPU's worth of workers for
    the VM's 13 minutes. None: xdist's own count (also PYTEST_XDIST_AUTO_NUM_WORKERS)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or os.environ.get("TUNE_E2E") == "0":
        return None
    marks = config.getoption("markexpr") or ""
    if "not slow" in marks or "not e2e" in marks or shutil.which("qemu-system-x86_64") is None:
        return None
    return len(os.sched_getaffinity(0)) + 1


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """How pytest-xdist shares the suite out (`-n auto` in pyproject.toml): a file's tests go to
    one worker, so a module's fixture (an sshd lab, a 20-host rollout) is built once, and every
    e2e test to one worker, since one VM at a time runs on a machine (`tests/e2e/vm.py`'s Slot):
    a second worker would wait for the first one's whole session. (xdist's own `loadgroup`
    marks do not group under pytest 9, whose node ids no longer take the group's suffix.)"""
    from xdist.scheduler import LoadScopeScheduling

    e2e = "tests/e2e"

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return e2e if path.startswith("tests/e2e/") else path

        def _assign_work_unit(self, node: Any) -> None:
            # The VM's tests are the longest unit (13 minutes, reboots under TCG): they start
            # first, so that the other worker runs the rest of the suite beside them.
            if e2e in self.workqueue:
                self.workqueue.move_to_end(e2e, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            # xdist tops a worker up when 2 of its tests are left; behind the VM's last two
            # reboots, a file given to its worker would wait minutes while the other is idle.
            tests = self.assigned_work.get(node, {}).get(e2e)
            if tests is not None and not all(tests.values()) and self.workqueue:
                return
            super()._reschedule(node)

    return ByFile(config, log)


@pytest.fixture(autouse=True)
def _workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tune plan` saves .tune/plan.json in the working directory: keep it out of the checkout."""
    monkeypatch.chdir(tmp_path)


@dataclass
class Result:
    code: int
    out: str
    err: str


class TerminalOutput(io.StringIO):
    """Standard output that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def run_tune(*args: str | Path, terminal: bool = False) -> Result:
    """Run the real CLI entry point (exit-code mapping included) and capture its output;
    `terminal`: its standard output says it is a terminal."""
    out, err = TerminalOutput() if terminal else io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return Result(code, out.getvalue(), err.getvalue())


# This machine's own `sh` for tune's scripts, kept for the one test that runs a harmless script
# with it (`echo`, `pwd`): every other test writes throwaway roots only.
LIVE_RUN_SCRIPT = LocalShell.run_script


@pytest.fixture(autouse=True)
def _no_script_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that reached this machine's live engine fails before its first script runs
    against the real /, /etc, /proc or /sys."""

    def refused(self: LocalShell, script: str, timeout: float | None = None) -> ScriptResult:
        raise AssertionError("a test sent a script to this machine's sh: use a snapshot")

    monkeypatch.setattr(LocalShell, "run_script", refused)


@pytest.fixture(autouse=True, scope="session")
def _session_state_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The controller's state for fixtures wider than a test (they run before `_state_dir`):
    the session's own, never the user's."""
    os.environ["TUNE_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's state (rollout journals): the test's own, never the user's."""
    monkeypatch.setenv("TUNE_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(autouse=True, scope="session")
def _profile_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The session's own profile cache: never the user's, fresh on every run."""
    os.environ["TUNE_CACHE_DIR"] = str(tmp_path_factory.mktemp("profile-cache"))


@pytest.fixture
def sysctls(tmp_path: Path) -> tuple[Path, Path]:
    """A small host with kernel.numa_balancing 1 and vm.swappiness 60, and a profile that sets
    them to 0 and 10 (numa_balancing first): tests of one behaviour need no more."""
    from small_host import SmallHost, build, write_profile  # it imports this module

    root = build(
        tmp_path / "h", SmallHost(sysctls={"kernel.numa_balancing": "1", "vm.swappiness": "60"})
    )
    profile = write_profile(
        tmp_path / "p.yaml", {"sysctl": {"kernel.numa_balancing": 0, "vm.swappiness": 10}}
    )
    return root, profile


def copy_host(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory of the test's own on tmpfs where there is one, removed after the test (and
    after `engine` compared what the scenario left in it, tests/engines): the sh engine syncs
    each journal record, and on a disk the 363 steps of the example host take half a minute."""
    path = Path(tempfile.mkdtemp(dir=SCRATCH, prefix="tune-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def untuned(scratch: Path) -> Path:
    """A writable copy of the untuned example host."""
    return copy_host(UNTUNED, scratch / "untuned")


@pytest.fixture
def tuned(scratch: Path) -> Path:
    """A writable copy of the tuned example host."""
    return copy_host(TUNED, scratch / "tuned")


# The example host after one apply, made once for each test module that asks (shared_run.py):
# a test reads `.root`, or writes to its own `.copy(...)`.


@pytest.fixture(scope="module")
def runtime_applied() -> Iterator[SharedRun]:
    """The untuned example host after `tune apply --yes BLACKWELL --runtime-only`."""
    from shared_run import run_once

    with run_once(UNTUNED, "apply", "--yes", BLACKWELL, "--runtime-only") as run:
        yield run


@pytest.fixture(scope="module")
def reboot_phase_applied() -> Iterator[SharedRun]:
    """The untuned example host after `tune apply BLACKWELL --reboot-phase -y`."""
    from shared_run import run_once

    with run_once(UNTUNED, "apply", BLACKWELL, "--reboot-phase", "-y") as run:
        yield run


@pytest.fixture(scope="module")
def both_phases_applied() -> Iterator[SharedRun]:
    """The untuned example host after `tune apply BLACKWELL -y`: the runtime phase, then the
    reboot phase."""
    from shared_run import run_once

    with run_once(UNTUNED, "apply", BLACKWELL, "-y") as run:
        yield run


def booted_by_systemd_boot(root: Path) -> None:
    """A UEFI boot started by systemd-boot: its LoaderInfo EFI variable (4 attribute bytes, then
    UTF-16), which is how tune tells proxmox-boot-tool's systemd-boot mode from its GRUB mode."""
    write(
        root,
        "/sys/firmware/efi/efivars/LoaderInfo-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f",
        b"\x06\x00\x00\x00" + "systemd-boot 252.30\0".encode("utf-16-le"),
    )


def write(root: Path, path: str, content: str | bytes) -> Path:
    """Write a file inside a snapshot root (`path` is absolute on the host)."""
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)
    return target


def profile(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    target = tmp_path / name
    target.write_text(text)
    return target


def plan_json(tmp_path: Path, root: Path, text: str) -> dict[str, Any]:
    """`tune plan --format json` of the profile `text` against the snapshot `root`, with its exit
    code under "code"; a plan writes one line to stderr, where it saved itself. Knob tests leave
    tune's boot-time files out (`--no-persist`): those are planned and tested on their own
    (test_apply*)."""
    result = run_tune(
        "plan", profile(tmp_path, text), "--root", root, "--format", "json", "--no-persist"
    )
    assert result.err.startswith(SAVED) and result.err.count("\n") == 1, result.err
    return {"code": result.code, **json.loads(result.out)}


def by_id(plan: dict[str, Any], section: str = "changes") -> dict[str, dict[str, Any]]:
    return {item["id"]: item for item in plan[section]}


def notes(plan: dict[str, Any]) -> list[str]:
    return [note["message"] for note in plan["notes"]]


def config_space(
    *,
    mrrs: int = 512,
    speed_max: int = 5,
    speed: int = 5,
    width: int = 16,
    express_at: int | None = 0x78,
    size: int = 4096,
) -> bytes:
    """A type 0 function's binary config space as sysfs `config` holds it: a capability chain
    power management (0x60) -> MSI (0x68) -> PCI Express (`express_at`), truncated to `size`
    bytes (64 is what an unprivileged read returns)."""
    cfg = bytearray(4096)
    struct.pack_into("<HH", cfg, 0x04, 0x0006, 0x0010 if express_at else 0)
    if express_at:
        cfg[0x34] = 0x60
        cfg[0x60:0x62] = bytes((0x01, 0x68))
        cfg[0x68:0x6A] = bytes((0x05, express_at))
        cfg[express_at : express_at + 2] = bytes((0x10, 0x00))
        devctl = 0x0933 | ((mrrs.bit_length() - 8) << 12)
        struct.pack_into("<H", cfg, express_at + 0x08, devctl)
        struct.pack_into("<I", cfg, express_at + 0x0C, speed_max | width << 4)
        struct.pack_into("<H", cfg, express_at + 0x12, speed | width << 4 | 1 << 13)
    return bytes(cfg[:size])


def pci_device(
    root: Path, address: str, vendor: int, device: int, class_code: int, config: bytes
) -> None:
    base = f"/sys/bus/pci/devices/{address}"
    write(root, f"{base}/vendor", f"0x{vendor:04x}\n")
    write(root, f"{base}/device", f"0x{device:04x}\n")
    write(root, f"{base}/class", f"0x{class_code:06x}\n")
    write(root, f"{base}/config", config)


@pytest.fixture
def start_lab(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Start labs inside a test (`start_lab({"h1": root})`); every one is stopped after it."""
    from ssh_fixture import SshLab

    labs: list[SshLab] = []

    def start(roots: dict[str, Path], first: int = 2) -> Any:
        lab = SshLab(tmp_path / f"lab{len(labs)}", roots, first)
        labs.append(lab)
        return lab.start()

    yield start
    for lab in labs:
        lab.stop()


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Turns a call that would block for ever (an open of a FIFO, a read that never ends) into
    a failure of the test that made it, instead of a suite that never finishes."""

    def stop(signum: int, frame: object) -> None:
        raise TimeoutError(f"tune did not answer within {seconds} s: it blocked")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def no_hang() -> Iterator[None]:
    """The whole test under a `deadline` of 60 seconds."""
    with deadline(60):
        yield
