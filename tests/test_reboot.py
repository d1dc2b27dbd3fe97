"""`tune apply --reboot` on snapshot hosts: the one-time GRUB boot with fakes of update-grub,
grub-reboot and grub-editenv that record their argv and edit the snapshot as the real tools
would (grub.cfg from the configuration and the /etc/grub.d try entry; next_entry in grubenv),
a boot simulated the way GRUB picks its entry, then verification with promotion or rollback;
and the wait for a new boot id."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import booted_by_systemd_boot, profile, write
from small_host import tree
from test_shell_read import LocalShellHost

from reconciler.apply.engines import PythonEngine, ShellEngine
from reconciler.apply.pending import PENDING, PendingBoot, pending_of, read_pending
from reconciler.apply.python_engine import execute, rollback
from reconciler.apply.tryonce import TRY_ENTRY, Boot, arrange, entry_cmdline
from reconciler.apply.work import prepare
from reconciler.boot.reboot import conclude, wait_for_new_boot
from reconciler.core.errors import (
    ApplyFailed,
    ConnectError,
    ExitCode,
    HostError,
    HostKeyError,
    RebootTimeout,
)
from reconciler.core.files import Files, Request
from reconciler.facts import cmdline as fmt
from reconciler.hosts.base import Completed, Host
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.observe import BOOT_ID
from reconciler.profile.load import LoadedProfile, load_profile

PROFILE = """\
name: boot
cmdline:
  set:
    amd_pstate: active
    processor.max_cstate: {value: 1, priority: P0}
  remove: [nomodeset]
