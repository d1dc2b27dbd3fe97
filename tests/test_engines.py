"""Which engine writes a host, and that only `engine_for` asks what kind of host it is."""

from __future__ import annotations

import ast
from pathlib import Path

from test_shell_read import LocalShellHost

from reconciler.apply.engines import PythonEngine, ShellEngine, engine_for
from reconciler.hosts.directory import SnapshotHost

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
