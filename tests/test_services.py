"""systemd services: the unit and drop-in resolution on real units (containerd's, Docker's,
Debian's systemd), the limits of a running process as the kernel prints them, and
`tune apply --restart-services` on a snapshot (`systemctl restart` emulated: a new main process
with the limits its configuration now sets)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import run_tune, write
from small_host import tree
from ssh_fixture import StartLab, sshd_available
from test_command_output import ThisMachineShell
from test_shell_read import LocalShellHost

from reconciler.apply.journal import read_run, run_ids
from reconciler.core.files import CommandOutput, Request
from reconciler.facts import systemd
from reconciler.hosts import recorded
from reconciler.hosts.archive import ArchiveHost, write_archive
from reconciler.hosts.base import Host
from reconciler.hosts.directory import LocalHost, SnapshotHost
from reconciler.hosts.ssh import SshSettings, SshSetup
from reconciler.hosts.targets import Target
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe, request
from reconciler.profile.load import load_profile
from reconciler.steps.persist import PERSISTENCED_DROPIN

CORPUS = Path(__file__).resolve().parent / "corpus" / "systemd"
CASES = Path(__file__).resolve().parent / "kinds" / "services"
CONTAINERD = (CORPUS / "containerd.service").read_text()
DOCKER = (CORPUS / "docker.service").read_text()


def unit_of(root: Path, name: str) -> tuple[systemd.Unit, object]:
    files = SnapshotHost(root).fetch(systemd.request(name))
    return systemd.resolve(files, name), files


def setting(root: Path, name: str, key: str, section: str = "Service") -> str | None:
    files = SnapshotHost(root).fetch(systemd.request(name))
    return systemd.setting(files, systemd.resolve(files, name), section, key)[0]


def test_real_units_parse_as_systemd_reads_them() -> None:
    containerd = systemd.parse(CONTAINERD)
    assert dict(containerd["Service"])["ExecStartPre"] == "-/sbin/modprobe overlay"
    assert dict(containerd["Service"])["LimitNPROC"] == "infinity"
    docker = systemd.parse(DOCKER)
    assert dict(docker["Service"])["ExecStart"] == (
        "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock"
    )
    assert [k for k, _ in docker["Service"] if k.startswith("Limit")] == [
        "LimitNOFILE",
        "LimitNPROC",
        "LimitCORE",
    ]
    logind = systemd.parse((CORPUS / "debian" / "systemd-logind.service").read_text())
    assert dict(logind["Service"])["LimitNOFILE"] == "524288"
    # Every line of Debian's logind.conf is a comment: nothing set, the defaults hold.
    assert systemd.parse((CORPUS / "debian" / "logind.conf").read_text()) == {"Login": []}


def test_continuation_lines_join_and_skip_comments_inside() -> None:
    text = "[Service]\nExecStart=/bin/a \\\n# inside\n  --flag\nLimitCORE = 0 \n"
    assert systemd.parse(text)["Service"] == [("ExecStart", "/bin/a  --flag"), ("LimitCORE", "0")]


def test_etc_beats_lib_and_later_drop_in_names_win(tmp_path: Path) -> None:
    write(tmp_path, "/lib/systemd/system/docker.service", DOCKER)
    assert setting(tmp_path, "docker.service", "LimitNOFILE") == "infinity"
    write(
        tmp_path,
        "/usr/lib/systemd/system/docker.service.d/50-vendor.conf",
        "[Service]\nLimitNOFILE=1024\n",
    )
    write(
        tmp_path,
        "/etc/systemd/system/docker.service.d/40-site.conf",
        "[Service]\nLimitNOFILE=2048\n",
    )
    # 50-vendor sorts after 40-site, whatever directory it is in.
    assert setting(tmp_path, "docker.service", "LimitNOFILE") == "1024"
    # The same name in /etc hides the vendor's file.
    write(tmp_path, "/etc/systemd/system/docker.service.d/50-vendor.conf", "[Service]\n")
    assert setting(tmp_path, "docker.service", "LimitNOFILE") == "2048"
    # An empty assignment resets.
    write(
        tmp_path, "/run/systemd/system/docker.service.d/60-reset.conf", "[Service]\nLimitNOFILE=\n"
    )
    assert setting(tmp_path, "docker.service", "LimitNOFILE") is None
    # The type's service.d applies to every service.
    write(tmp_path, "/etc/systemd/system/service.d/70-all.conf", "[Service]\nLimitNOFILE=4096\n")
    assert setting(tmp_path, "docker.service", "LimitNOFILE") == "4096"
    # A unit file in /etc replaces the vendor's whole.
    write(tmp_path, "/etc/systemd/system/docker.service", "[Service]\nExecStart=/bin/true\n")
    assert setting(tmp_path, "docker.service", "LimitCORE") is None


def test_debian_drop_in_of_a_vendor_unit(tmp_path: Path) -> None:
    write(tmp_path, "/lib/systemd/system/rc-local.service", "[Service]\nType=forking\n")
    write(
        tmp_path,
        "/lib/systemd/system/rc-local.service.d/debian.conf",
        (CORPUS / "debian" / "rc-local.service.d-debian.conf").read_text(),
    )
    unit, _ = unit_of(tmp_path, "rc-local.service")
    assert unit.dropins == ("/lib/systemd/system/rc-local.service.d/debian.conf",)
    assert setting(tmp_path, "rc-local.service", "After", "Unit") == "network-online.target"


def test_template_drop_ins_apply_to_instances(tmp_path: Path) -> None:
    write(tmp_path, "/lib/systemd/system/user@.service", "[Service]\nLimitNOFILE=1\n")
    write(
        tmp_path,
        "/lib/systemd/system/user@.service.d/10-defaults.conf",
        (CORPUS / "user@.service.d-10-defaults.conf").read_text(),
    )
    unit, _ = unit_of(tmp_path, "user@1000.service")
    assert unit.path == "/lib/systemd/system/user@.service"
    assert setting(tmp_path, "user@1000.service", "After", "Unit").startswith(
        "systemd-user-sessions.service"
    )


def test_an_empty_unit_file_masks(tmp_path: Path) -> None:
    write(tmp_path, "/lib/systemd/system/docker.service", DOCKER)
    write(tmp_path, "/etc/systemd/system/docker.service", "")
    unit, _ = unit_of(tmp_path, "docker.service")
    assert unit.masked


@pytest.mark.parametrize(
    ("key", "value", "normal"),
    [
        ("LimitMEMLOCK", "infinity", "infinity"),
        ("LimitMEMLOCK", "64M", "67108864"),
        ("LimitSTACK", "8M:infinity", "8388608:infinity"),
        ("LimitNOFILE", "1024:1024", "1024"),
    ],
)
def test_limit_values_normalise_as_systemd_parses_them(key: str, value: str, normal: str) -> None:
    assert systemd.normalize_limit(key, value) == normal


def test_a_count_takes_no_size_suffix() -> None:
    with pytest.raises(ValueError):
        systemd.normalize_limit("LimitNOFILE", "64K")


def test_proc_limits_of_a_real_process() -> None:
    limits = systemd.process_limits((CORPUS / "proc-limits").read_text())
    assert limits["LimitSTACK"] == "8388608:infinity"
    assert limits["LimitNOFILE"] == "32768"
    assert limits["LimitMEMLOCK"] == "infinity"
    assert set(limits) == set(systemd.LIMITS)


def host_of(tmp_path: Path, case: str) -> Path:
    return shutil.copytree(CASES / case / "host", tmp_path / "host", symlinks=True)


def test_restart_services_brings_the_configured_limits(tmp_path: Path) -> None:
    root = host_of(tmp_path, "memlock-drop-in-for-containerd")
    profile = CASES / "memlock-drop-in-for-containerd" / "profile.yaml"
    plan = run_tune("plan", profile, "--root", root, "--no-persist")
    assert "Pending restart" in plan.out
    result = run_tune(
        "apply", profile, "--root", root, "--no-persist", "--yes", "--restart-services"
    )
    assert result.code == 0, result.out + result.err
    assert "ok  containerd.service restarted with its configured limits" in result.out
    procs = (root / "sys/fs/cgroup/system.slice/containerd.service/cgroup.procs").read_text()
    main, shim = procs.split()
    assert shim == "2301" and main != "812" and not (root / "proc/812").exists()
    limits = systemd.process_limits((root / f"proc/{main}/limits").read_text())
    assert limits["LimitMEMLOCK"] == "infinity"
    assert limits["LimitSTACK"] == "67108864"
    # The shim keeps what it started with; only the main process counts.
    shim_limits = systemd.process_limits((root / "proc/2301/limits").read_text())
    assert shim_limits["LimitMEMLOCK"] == "8388608"
    after = run_tune("plan", profile, "--root", root, "--no-persist")
    assert after.code == 0 and "0 pending reboot." in after.out, after.out
    (run_id,) = run_ids(SnapshotHost(root))
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None
    ran = [r.to_json() for r in run.records if r.to_json()["type"] == "service"]
    assert [r["argv"] for r in ran] == [["systemctl", "restart", "containerd.service"]]


def test_restart_services_asks_and_without_a_terminal_needs_yes(tmp_path: Path) -> None:
    root = host_of(tmp_path, "configured-not-running-is-pending-restart")
    profile = CASES / "configured-not-running-is-pending-restart" / "profile.yaml"
    before = tree(root)
    result = run_tune("apply", profile, "--root", root, "--no-persist", "--restart-services")
    assert result.code == 7, result.out + result.err
    assert "--restart-services --yes" in result.err
    assert tree(root) == before


def test_rollback_removes_the_drop_in_and_plans_it_again(tmp_path: Path) -> None:
    root = host_of(tmp_path, "memlock-drop-in-for-containerd")
    profile = CASES / "memlock-drop-in-for-containerd" / "profile.yaml"
    assert (
        run_tune("apply", profile, "--root", root, "--no-persist", "-y", "--restart-services").code
        == 0
    )
    assert run_tune("rollback", "--yes", "--root", root).code == 0
    assert not (root / "etc/systemd/system/containerd.service.d").exists()
    # The drop-in is gone: a change again (the restarted process keeps what it has until its
    # next restart, which tune does not track against a configuration it no longer wants).
    plan = run_tune("plan", profile, "--root", root, "--no-persist")
    assert "~ service containerd.service:LimitMEMLOCK: (absent) -> infinity" in plan.out


def test_files_request_reads_every_directory_of_the_search_path() -> None:
    request = systemd.request("containerd.service")
    assert isinstance(request, Request)
    assert "/etc/systemd/system/containerd.service.d/*.conf" in request.patterns
    assert "/lib/systemd/system/containerd.service" in request.patterns


def test_a_pending_restart_is_shown_as_one_in_plan_check_and_markdown(tmp_path: Path) -> None:
    root = host_of(tmp_path, "configured-not-running-is-pending-restart")
    profile = CASES / "configured-not-running-is-pending-restart" / "profile.yaml"
    text = run_tune("plan", profile, "--root", root)
    assert text.code == 0
    assert "Pending restart (configured; a running service keeps its old limits)" in text.out
    assert "0 pending reboot, 1 pending restart." in text.out
    markdown = run_tune("plan", profile, "--root", root, "--format", "markdown")
    assert "## Needs a service restart" in markdown.out
    assert "## Needs a reboot" not in markdown.out
    check = run_tune("check", profile, "--root", root)
    assert check.code == 0, "a pending restart is not drift"
    assert (
        "PENDING service docker.service:LimitMEMLOCK: running 8388608, after restart infinity "
        "(restart docker.service to apply)"
    ) in check.out


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_unit_file_and_drop_in_order_is_systemds(tmp_path: Path) -> None:
    """systemd itself as the oracle: `systemd-analyze --root cat-config` lists the unit file
    and its drop-ins in the order systemd applies them, a name in /etc or /run hiding the
    same name further down the search path. (Type-wide `service.d/` drop-ins are newer than
    systemd 252's cat-config, and left out here.)"""
    write(tmp_path, "/lib/systemd/system/docker.service", DOCKER)
    write(tmp_path, "/usr/lib/systemd/system/docker.service.d/50-vendor.conf", "[Service]\n")
    write(tmp_path, "/usr/lib/systemd/system/docker.service.d/20-early.conf", "[Service]\n")
    write(tmp_path, "/run/systemd/system/docker.service.d/50-vendor.conf", "[Service]\n")
    write(tmp_path, "/etc/systemd/system/docker.service.d/40-site.conf", "[Service]\n")
    write(tmp_path, "/etc/systemd/system/docker.service.d/90-tune.conf", "[Service]\n")
    write(tmp_path, "/usr/local/lib/systemd/system/docker.service.d/95-last.conf", "[Service]\n")
    shown = subprocess.run(
        ["systemd-analyze", f"--root={tmp_path}", "cat-config", "systemd/system/docker.service"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    systemds = [line[2:].removeprefix(str(tmp_path)) for line in shown.splitlines()
                if line.startswith(f"# {tmp_path}/")]  # fmt: skip
    unit, _ = unit_of(tmp_path, "docker.service")
    assert [unit.path, *unit.dropins] == systemds
    assert len(systemds) == 6


def pending_of(host: Host, profile: Path) -> set[str]:
    loaded = load_profile(profile)
    plan = make_plan(loaded, observe(host, loaded.profile, False), False)
    return {p.id for p in plan.pending}


MEMLOCK = "memlock-drop-in-for-containerd"
# containerd.service sets LimitNPROC=infinity; its main process started with 96365.
MEMLOCK_PENDING = {"service:containerd.service:LimitNPROC"}


def test_running_limits_are_read_for_the_units_processes_only() -> None:
    # Every process's /proc/PID/limits is ~2 MB on a host with 2,000 processes, on each plan.
    wanted = request(load_profile(CASES / MEMLOCK / "profile.yaml").profile)
    per_process = [p for p in wanted.patterns if p.startswith("/proc/[") or p.endswith("/limits")]
    assert per_process == []
    assert wanted.commands == {systemd.running_command("containerd.service")}


@pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")
def test_over_ssh_the_running_limits_come_in_the_one_exec_request(
    start_lab: StartLab, tmp_path: Path
) -> None:
    # The lab serves the snapshot (TUNE_ROOT): its shell answers the command from the
    # snapshot's own /proc and cgroup files, as SnapshotHost does.
    root = host_of(tmp_path, MEMLOCK)
    lab = start_lab({"h1": root})
    host = SshSetup(SshSettings(ssh_config=str(lab.config))).host(Target("h1", "h1"))
    try:
        assert pending_of(host, CASES / MEMLOCK / "profile.yaml") == MEMLOCK_PENDING
    finally:
        host.close()
    assert lab.exec_requests() == {"h1": 1}
    assert pending_of(SnapshotHost(root), CASES / MEMLOCK / "profile.yaml") == MEMLOCK_PENDING


CONTAINERD_PROCS = "sys/fs/cgroup/system.slice/containerd.service/cgroup.procs"


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_the_shell_lists_a_units_processes_as_the_snapshot_computes_them(
    tmp_path: Path, shell: str
) -> None:
    root = host_of(tmp_path, MEMLOCK)
    # A hostile PID list is split, never globbed or followed out of /proc; a process that ended
    # between the listing and its reads has no limits, and the next of its program stands in.
    (root / CONTAINERD_PROCS).write_text("*\n../../etc\n4242\n812\n2301\n2302\n")
    write(root, "/proc/4242/comm", "containerd\n")
    shutil.copytree(root / "proc/2301", root / "proc/2302")
    wanted = systemd.running_request("containerd.service")
    computed = SnapshotHost(root).fetch(wanted)
    assert LocalShellHost(root, shell).fetch(wanted).commands == computed.commands
    processes = systemd.running_processes(computed, "containerd.service")
    assert processes is not None
    assert [(p.pid, p.comm, p.limits is None) for p in processes] == [
        ("4242", "containerd", True),
        ("812", "containerd", False),
        ("2301", "containerd-shim", False),
        # Limits go out once per program: a runtime's hundred shims stay under the cap.
        ("2302", "containerd-shim", True),
    ]


def recorded_answer(root: Path, status: int, stdout: bytes) -> None:
    argv = systemd.running_command("containerd.service")
    for path, data in recorded.record(argv, CommandOutput(status, stdout)).items():
        write(root, path, data)


@pytest.mark.parametrize(
    ("status", "stdout"),
    [(1, b""), (0, b"U\0containerd.service\0P\0812\0containerd\n"), (0, b"garbage")],
    ids=["failed", "cut-short", "unreadable"],
)
def test_running_limits_that_cannot_be_read_are_a_note_not_a_pending_restart(
    tmp_path: Path, status: int, stdout: bytes
) -> None:
    root = host_of(tmp_path, MEMLOCK)
    recorded_answer(root, status, stdout)
    loaded = load_profile(CASES / MEMLOCK / "profile.yaml")
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, False), False)
    assert plan.pending == ()
    assert any("limits of its running process cannot be read" in n.message for n in plan.notes)


def test_tune_snapshot_records_the_units_processes(tmp_path: Path) -> None:
    root = host_of(tmp_path, MEMLOCK)
    profile = CASES / MEMLOCK / "profile.yaml"
    wanted = request(load_profile(profile).profile)
    archive = tmp_path / "host.tar.gz"
    write_archive(SnapshotHost(root).fetch(wanted), archive)
    assert pending_of(ArchiveHost(archive), profile) == MEMLOCK_PENDING


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_on_a_real_host_the_script_runs_from_its_root(shell: str) -> None:
    # No TUNE_ROOT: the command itself runs, from `/`, however tune was started.
    unit = "tune-test-absent.service"
    wanted = systemd.running_request(unit)
    for files in (LocalHost().fetch(wanted), ThisMachineShell("/", shell).fetch(wanted)):
        assert files.output(systemd.running_command(unit)).stdout == f"U\0{unit}\0".encode()
        assert systemd.running_processes(files, unit) == []


def test_the_gpus_persistence_drop_in_is_not_the_services_drop_in() -> None:
    # A profile may set nvidia-persistenced's limits (`services`) and the GPUs' persistence
    # (`gpus`): each kind's drop-in is its own file, or each write loses the other's lines.
    unit = "nvidia-persistenced.service"
    assert PERSISTENCED_DROPIN.startswith(f"{systemd.ADMIN}/{unit}.d/")
    assert systemd.dropin(unit) != PERSISTENCED_DROPIN


def test_a_limit_systemd_cannot_parse_is_compared_as_written() -> None:
    assert systemd.configured_limit("LimitMEMLOCK", "64M") == str(64 << 20)
    assert systemd.configured_limit("LimitMEMLOCK", "8M:infinity") == f"{8 << 20}:infinity"
    # A size suffix on a count: systemd ignores the line; no wanted value equals it.
    assert systemd.configured_limit("LimitNOFILE", "1M") == "1M"
    assert systemd.configured_limit("LimitNOFILE", None) is None
