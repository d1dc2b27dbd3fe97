"""A path a profile names stays under the tree its kind owns, on every engine (issue #15, item 1),
and a file name found on a host is only ever data in the scripts tune sends it (item 15).

The attack: sysfs forbids the components `.` and `..`, but a glob such as `.?` is left to the
host's shell, and dash expands `.?` to `..` (readdir lists both). So three lines hold, each on its
own: validation refuses a glob that could name a dot entry; the host's shell drops any expansion
that leaves the pattern's literal prefix, checked after globbing; the apply primitives refuse a
path with a `.` or `..` component, whoever built the step. The lab's hosts are snapshot
directories behind a real sshd; the secrets lie beside them, outside every host's root.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_tune, write
from hypothesis import example, given
from hypothesis import strategies as st
from small_host import SmallHost, build, write_profile
from ssh_fixture import SshLab, StartLab, sshd_available
from test_shell_read import LocalShellHost

from reconciler.apply.journal import new_run_id
from reconciler.apply.sh_engine import start, wait
from reconciler.apply.sh_script import LIBRARY, ApplyScript
from reconciler.core.errors import HostError
from reconciler.core.files import Files, Request
from reconciler.core.quoting import quoted
from reconciler.hosts.archive import ArchiveHost, write_archive
from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.shell import _INSIDE, ReadScript, ShellHost
from reconciler.hosts.ssh import SshSettings, SshSetup
from reconciler.hosts.targets import Target
from reconciler.kinds.base import Entry
from reconciler.kinds.sysfs import KIND as SYSFS
from reconciler.steps.ops import Step
from reconciler.steps.records import RunStarted

needs_lab = pytest.mark.skipif(
    not sshd_available(), reason="needs root and openssh-server (.ci/run installs it)"
)

SECRET = b"TOP-SECRET host key\n"
# From /sys in a host laid out at BASE/host, `..` twice reaches BASE: outside the host's root.
OUT_OF_ROOT = "/sys/.?/.?/outside/secret"
# Inside the host's root, outside the tree sysfs owns.
OUT_OF_SYS = "/sys/.?/etc/ssh/ssh_host_ed25519_key"
# What dash made of them before: the paths tune then planned, archived and wrote.
EXPANDED = ("/sys/../../outside/secret", "/sys/../etc/ssh/ssh_host_ed25519_key")
THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def lab_run(run_id: str) -> RunStarted:
    """The `run` record of a script started by hand."""
    return RunStarted(run_id, "2026-01-01T00:00:00Z", "lab", "runtime", "lab", None)


@dataclasses.dataclass(frozen=True)
class Planted:
    """A lab host's root and the two secrets an escaping glob would reach."""

    root: Path
    outside: Path  # beside the host's root
    host_key: Path  # in the host's root, outside /sys

    def intact(self) -> bool:
        return self.outside.read_bytes() == SECRET and self.host_key.read_bytes() == SECRET


def planted(base: Path) -> Planted:
    root = build(base / "host", SmallHost())
    outside = write(base, "/outside/secret", SECRET)
    host_key = write(root, "/etc/ssh/ssh_host_ed25519_key", SECRET)
    return Planted(root, outside, host_key)


def ssh_host(lab: SshLab, name: str = "h1") -> ShellHost:
    return SshSetup(SshSettings(ssh_config=str(lab.config))).host(Target(name, name))


@pytest.mark.parametrize(
    "pattern",
    [
        OUT_OF_ROOT,
        OUT_OF_SYS,
        "/sys/.*/etc/passwd",
        "/sys/.[.]/etc/passwd",
        "/sys/class/.net*/x",
        "/sys/class/[.]?/x",
        "/sys/class/[--0]?/x",  # a range that holds `.`
    ],
)
def test_validation_refuses_a_glob_that_could_name_a_dot_entry(
    tmp_path: Path, pattern: str
) -> None:
    profile = write(tmp_path, "p.yaml", f"name: x\nsysfs:\n  {pattern}: pwned\n")
    result = run_tune("validate", profile)
    assert result.code == 65, result
    assert result.err.startswith(f"{profile}:3:3: sysfs: key '{pattern}' ")
    assert "could match a name that starts with a dot" in result.err
    assert "Traceback" not in result.err


@pytest.mark.parametrize(
    "pattern",
    [
        "/sys/block/*/queue/scheduler",  # POSIX: `*` and `?` never match a leading `.`
        "/sys/class/net/?th0/mtu",
        "/sys/devices/system/cpu/cpu[0-9]/online",
        "/sys/class/net/eth0.100/mtu",  # a dot inside a name
        "/sys/kernel/debug.x?/y",
    ],
)
def test_globs_that_cannot_name_a_dot_entry_stay_valid(tmp_path: Path, pattern: str) -> None:
    profile = write(tmp_path, "p.yaml", f"name: x\nsysfs:\n  {pattern}: x\n")
    result = run_tune("validate", profile)
    assert (result.code, result.err) == (0, "")


