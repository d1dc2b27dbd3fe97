"""Every record the sh engine writes is one the strict reader reads back into its type.

apply/lib.sh writes some records with printf (it runs where there is no Python): `mkdir`,
`failed`, `restored`, `unchanged`, `restore-failed`, `unsupported`, `end`, and appends the probe
records tune hands it. The sh engine runs here through this machine's `sh` on snapshots, in
every path that writes one of them; every journal line must come back from
`journal.parse_run` whole, typed, and of the type its JSON names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import write
from small_host import SmallHost, build, tree, write_profile
from test_shell_read import LocalShellHost

from reconciler.apply.engines import ShellEngine
from reconciler.apply.journal import parse_run, read_journal
from reconciler.apply.run_record import contexts, plan_record
from reconciler.apply.sh_engine import apply_remote, start, wait
from reconciler.apply.sh_script import ApplyScript, send_probes
from reconciler.apply.work import prepare
from reconciler.core.errors import ApplyFailed
from reconciler.flow.orchestration import roll_back
from reconciler.hosts.emulate import REFUSES
from reconciler.profile.load import load_profile
from reconciler.steps.records import RECORD_TYPES, GateJudged, ProbesMeasured, RunStarted

NMI = "/proc/sys/kernel/nmi_watchdog"
SWAPPINESS = "proc/sys/vm/swappiness"
# What lib.sh writes with printf, and the probe records it appends as tune sent them.
LIB_SH_RECORDS = {
    "mkdir",
    "failed",
    "restored",
    "unchanged",
    "restore-failed",
    "unsupported",
    "end",
    "probes",
    "gate",
}


def host_and_profile(tmp_path: Path, *, optional: bool) -> tuple[Path, Path]:
    root = build(
        tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60", "kernel.nmi_watchdog": "0"})
    )
    write(root, REFUSES + NMI, "524\n")
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "sysctl": {
                "vm.swappiness": 10,
                "kernel.nmi_watchdog": {"value": 1, "optional": optional},
            }
        },
    )
    return root, profile


def read_back(root: Path) -> set[str]:
    """The record types of every journal on `root`, each line checked against its type."""
    seen: set[str] = set()
    for path in sorted((root / "var/lib/tune/runs").glob("*.jsonl")):
        data = path.read_bytes()
        run = parse_run(path.stem, data)
        lines = data.splitlines()
        assert len(run.records) == len(lines), path
        for line, record in zip(lines, run.records, strict=True):
            kind = json.loads(line)["type"]
            assert type(record) is RECORD_TYPES[kind]
            seen.add(kind)
    return seen


def test_an_apply_an_optional_refusal_and_two_rollbacks(tmp_path: Path) -> None:
    """Apply (its sysctl.d file creates /etc/sysctl.d: `mkdir`), skip the refused optional
    knob (`unsupported`), a rollback that cannot restore one value (`restore-failed`), and
    one that then can (`restored`, `unchanged`)."""
    root, profile = host_and_profile(tmp_path, optional=True)
    assert not (root / "etc/sysctl.d").exists()
    loaded = load_profile(str(profile))
    shell = LocalShellHost(root)
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False)
    apply_remote(shell, work, loaded, phase="runtime", timeout=60, interval=0.05)
    (root / SWAPPINESS).chmod(0o444)  # the emulated kernel now refuses the restore
    assert roll_back(ShellEngine(shell), None)[0].result.failures
    (root / SWAPPINESS).chmod(0o644)
    assert not roll_back(ShellEngine(shell), None)[0].result.failures
    assert (root / SWAPPINESS).read_text() == "60\n"
    seen = read_back(root)
    assert {"mkdir", "unsupported", "restore-failed", "restored", "unchanged", "end"} <= seen
    assert {"run", "plan", "step", "written", "verified", "profile", "rollback"} <= seen


def test_a_failed_apply_rolls_back_on_the_target(tmp_path: Path) -> None:
    root, profile = host_and_profile(tmp_path, optional=False)
    loaded = load_profile(str(profile))
    shell = LocalShellHost(root)
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False)
    with pytest.raises(ApplyFailed, match="not supported on this host"):
        apply_remote(shell, work, loaded, phase="runtime", timeout=60, interval=0.05)
    assert {"failed", "restored", "end"} <= read_back(root)


def test_probe_records_and_a_failed_gate(tmp_path: Path) -> None:
    root, profile = host_and_profile(tmp_path, optional=True)
    (root / (REFUSES + NMI).lstrip("/")).unlink()  # every step reaches its read-back
    loaded = load_profile(str(profile))
    shell = LocalShellHost(root)
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False, with_persistence=False)
    header = RunStarted(
        "20260101T000000Z-000001", "2026-01-01T00:00:00Z", "small", "runtime", "h", None
    )
    script = ApplyScript.of(
        work.steps,
        header,
        None,
        plan_record(work.plan, work.steps),
        contexts(work.plan, work.steps),
        probes_wait=5,
    )
    start(shell, script)
    result = {"name": "score", "metric": "score", "median": 40.0, "values": [40.0]}
    before = send_probes(
        script.run_id, "before", "ok", [ProbesMeasured("before", "runtime", (result,))]
    )
    wait(shell, script.run_id, 30, 0.05, first=before, pause_at=len(work.steps) - 1)
    after = [
        ProbesMeasured("after", "runtime", ({**result, "median": 10.0},)),
        GateJudged("score", "runtime", "after", False, "fell by 75%", 40.0, 10.0, False),
    ]
    run = wait(
        shell,
        script.run_id,
        30,
        0.05,
        first=send_probes(script.run_id, "after", "score fell by 75%", after),
    )
    assert run.outcome == "rolled-back"
    assert {"probes", "gate", "failed", "restored", "end"} <= read_back(root)


def test_the_shapes_above_are_every_one_lib_sh_writes() -> None:
    """A record type added to lib.sh must be added to a scenario here."""
    library = (Path(__file__).parent.parent / "reconciler/apply/lib.sh").read_text()
    printed = {kind for kind in RECORD_TYPES if f'{{\\"type\\":\\"{kind}\\"' in library}
    assert printed <= LIB_SH_RECORDS
    assert printed == LIB_SH_RECORDS - {"probes", "gate"}


def applied_over_sh(tmp_path: Path) -> tuple[Path, LocalShellHost, Path]:
    root, profile = host_and_profile(tmp_path, optional=True)
    before = tmp_path / "before"
    shutil.copytree(root, before, symlinks=True)
    loaded = load_profile(str(profile))
    shell = LocalShellHost(root)
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False)
    apply_remote(shell, work, loaded, phase="runtime", timeout=60, interval=0.05)
    (journal,) = (root / "var/lib/tune/runs").glob("*.jsonl")
    return before, shell, journal


def test_the_sh_rollback_cuts_a_torn_record_before_it_appends(tmp_path: Path) -> None:
    before, shell, journal = applied_over_sh(tmp_path)
    data = journal.read_bytes()
    journal.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 12])  # into the `end`
    (done,) = roll_back(ShellEngine(shell), None)
    assert not done.result.failures and done.damage is None
    assert tree(Path(shell.root)) == tree(before)
    run = parse_run(journal.stem, journal.read_bytes())
    assert run.outcome == "rolled-back"


def test_the_sh_rollback_of_a_damaged_run_restores_what_reads(tmp_path: Path) -> None:
    before, shell, journal = applied_over_sh(tmp_path)
    lines = journal.read_bytes().splitlines(keepends=True)
    last = max(n for n, line in enumerate(lines) if line.startswith(b'{"type":"step"'))
    lines.insert(last, b"not json\n")
    journal.write_bytes(b"".join(lines))
    readable = read_journal(journal.stem, b"".join(lines))
    (done,) = roll_back(ShellEngine(shell), None)
    assert done.damage is not None and done.damage.line == last + 1
    assert done.result.failures == [] and done.result.restored > 0
    after, was = tree(Path(shell.root)), tree(before)
    for _, step in readable.steps:
        assert after.get(step.probe.path.lstrip("/")) == was.get(step.probe.path.lstrip("/"))
    assert after != was  # the step after the damage stays: the message says so
