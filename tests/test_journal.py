"""The damaged-journal rule, with journals a real apply wrote on a snapshot: a torn last line is
a crash and reads as an interrupted run; any other damage names the file and line and what can
still be rolled back, from every command that reads journals, and never as a traceback."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from conftest import Result, run_tune
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from small_host import SmallHost, build, tree, write_profile

from reconciler.apply.journal import DamagedJournal, parse_run, read_journal
from reconciler.core.errors import ExitCode
from reconciler.steps.ops import DeleteFile, PutFile, SetAttr, Step

RUNS = "var/lib/tune/runs"


@cache
def applied(base: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """A small host before and after a real `tune apply` (runtime knobs, their sysctl.d and
    modules-load.d files, a directory created for them), the profile, and the tree before."""
    before = build(
        base / "before",
        SmallHost(
            sysctls={"vm.swappiness": "60", "vm.dirty_ratio": "20"},
            governors=["schedutil", "schedutil"],
            thp="always",
            modules=["nvidia"],
        ),
    )
    profile = write_profile(
        base / "p.yaml",
        {
            "sysctl": {"vm.swappiness": 10, "vm.dirty_ratio": 5},
            "sysfs": {"/sys/kernel/mm/transparent_hugepage/enabled": "madvise"},
            "cpu": {"governor": "performance"},
            "modules": {"nvidia_peermem": "loaded"},
        },
    )
    after = base / "after"
    shutil.copytree(before, after, symlinks=True)
    done = run_tune("apply", profile, "--runtime-only", "--root", after, "-y")
    assert done.code == 0, done.err
    return after, profile, tree(before)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, bytes]]:
    return applied(tmp_path_factory.mktemp("journal"))


def journal_of(root: Path) -> Path:
    (path,) = (root / RUNS).glob("*.jsonl")
    return path


def fresh(host: tuple[Path, Path, dict[str, bytes]], target: Path) -> Path:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(host[0], target, symlinks=True)
    return target


def clear(result: Result) -> None:
    """A message an operator can act on: no traceback, not tune's own failure (exit 70)."""
    assert result.code != 70, result.err
    assert "Traceback" not in result.err + result.out
    assert "internal error" not in result.err


def touched(step: Step) -> set[str]:
    ops = (*step.do, *step.undo)
    return {step.probe.path} | {
        op.path for op in ops if isinstance(op, SetAttr | PutFile | DeleteFile)
    }


def test_a_step_record_without_its_probe_is_named_not_a_crash(
    host: tuple[Path, Path, dict[str, bytes]], tmp_path: Path
) -> None:
    """The exit-70 crash: `internal error: KeyError: 'probe'` from rollback and history."""
    root = fresh(host, tmp_path / "h")
    path = journal_of(root)
    lines = path.read_bytes().splitlines(keepends=True)
    steps = [n for n, line in enumerate(lines) if json.loads(line)["type"] == "step"]
    damaged = steps[2]
    record = json.loads(lines[damaged])
    del record["probe"]
    lines[damaged] = (json.dumps(record) + "\n").encode()
    path.write_bytes(b"".join(lines))
    where = f"/{RUNS}/{path.name}:{damaged + 1}: the step record has no probe"

    history = run_tune("history", "--root", root)
    clear(history)
    assert history.code == ExitCode.JOURNAL
    assert history.err.startswith(where), history.err
    assert "damaged" in history.out  # the table is still shown, the run marked
    assert "The 2 steps recorded before it" in history.err

    rollback = run_tune("rollback", "--yes", "--root", root)
    clear(rollback)
    assert rollback.code == ExitCode.JOURNAL
    assert rollback.err.startswith(where), rollback.err
    assert "Only the 2 steps recorded before line" in rollback.err
    assert "Rolled back run" in rollback.out and "2 restored" in rollback.out
    readable = read_journal(path.stem, b"".join(lines[:damaged]) + b"")
    before = host[2]
    for _, step in readable.steps:
        for file in touched(step):
            assert tree(root).get(file.lstrip("/")) == before.get(file.lstrip("/")), file


def test_a_torn_last_line_is_a_crash_and_reads_as_interrupted(
    host: tuple[Path, Path, dict[str, bytes]], tmp_path: Path
) -> None:
    root = fresh(host, tmp_path / "h")
    path = journal_of(root)
    data = path.read_bytes()
    cut = data.rstrip(b"\n").rfind(b"\n") + 10  # into the last record, the `end`
    path.write_bytes(data[:cut])
    run = parse_run(path.stem, data[:cut])
    assert run.outcome == "interrupted" and run.damage is None
    history = run_tune("history", "--root", root, "--format", "json")
    assert history.code == 0, history.err
    assert json.loads(history.out)["runs"][0]["outcome"] == "interrupted"
    rollback = run_tune("rollback", "--yes", "--root", root)
    assert rollback.code == 0, rollback.err
    assert tree(root) == host[2]
    # The torn record was cut before the rollback's were added: the journal reads whole.
    after = parse_run(path.stem, path.read_bytes())
    assert after.outcome == "rolled-back" and after.damage is None


def test_an_unknown_record_in_the_middle_is_damage(
    host: tuple[Path, Path, dict[str, bytes]],
) -> None:
    data = journal_of(host[0]).read_bytes()
    lines = data.splitlines(keepends=True)
    odd = [*lines[:3], b'{"type":"teleported","seq":1}\n', *lines[3:]]
    with pytest.raises(DamagedJournal) as caught:
        parse_run("r", b"".join(odd), "/j")
    assert str(caught.value).startswith('/j:4: unknown record type "teleported"')