@needs_lab
def test_a_profile_glob_never_reads_or_writes_outside_sys_over_ssh(
    tmp_path: Path, start_lab: StartLab
) -> None:
    host = planted(tmp_path)
    lab = start_lab({"h1": host.root})
    profile = write_profile(tmp_path / "p.yaml", {"sysfs": {OUT_OF_ROOT: "x", OUT_OF_SYS: "x"}})
    over_ssh = ("-H", "h1", "--ssh-config", lab.config)
    archive = tmp_path / "snap.tar.gz"
    for args in (
        ("validate", profile),
        ("plan", profile, *over_ssh),
        ("snapshot", profile, "-o", archive, *over_ssh),
        ("apply", "--runtime-only", "-y", profile, *over_ssh),
    ):
        result = run_tune(*args)
        assert result.code == 65, (args[0], result)
        assert "could match a name that starts with a dot" in result.err
        assert "TOP-SECRET" not in result.out + result.err
    assert not archive.exists()
    assert host.intact()


def escaping_request() -> Request:
    """Every way a read names a glob, each aimed out of /sys, beside one honest read."""
    return Request.of(
        THP,
        OUT_OF_ROOT,
        OUT_OF_SYS,
        "/sys/.*/.*/outside/*",
        whole=["/sys/.?/.?/outside/secre[t]"],
        newest=[("/sys/.?/.?/outside/*", 3)],
        nodes=["/sys/.?/.?/outside/*"],
    )


def nothing_escaped(files: Files) -> None:
    assert set(files.contents) == {THP}
    assert not any(files.matches[p] for p in files.matches if p != THP)
    assert not any(files.nodes.values())
    assert all(SECRET not in data for data in files.contents.values())


@needs_lab
def test_the_hosts_shell_drops_what_a_glob_expands_outside_its_prefix(
    tmp_path: Path, start_lab: StartLab
) -> None:
    """Validation bypassed: the request is built directly, as a kind's bug would build it."""
    host = planted(tmp_path)
    lab = start_lab({"h1": host.root})
    remote = ssh_host(lab)
    try:
        over_ssh = remote.fetch(escaping_request())
        # The host's own answer, before this side checks anything: the secret never left it.
        answer = remote.run_script(ReadScript.of(escaping_request()).text)
    finally:
        remote.close()
    nothing_escaped(over_ssh)
    assert answer.status == 0 and b"TOP-SECRET" not in answer.stdout
    assert b"/../" not in answer.stdout
    # Every engine applies the same rule to the same request.
    direct = SnapshotHost(host.root).fetch(escaping_request())
    assert over_ssh == direct
    # In one round trip, as any read: what the shell dropped leaves no word for head to miss.
    local_sh = LocalShellHost(host.root)
    assert local_sh.fetch(escaping_request()) == direct
    assert len(local_sh.scripts) == 1
    write_archive(over_ssh, tmp_path / "a.tar.gz")
    assert ArchiveHost(tmp_path / "a.tar.gz").fetch(escaping_request()) == direct


def escaping_step(path: str) -> Step:
    """The step tune planned for the path dash expanded before: validation bypassed."""
    spec = {OUT_OF_ROOT: Entry(value="pwned")}
    files = Files(contents={path: SECRET}, matches={OUT_OF_ROOT: (path,)})
    (change,) = SYSFS.compare(spec, files).changes
    return SYSFS.step(spec, change, files)


@needs_lab
@pytest.mark.parametrize("path", EXPANDED)
def test_apply_refuses_a_step_that_leads_out_of_sys_on_every_engine(
    tmp_path: Path, start_lab: StartLab, path: str
) -> None:
    host = planted(tmp_path / "remote")
    lab = start_lab({"h1": host.root})
    remote = ssh_host(lab)
    run_id = new_run_id()
    script = ApplyScript.of((escaping_step(path),), lab_run(run_id), None)
    try:
        start(remote, script)
        run = wait(remote, run_id, timeout=60, interval=0.05)
    finally:
        remote.close()
    assert host.intact()
    refused = f"{path}: refusing a path that is not absolute and normal."
    # Neither the write nor the read that would verify its undo happened: the local engine's
    # records for a path its host refuses.
    assert [r.get("error") for r in (r.to_json() for r in run.records) if "error" in r] == [
        refused,
        refused,
    ]
    assert run.outcome == "rollback-failed"

    local = planted(tmp_path / "local")
    snapshot = SnapshotHost(local.root)
    attempts: list[Callable[[], object]] = [
        lambda: snapshot.set_attr(path, "pwned"),
        lambda: snapshot.put_file(path, b"pwned"),
        lambda: snapshot.read_file(path),
    ]
    for attempt in attempts:
        with pytest.raises(HostError, match=f"^{re.escape(refused)}$"):
            attempt()
    assert local.intact()