"""
GRUB_CFG = "/boot/grub/grub.cfg"
GRUBENV = "/boot/grub/grubenv"
OLD_LINE = "root=/dev/sda1 ro quiet nomodeset"
BOOT_ID_BEFORE = "00000000-0000-4000-8000-000000000001"


class GrubTools(SnapshotHost):
    """update-grub writes grub.cfg: the default entry from the configured command line, then
    the entry each /etc/grub.d try script prints; grub-reboot and grub-editenv edit grubenv."""

    TOOLS = ("update-grub", "grub-reboot", "grub-editenv")

    def __init__(self, root: Path, fail: str | None = None) -> None:
        super().__init__(root, commands=self.TOOLS)
        self.calls: list[tuple[str, ...]] = []
        self.fail = fail  # a tool that fails from now on, as a broken boot partition would

    def run(self, argv: Sequence[str]) -> Completed:
        self.calls.append(tuple(argv))
        if argv[0] == self.fail:
            return Completed(1, "", f"{argv[0]}: error: cannot write /boot")
        if argv[0] == "update-grub":
            boot = fmt.boot_config(self.fetch(fmt.request()))
            assert boot is not None
            entries = [f"menuentry 'Debian' --id debian {{ linux /vmlinuz {boot.cmdline} }}\n"]
            try_line = entry_cmdline(self.read_file(fmt.TRY_SCRIPT))
            if try_line is not None:
                entries.append(
                    f"menuentry 'tune' --id {TRY_ENTRY} {{ linux /vmlinuz {try_line} }}\n"
                )
            self.put_file(GRUB_CFG, "".join(entries).encode())
        elif argv[0] == "grub-reboot":
            self.put_file(GRUBENV, f"next_entry={argv[1]}\n".encode())
        else:
            assert list(argv[1:]) == ["-", "unset", "next_entry"]
            self.delete_file(GRUBENV)
        return Completed(0)


def boot(root: Path, n: int) -> str:
    """GRUB boots: next_entry once (then it is spent), else the first entry; returns the line."""
    entries = {}
    for line in (root / GRUB_CFG.lstrip("/")).read_text().splitlines():
        ident = line.split("--id ")[1].split()[0]
        entries[ident] = line.split("linux /vmlinuz ")[1].removesuffix(" }")
    env = root / GRUBENV.lstrip("/")
    chosen = env.read_text().split("=", 1)[1].strip() if env.exists() else ""
    env.unlink(missing_ok=True)
    line = entries.get(chosen, next(iter(entries.values())))
    write(root, fmt.PROC_CMDLINE, f"BOOT_IMAGE=/vmlinuz {line}\n")
    write(root, BOOT_ID, f"00000000-0000-4000-8000-00000000000{n}\n")
    return line


def grub_host(tmp_path: Path, default: str = "saved", fail: str | None = None) -> GrubTools:
    root = tmp_path / "host"
    write(
        root,
        fmt.GRUB_DEFAULT,
        f'GRUB_DEFAULT={default}\nGRUB_CMDLINE_LINUX_DEFAULT="quiet nomodeset"\n'
        'GRUB_CMDLINE_LINUX="root=/dev/sda1 ro"\n',
    )
    write(root, fmt.PROC_CMDLINE, f"BOOT_IMAGE=/vmlinuz {OLD_LINE}\n")
    write(root, BOOT_ID, BOOT_ID_BEFORE + "\n")
    host = GrubTools(root, fail)
    host.run(["update-grub"])  # the menu as the host had it before tune
    host.calls.clear()
    return host


def apply_with_reboot(host: GrubTools, tmp_path: Path) -> tuple[LoadedProfile, Boot, PendingBoot]:
    """What `tune apply --reboot-phase --reboot` does before the reboot."""
    loaded = load_profile(str(profile(tmp_path, PROFILE)))
    work = prepare(host, loaded, runtime_only=False, reboot_phase=True)
    arranged = arrange(work.steps, work.observation.files)
    run_id = execute(host, replace(work, steps=arranged.now), loaded)
    pending = pending_of(run_id, work.plan.host.boot_id, work.steps)
    assert pending is not None
    pending = replace(pending, try_once=arranged.try_once, promote=arranged.promote)
    host.put_file(PENDING, pending.to_json().encode(), 0o600)
    return loaded, arranged, pending


def test_the_new_line_is_booted_once_then_made_the_default_after_verification(
    tmp_path: Path,
) -> None:
    host = grub_host(tmp_path)
    root = host.root
    before = tree(root / "etc") | tree(root / "boot")
    _, arranged, pending = apply_with_reboot(host, tmp_path)
    assert arranged.try_once == "grub-reboot"
    # Nothing the default entry boots changed: only the try entry and next_entry.
    assert not (root / fmt.DROPIN.lstrip("/")).exists()
    assert host.calls == [("update-grub",), ("grub-reboot", TRY_ENTRY)]
    assert (
        "--id debian { linux /vmlinuz root=/dev/sda1 ro quiet nomodeset }"
        in (root / GRUB_CFG.lstrip("/")).read_text()
    )

    assert boot(root, 2) == "root=/dev/sda1 ro quiet processor.max_cstate=1 amd_pstate=active"
    host.calls.clear()
    verdict = conclude(PythonEngine(host), pending)
    assert verdict.failed == []
    assert "/proc/cmdline has amd_pstate=active" in verdict.held
    # Promoted: the drop-in, one update-grub per step, the try entry gone, pending cleared.
    assert host.calls == [("update-grub",)] * 4
    assert not (root / fmt.TRY_SCRIPT.lstrip("/")).exists()
    assert read_pending(host) is None
    menu = (root / GRUB_CFG.lstrip("/")).read_text()
    assert TRY_ENTRY not in menu
    assert boot(root, 3) == "root=/dev/sda1 ro quiet processor.max_cstate=1 amd_pstate=active"

    # One rollback of the run undoes the promotion and the try entry, byte for byte.
    rollback(host)
    assert tree(root / "etc") | tree(root / "boot") == before


def test_a_failed_verification_rolls_back_and_the_next_boot_has_the_old_line(
    tmp_path: Path,
) -> None:
    host = grub_host(tmp_path)
    root = host.root
    before = tree(root / "etc") | tree(root / "boot")
    _, _, pending = apply_with_reboot(host, tmp_path)
    # The try entry boots without one of the parameters (a boot loader that drops it).
    cfg = root / GRUB_CFG.lstrip("/")
    cfg.write_text(cfg.read_text().replace(" amd_pstate=active }", " }"))
    boot(root, 2)
    host.calls.clear()
    with pytest.raises(ApplyFailed) as caught:
        conclude(PythonEngine(host), pending)
    assert "/proc/cmdline has nothing, not amd_pstate=active" in str(caught.value)
    assert host.calls == [("update-grub",), ("grub-editenv", "-", "unset", "next_entry")]
    assert tree(root / "etc") | tree(root / "boot") == before
    assert read_pending(host) is None
    assert boot(root, 3) == OLD_LINE


def test_a_failed_promotion_rolls_the_whole_boot_configuration_back(tmp_path: Path) -> None:
    host = grub_host(tmp_path)
    root = host.root
    before = tree(root / "etc")
    _, _, pending = apply_with_reboot(host, tmp_path)
    boot(root, 2)
    host.fail = "update-grub"
    with pytest.raises(ApplyFailed) as caught:
        conclude(PythonEngine(host), pending)
    assert "making the boot configuration the default failed" in str(caught.value)
    assert "update-grub: error: cannot write /boot" in str(caught.value)
    assert tree(root / "etc") == before
    assert read_pending(host) is None


@pytest.mark.parametrize(
    ("setup", "why"),
    [
        (
            lambda r: write(r, fmt.GRUB_DEFAULT, 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX=""\n'),
            "not try-once: GRUB_DEFAULT is '0', not 'saved'",
        ),
        (
            lambda r: (
                write(r, fmt.KERNEL_CMDLINE, "root=ZFS=rpool quiet\n"),
                write(r, fmt.PROXMOX_BOOT_UUIDS, "ABCD\n"),
                booted_by_systemd_boot(r),
            ),
            "not try-once: proxmox-boot-tool regenerates every boot entry",
        ),
        (
            lambda r: (
                write(r, fmt.REDHAT_RELEASE, "Rocky Linux release 9.4\n"),
                write(r, "/boot/loader/entries/a.conf", "options root=/dev/sda1 quiet\n"),
            ),
            "not try-once: grubby changes every boot entry at once",
        ),
    ],
)
def test_without_a_one_time_boot_the_reboot_says_so_and_keeps_the_steps(
    tmp_path: Path, setup: object, why: str
) -> None:
    root = tmp_path / "host"
    write(root, fmt.PROC_CMDLINE, "root=/dev/sda1 quiet\n")
    setup(root)  # type: ignore[operator]
    host = SnapshotHost(root)
    loaded = load_profile(str(profile(tmp_path, PROFILE)))
    work = prepare(host, loaded, runtime_only=False, reboot_phase=True)
    arranged = arrange(work.steps, work.observation.files)
    assert arranged.try_once is None and arranged.why.startswith(why)
    assert arranged.now == work.steps and arranged.promote == ()


def test_the_try_entry_script_runs_10_linux_with_the_new_line(tmp_path: Path) -> None:
    host = grub_host(tmp_path)
    loaded = load_profile(str(profile(tmp_path, PROFILE)))
    work = prepare(host, loaded, runtime_only=False, reboot_phase=True)
    (step,) = arrange(work.steps, work.observation.files).now
    script = step.do[0].data  # type: ignore[union-attr]
    assert (
        entry_cmdline(script) == "root=/dev/sda1 ro quiet processor.max_cstate=1 amd_pstate=active"
    )
    assert (
        "GRUB_CMDLINE_LINUX='root=/dev/sda1 ro' "
        "GRUB_CMDLINE_LINUX_DEFAULT='quiet processor.max_cstate=1 amd_pstate=active' "
        '"${0%/*}/10_linux"'
    ) in script.decode()


class Rebooting(Host):
    """A host that is down for `down` reads (connection refused), then has `after` as boot id."""

    name = "rebooting"

    def __init__(self, down: int, after: str, error: Exception | None = None) -> None:
        self.down, self.after, self.error = down, after, error
        self.closed = 0

    def fetch(self, request: Request) -> Files:
        if self.down:
            self.down -= 1
            raise self.error or ConnectError("rebooting: cannot connect: connection refused.")
        return Files({BOOT_ID: f"{self.after}\n".encode()})

    def close(self) -> None:
        self.closed += 1


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_retries_until_the_boot_id_changes() -> None:
    host, clock = Rebooting(3, "new"), Clock()
    assert wait_for_new_boot(host, "old", 600, clock=clock, sleep=clock.sleep) == "new"
    assert host.closed == 3


def test_wait_times_out_with_its_own_exit_code() -> None:
    clock = Clock()
    host = Rebooting(0, "old")  # answers, but never rebooted
    with pytest.raises(RebootTimeout) as caught:
        wait_for_new_boot(host, "old", 10, interval=2, clock=clock, sleep=clock.sleep)
    assert caught.value.exit_code == ExitCode.REBOOT_TIMEOUT == 4
    assert "did not come back with a new boot id within 10 s" in str(caught.value)
    assert clock.now == 10


def test_the_wait_says_how_long_it_has_waited_after_each_try() -> None:
    clock = Clock()
    heard: list[str] = []
    host = Rebooting(0, "old")
    with pytest.raises(RebootTimeout):
        wait_for_new_boot(
            host, "old", 6, interval=2, clock=clock, sleep=clock.sleep, progress=heard.append
        )
    name = host.describe()
    assert heard == [f"Waiting for {name} to boot: {s} of 6 s" for s in (0, 2, 4)]


def test_wait_does_not_retry_a_changed_host_key() -> None:
    clock = Clock()
    host = Rebooting(1, "new", HostKeyError("rebooting: the host key CHANGED"))
    with pytest.raises(HostKeyError):
        wait_for_new_boot(host, "old", 600, clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize(
    "record",
    [
        '{"run_id": "r", "cmdline": [], "majors": {}}',
        '{"run_id": "r", "cmdline": {}, "majors": []}',
        '{"run_id": 7, "cmdline": {}, "majors": {}}',
        '{"run_id": "r", "cmdline": {}, "majors": {}, "promote": [{"id": 1}]}',
        "[]",
    ],
)
def test_a_damaged_pending_record_is_named_never_a_traceback(tmp_path: Path, record: str) -> None:
    """pending.json is tune's own file, but a hand edit or a bad disk can damage it: each field
    of the wrong type is a clear message naming the file, never an internal error (exit 70)."""
    from conftest import run_tune

    root = tmp_path / "host"
    write(root, BOOT_ID, "after\n")
    write(root, PENDING, record)
    done = run_tune("verify", "--root", root)
    assert done.code not in (0, 70), done.err
    assert PENDING in done.err and "internal error" not in done.err


class SystemctlReboot(SnapshotHost):
    """`systemctl reboot` answered, with what pending.json held when it was asked."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.asked: list[PendingBoot | None] = []

    def run(self, argv: Sequence[str]) -> Completed:
        if list(argv) == ["systemctl", "reboot"]:
            self.asked.append(read_pending(self))
            return Completed(0, "", "")
        return super().run(argv)