def truncate(data: bytes, at: int, _: int) -> bytes:
    return data[: at % (len(data) + 1)]


def flip(data: bytes, at: int, byte: int) -> bytes:
    at %= len(data)
    return data[:at] + bytes([data[at] ^ (byte or 1)]) + data[at + 1 :]


def drop(data: bytes, at: int, _: int) -> bytes:
    lines = data.splitlines(keepends=True)
    del lines[at % len(lines)]
    return b"".join(lines)


def duplicate(data: bytes, at: int, _: int) -> bytes:
    lines = data.splitlines(keepends=True)
    at %= len(lines)
    return b"".join(lines[: at + 1] + lines[at:])


def junk(data: bytes, at: int, byte: int) -> bytes:
    lines = data.splitlines(keepends=True)
    at %= len(lines) + 1
    filler = [b"\n", b"{}\n", b"null\n", b'{"type":"written","seq":999}\n', bytes([byte]) + b"\n"]
    return b"".join([*lines[:at], filler[byte % len(filler)], *lines[at:]])


DAMAGE: dict[str, Callable[[bytes, int, int], bytes]] = {
    f.__name__: f for f in (truncate, flip, drop, duplicate, junk)
}


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    how=st.sampled_from(sorted(DAMAGE)),
    at=st.integers(min_value=0, max_value=1 << 20),
    byte=st.integers(min_value=0, max_value=255),
)
@example(how="drop", at=0, byte=0)  # the run record
@example(how="truncate", at=0, byte=0)  # an empty journal
def test_any_damage_gives_a_clear_message_and_restores_what_is_readable(
    host: tuple[Path, Path, dict[str, bytes]], tmp_path: Path, how: str, at: int, byte: int
) -> None:
    root = fresh(host, tmp_path / "h")
    path = journal_of(root)
    data = DAMAGE[how](path.read_bytes(), at, byte)
    path.write_bytes(data)
    readable = read_journal(path.stem, data)
    profile = host[1]
    for args in (
        ("history", "--root", root),
        ("check", profile, "--root", root),
        ("check", profile, "--root", root, "--since-apply"),
        ("report", "--root", root),
    ):
        clear(run_tune(*args))
    rollback = run_tune("rollback", "--yes", "--root", root)
    clear(rollback)
    if readable.damage is not None:
        assert rollback.code == ExitCode.JOURNAL
        assert rollback.err.startswith(f"/{RUNS}/{path.name}:{readable.damage.line}: ")
    if rollback.code in (ExitCode.IN_SYNC, ExitCode.JOURNAL):
        # Everything recorded before the damage is back exactly as it was before the apply.
        after, before = tree(root), host[2]
        for _, step in readable.steps:
            for file in touched(step):
                assert after.get(file.lstrip("/")) == before.get(file.lstrip("/")), file
    else:  # a value the damage altered, restored and read back different: said, not hidden
        assert rollback.code == ExitCode.APPLY_FAILED, rollback.err
        assert "not restored" in rollback.err


def test_an_apply_over_a_damaged_run_says_so_and_after_interrupted_goes_on(
    host: tuple[Path, Path, dict[str, bytes]], tmp_path: Path
) -> None:
    root = fresh(host, tmp_path / "h")
    path = journal_of(root)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], b"\x00junk\n", *lines[2:]]))
    refused = run_tune("apply", host[1], "--runtime-only", "--root", root, "-y")
    clear(refused)
    assert refused.code == ExitCode.JOURNAL
    assert refused.err.startswith(f"/{RUNS}/{path.name}:3: ")
    assert refused.err.endswith("`tune apply --after-interrupted` applies over it.\n")
    over = run_tune("apply", host[1], "--runtime-only", "--root", root, "-y", "--after-interrupted")
    assert over.code == 0, over.err


def test_the_check_before_a_run_reads_the_observation_in_its_batch_unless_it_waited(
    host: tuple[Path, Path, dict[str, bytes]], tmp_path: Path
) -> None:
    """`before_apply(also=...)` returns what it read with the runs (the apply's observation, a
    round trip less). A run without its end that ends while the check waits for its lock (a
    pull on the host) makes that read stale: None, so the apply reads the host again."""
    from reconciler.apply.journal import before_apply
    from reconciler.core.errors import UnfinishedRun
    from reconciler.core.files import Request
    from reconciler.hosts.directory import SnapshotHost

    root = fresh(host, tmp_path / "h")
    swappiness = "/proc/sys/vm/swappiness"
    files = before_apply(SnapshotHost(root), also=Request.of(swappiness))
    assert files is not None and files.text(swappiness) == "10\n"
    # The journal's bytes are not kept with the observation (a wave's would add up).
    assert files.read("/" + str(journal_of(root).relative_to(root))) is None
    assert not [p for p in files.contents if "/runs/" in p]
    assert before_apply(SnapshotHost(root)) is None  # nothing asked beside the runs

    path = journal_of(root)
    ended = path.read_bytes()
    path.write_bytes(ended[: ended.rstrip(b"\n").rfind(b"\n") + 1])  # the `end` not written yet
    with pytest.raises(UnfinishedRun):
        before_apply(SnapshotHost(root), also=Request.of(swappiness))

    def run_ends() -> None:
        path.write_bytes(ended)
        (root / swappiness.lstrip("/")).write_text("30\n")  # what the run set meanwhile

    assert (
        before_apply(SnapshotHost(root), also=Request.of(swappiness), wait_for_lock=run_ends)
        is None
    )