def test_the_apply_library_expands_no_glob(tmp_path: Path) -> None:
    """A module parameter's value with a bracket in it, written on a snapshot target: the
    library splits the modprobe words but never globs them against its working directory."""
    root = build(tmp_path / "host", SmallHost())
    write(tmp_path, "/NVreg_X=a", "")  # the apply script's working directory, here
    shell = LocalShellHost(root)
    argv = "modprobe nvidia 'NVreg_X=[ab]'"
    done = shell.run_script(f"{LIBRARY}run_argv 'modprobe nvidia NVreg_X=[ab]' {argv} || exit 1\n")
    assert done.status == 0, done.stderr
    assert (root / "sys/module/nvidia/parameters/NVreg_X").read_text() == "[ab]\n"


HOSTILE = (
    "$(touch ${TUNE_ROOT}-dollar)",
    "`touch ${TUNE_ROOT}-backquote`",
    'a "quoted" name',
    "a\nnewline",
    "an unclosed $(",
    "it's",
)


def hostile_host(base: Path) -> Path:
    root = build(base / "host", SmallHost())
    for name in HOSTILE:
        write(root, f"/sys/class/tune-test/{name}/value", "0\n")
    return root


def injected(root: Path) -> list[Path]:
    """What a host file name run as a command would have created beside the host's root."""
    return sorted(root.parent.glob(f"{root.name}-*"))


@needs_lab
def test_host_file_names_are_only_data_in_the_remote_apply(
    tmp_path: Path, start_lab: StartLab
) -> None:
    root = hostile_host(tmp_path)
    lab = start_lab({"h1": root})
    profile = write_profile(tmp_path / "p.yaml", {"sysfs": {"/sys/class/tune-test/*/value": 1}})
    result = run_tune(
        "apply", "--runtime-only", "--no-persist", "-y", profile, "-H", "h1",
        "--ssh-config", lab.config,
    )  # fmt: skip
    assert (result.code, result.err) == (0, ""), result
    for name in HOSTILE:
        assert (root / "sys/class/tune-test" / name / "value").read_text() == "1\n"
    assert injected(root) == []


@needs_lab
def test_a_failed_read_back_names_the_file_without_running_it(
    tmp_path: Path, start_lab: StartLab
) -> None:
    """The read-back message carries the host's file name: a kernel that clamps the value (the
    step expects what the host will not read back) makes the script say it."""
    root = hostile_host(tmp_path)
    lab = start_lab({"h1": root})
    remote = ssh_host(lab)
    pattern = "/sys/class/tune-test/*/value"
    spec = {pattern: Entry(value="1")}
    try:
        files = remote.fetch(SYSFS.request(spec))
        changes = SYSFS.compare(spec, files).changes
        assert sorted(c.target for c in changes) == sorted(
            f"/sys/class/tune-test/{name}/value" for name in HOSTILE
        )
        steps = tuple(dataclasses.replace(SYSFS.step(spec, c, files), expect="2") for c in changes)
        for step in steps:
            run_id = new_run_id()
            start(remote, ApplyScript.of((step,), lab_run(run_id), None))
            run = wait(remote, run_id, timeout=60, interval=0.05)
            failed = next(r for r in (r.to_json() for r in run.records) if r["type"] == "failed")
            said = f"{step.id}: wrote '2' but {step.target} reads back '1'"
            # The journal keeps a record on one line, a newline in a name escaped as JSON does.
            assert failed["error"] == f"{said} (refused or clamped by the kernel)"
            assert run.outcome == "rolled-back"
    finally:
        remote.close()
    assert injected(root) == []
    assert {(root / "sys/class/tune-test" / n / "value").read_text() for n in HOSTILE} == {"0\n"}


def kept_by_the_hosts_shell(words: list[str]) -> list[str]:
    """What the read script's check after globbing (`shell._INSIDE`) leaves of `words`."""
    words_list = " ".join(map(quoted, words))
    script = f"set -- {words_list}\n{_INSIDE}for w; do printf '%s\\0' \"$w\"; done\n"
    done = subprocess.run(["sh", "-c", script], capture_output=True, check=True)
    return [w.decode() for w in done.stdout.split(b"\0")[:-1]]


@given(st.lists(st.text(alphabet="a./ ", max_size=8).map(lambda w: "./" + w), max_size=6))
@example(["./sys/.driver-ctr-ready", "./sys/..", "./sys/.", "./a/../b", "./a/./b", "./x/..y"])
def test_the_check_after_globbing_drops_exactly_the_words_with_a_dot_component(
    words: list[str],
) -> None:
    """Hidden files (`.driver-ctr-ready`) pass the check's first, cheap test; any word with a
    `.` or `..` component, at its end or before a space in the next word too, is dropped."""
    inside = [w for w in words if "/./" not in w + "/" and "/../" not in w + "/"]
    assert kept_by_the_hosts_shell(words) == inside