def pending_before_a_reboot(root: Path) -> PendingBoot:
    pending = PendingBoot("r1", BOOT_ID_BEFORE, {"cmdline": {"amd_pstate": "active"}})
    write(root, PENDING.lstrip("/"), pending.to_json())
    write(root, BOOT_ID.lstrip("/"), BOOT_ID_BEFORE + "\n")
    (root / ".tune-emulate").mkdir()
    return pending


def test_both_engines_mark_the_pending_record_before_they_ask_for_the_reboot(
    tmp_path: Path,
) -> None:
    """The mark tells a resume that the reboot was asked (wait) from never asked (ask)."""
    pending = pending_before_a_reboot(tmp_path / "py")
    marked = replace(pending, reboot_asked_in=BOOT_ID_BEFORE)
    here = SystemctlReboot(tmp_path / "py")
    PythonEngine(here).reboot(pending)
    assert here.asked == [marked]  # on disk before `systemctl reboot` was run

    pending = pending_before_a_reboot(tmp_path / "sh")
    shell = LocalShellHost(tmp_path / "sh")
    ShellEngine(shell).reboot(pending)
    assert read_pending(SnapshotHost(tmp_path / "sh")) == marked
    (booted,) = (tmp_path / "sh/.tune-emulate/boots").read_text().split()
    assert booted != BOOT_ID_BEFORE  # the emulated reboot came after the mark, in one script


def test_a_reboot_request_that_cannot_mark_the_pending_record_does_not_ask(
    tmp_path: Path,
) -> None:
    pending_before_a_reboot(tmp_path)
    write(tmp_path, ".tune-emulate/fault", "0 fail\n")  # the mark's write fails
    with pytest.raises(HostError, match="the reboot could not be started: injected"):
        ShellEngine(LocalShellHost(tmp_path)).reboot(read_pending(SnapshotHost(tmp_path)))
    assert not (tmp_path / ".tune-emulate/boots").exists()
