"""Which engine writes a host, and that only `engine_for` asks what kind of host it is."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import lab
import pytest
from conftest import LIVE_RUN_SCRIPT
from test_remote_apply import host_and_profile
from test_shell_read import LocalShellHost

from reconciler.apply.engines import LocalEngine, PythonEngine, ShellEngine, engine_for
from reconciler.core.errors import HostError
from reconciler.hosts.base import Host
from reconciler.hosts.directory import LocalHost, SnapshotHost
from reconciler.hosts.local import LocalShell
from reconciler.hosts.shell import ScriptResult
from reconciler.profile.load import load_profile

PACKAGE = Path(__file__).resolve().parent.parent / "reconciler"


def test_a_host_that_runs_scripts_gets_the_sh_engine_any_other_the_python_one(
    tmp_path: Path,
) -> None:
    assert isinstance(engine_for(LocalShellHost(tmp_path)), ShellEngine)
    engine = engine_for(SnapshotHost(tmp_path), root=str(tmp_path))
    assert isinstance(engine, PythonEngine)
    assert engine.probe_executor()[1] == {"TUNE_ROOT": str(tmp_path.resolve())}


def test_only_engine_for_asks_whether_a_host_runs_scripts() -> None:
    """The orchestration, the CLI and the probes are written against `Engine`: a second place
    that tells SSH from local is where two paths start to diverge again."""
    asking = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and "ShellHost" in ast.unparse(node.args[1])
            ):
                asking.append(path.relative_to(PACKAGE).as_posix())
    assert asking == ["apply/engines.py"]


def test_this_machine_is_written_by_the_sh_executor_never_by_python() -> None:
    """A live kernel takes one path, local or pushed: the scripts, here fed to this machine's
    own `sh`; the Python executor is the snapshot simulator only."""
    engine = engine_for(LocalHost())
    assert type(engine) is LocalEngine and isinstance(engine, ShellEngine)
    assert type(engine.host) is LocalShell
    assert not engine.outlives_reboot, "the reboot ends this process: `tune verify` follows"
    assert engine.verify_command() == "tune verify"
    with pytest.raises(HostError, match="sh executor"):
        PythonEngine(LocalHost())
    for write in ("set_attr", "run"):  # a live write through Python has nowhere to go
        assert getattr(LocalHost, write) is getattr(Host, write), write  # which refuses


def test_this_machines_scripts_carry_no_lab_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every script `engine_for` gives this machine, recorded as sent: none holds any of the
    lab's emulation. They run against a lab snapshot, never against this machine's `/`: the
    recorder hands each to a lab host rooted there, and the reads come from it too."""
    root, profile = host_and_profile(tmp_path, "h")
    lab_host = LocalShellHost(root)
    sent: list[str] = []

    def recording(self: LocalShell, script: str, timeout: float | None = None) -> ScriptResult:
        sent.append(script)
        return lab_host.run_script(script, timeout)

    monkeypatch.setattr(LocalShell, "run_script", recording)
    engine = engine_for(LocalHost())
    assert isinstance(engine, LocalEngine)
    engine.host.files = SnapshotHost(root)  # type: ignore[assignment]
    lab.every_write(engine, load_profile(str(profile)), root, sent)


def test_this_machines_sh_runs_from_slash_without_a_labs_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TUNE_ROOT in tune's environment must not turn this machine's scripts to a directory
    (nor TUNE_LAB make lib.sh source a file): a live host's root is `/`."""
    monkeypatch.setenv("TUNE_ROOT", str(tmp_path))
    monkeypatch.setenv("TUNE_LAB", str(tmp_path / "lab.sh"))
    script = 'echo "${TUNE_ROOT-unset} ${TUNE_LAB-unset}"; pwd\n'
    done = LIVE_RUN_SCRIPT(LocalShell(), script)  # conftest refuses it to every other test
    assert (done.status, done.stdout) == (0, b"unset unset\n/\n")
    assert os.environ["TUNE_ROOT"] == str(tmp_path)
