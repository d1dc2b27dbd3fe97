"""Command output in the one observation: every host type answers a `Request`'s commands in the
same batch as its files, and a snapshot answers from what `tune snapshot` recorded."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import write
from ssh_fixture import StartLab, sshd_available
from test_shell_read import LocalShellHost

from reconciler.core.errors import HostError
from reconciler.core.files import MAX_FILE_BYTES, NOT_INSTALLED, CommandOutput, Request
from reconciler.hosts import directory, recorded
from reconciler.hosts.archive import ArchiveHost, write_archive
from reconciler.hosts.directory import LocalHost, SnapshotHost
from reconciler.hosts.shell import ScriptResult
from reconciler.hosts.ssh import SshSettings, SshSetup
from reconciler.hosts.targets import Target

BINARY = ("printf", "a\\000b\\n'x\\n==> y <==\\n")
FAILS = ("sh", "-c", "echo partial; exit 3")
ABSENT = ("tune-test-no-such-command", "--version")
LARGE = ("head", "-c", str(MAX_FILE_BYTES + 10), "/dev/zero")
READS_STDIN = ("sh", "-c", "cat; echo read-all")
COMMANDS = (BINARY, FAILS, ABSENT, LARGE, READS_STDIN)
EXPECTED = {
    BINARY: CommandOutput(0, b"a\0b\n'x\n==> y <==\n"),
    FAILS: CommandOutput(3, b"partial\n"),
    ABSENT: NOT_INSTALLED,
    LARGE: CommandOutput(0, b"\0" * MAX_FILE_BYTES),
    # The command reads an empty standard input, never the rest of the observation script.
    READS_STDIN: CommandOutput(0, b"read-all\n"),
}


class ThisMachineShell(LocalShellHost):
    """The observation script run by this machine's `sh` as on a real host: no `TUNE_ROOT`,
    so commands run (and files are this machine's)."""

    def run_script(self, script: str, timeout: float | None = None) -> ScriptResult:
        self.scripts.append(script)
        env = {"PATH": os.environ["PATH"]}
        done = subprocess.run([self.shell], input=script.encode(), capture_output=True, env=env)
        return ScriptResult(done.stdout, done.stderr, done.returncode)


def host_tree(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    write(root, "/proc/sys/vm/swappiness", "60\n")
    return root


def wanted() -> Request:
    return Request.of("/proc/sys/vm/swappiness", commands=COMMANDS)


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_the_shell_script_runs_commands_in_the_same_batch_as_the_files(shell: str) -> None:
    host = ThisMachineShell("/", shell)
    files = host.fetch(wanted())
    assert files.commands == EXPECTED
    assert files.read("/proc/sys/vm/swappiness") == Path("/proc/sys/vm/swappiness").read_bytes()
    assert len(host.scripts) == 1


def recorded_tree(tmp_path: Path) -> Path:
    """A snapshot holding what this machine's commands answered, as `tune snapshot` keeps it."""
    live = LocalHost().fetch(Request.of(commands=COMMANDS))
    root = host_tree(tmp_path)
    for argv, answer in live.commands.items():
        for path, data in recorded.record(argv, answer).items():
            write(root, path, data)
    return root


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_a_snapshot_served_as_a_host_answers_from_its_records_never_runs_them(
    tmp_path: Path, shell: str
) -> None:
    root = recorded_tree(tmp_path)
    # The record of one command says something no run would print: it is what comes back.
    write(root, f"{recorded.where(FAILS)}/stdout", "recorded, never run\n")
    snapshot = SnapshotHost(root).fetch(wanted())
    assert snapshot.output(FAILS) == CommandOutput(3, b"recorded, never run\n")
    assert LocalShellHost(root, shell).fetch(wanted()) == snapshot


def test_this_machine_answers_as_the_shell_script_does(tmp_path: Path) -> None:
    assert LocalHost().fetch(Request.of(commands=COMMANDS)).commands == EXPECTED


def test_a_command_past_the_timeout_on_this_machine_is_a_failed_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(directory, "COMMAND_TIMEOUT", 0.2)
    slow = ("sh", "-c", "echo started; sleep 5")
    answer = LocalHost().fetch(Request.of(commands=[slow])).output(slow)
    assert answer.status == directory.TIMED_OUT


def test_a_snapshot_answers_from_what_tune_snapshot_recorded(tmp_path: Path) -> None:
    live = LocalHost().fetch(wanted())
    archive = tmp_path / "host.tar.gz"
    write_archive(live, archive)
    assert ArchiveHost(archive).fetch(wanted()) == live
    unpacked = tmp_path / "unpacked"
    os.makedirs(unpacked)
    import tarfile

    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    assert SnapshotHost(unpacked).fetch(wanted()) == live
    record = unpacked / recorded.where(BINARY).lstrip("/")
    assert (record / "argv").read_bytes() == b"".join(w.encode() + b"\0" for w in BINARY)
    assert not (unpacked / recorded.where(ABSENT).lstrip("/")).exists()


def test_a_snapshot_without_a_record_has_the_command_not_installed(tmp_path: Path) -> None:
    files = SnapshotHost(host_tree(tmp_path)).fetch(wanted())
    assert set(files.commands.values()) == {NOT_INSTALLED}


def test_a_hostile_record_is_one_sentence_and_its_links_stay_inside(tmp_path: Path) -> None:
    root = host_tree(tmp_path)
    base = recorded.where(FAILS)
    write(root, f"{base}/status", "$(reboot)\n")
    with pytest.raises(HostError, match=r"is not an exit status \(0 to 255\)"):
        SnapshotHost(root).fetch(wanted())
    outside = tmp_path / "secret"
    outside.write_text("secret\n")
    write(root, f"{base}/status", "0\n")
    os.symlink(outside, root / f"{base}/stdout".lstrip("/"))
    # A link resolves inside the snapshot, as every path of it does: nothing there, no output.
    assert SnapshotHost(root).fetch(wanted()).output(FAILS) == CommandOutput(0, b"")


def test_requests_merge_their_commands_and_refuse_words_no_exec_can_pass() -> None:
    merged = Request.of(commands=[BINARY]) | Request.of("/proc/cmdline", commands=[FAILS])
    assert merged.commands == {BINARY, FAILS}
    with pytest.raises(ValueError, match="not a command"):
        Request.of(commands=[("nvidia-smi", "a\0b")])
    with pytest.raises(ValueError, match="not a command"):
        Request.of(commands=[()])


@pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")
def test_command_output_comes_over_ssh_within_the_one_exec_request(
    start_lab: StartLab, tmp_path: Path
) -> None:
    # The lab serves each host from a snapshot (TUNE_ROOT): its commands answer from the
    # snapshot's records, byte for byte as the snapshot directory does.
    root = recorded_tree(tmp_path)
    lab = start_lab({"h1": root})
    host = SshSetup(SshSettings(ssh_config=str(lab.config))).host(Target("h1", "h1"))
    try:
        files = host.fetch(wanted())
    finally:
        host.close()
    assert files.commands == EXPECTED
    assert files == SnapshotHost(root).fetch(wanted())
    assert lab.exec_requests() == {"h1": 1}, "the commands join the one observation script"
