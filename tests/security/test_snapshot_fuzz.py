"""Hostile host snapshots, generated: whatever a host's files hold at the paths tune reads
(garbage, numbers of thousands of digits, NULs, long lines, nothing, bytes that are not UTF-8,
a link or a directory where a file should be), `tune plan`, `tune apply` (runtime phase, then
reboot phase) and `tune rollback` of each run answer with a sentence and an exit code, never
"internal error" (70), never a traceback, never more than 10 s; and after the rollbacks every
byte of the snapshot is as it was, the files the profile's kinds own included.

The paths are the ones the registry's kinds ask for (`plan.observe.request`), expanded on the
host the fuzz starts from (`hostile_host`), so a kind added to the registry is fuzzed with no
line here. Each example takes one to three sections of the profile (only their kinds read the
files it changes) and one to four changed paths. The run is in-process with the Python executor,
on tmpfs where there is one (each journal record is fsync'd). The budget is fixed and
derandomized so CI sees the same snapshots every run, with no shrinking;
`TUNE_FUZZ_EXAMPLES=N` runs N fresh ones instead, shrinking what fails (a longer hunt, by hand).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import deadline, run_tune
from hostile_host import PROFILE, build_host
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from small_host import listing, write_profile

from reconciler.apply.journal import read_run, run_ids
from reconciler.core.paths import is_glob, matching
from reconciler.hosts import recorded
from reconciler.hosts.directory import SnapshotHost
from reconciler.kinds import REGISTRY
from reconciler.plan.observe import request
from reconciler.profile.load import load_profile
from reconciler.steps.ops import DeleteFile, Probe, PutFile, SetAttr

HUNT = int(os.environ.get("TUNE_FUZZ_EXAMPLES", "0"))
EXAMPLES = HUNT or 1000
BUDGET = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not HUNT,
    database=None,
    phases=(Phase.explicit, Phase.generate, *((Phase.shrink,) if HUNT else ())),
    suppress_health_check=list(HealthCheck),
)
SMI = "/.tune-observed/commands/nvidia-smi-a72ce85616237db9"  # the recorded clocks query
SECONDS = 10  # what one example (plan, two applies, their rollbacks) may take
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None  # fsync costs nothing there
SECTIONS = sorted(PROFILE)

# Text at a path a kind reads, as a hostile host would have it.
HUGE = "9" * 5000
NUMBERS = [
    HUGE,
    "-" + HUGE,
    "0x" + "f" * 5000,
    "0" * 5000 + "1",
    "18446744073709551616",
    "-1",
    "4294967295",
    "0-4294967295",
    "4294967295-0",
    "²",
    "٣",
    "1e400",
    "nan",
    "-inf",
    "0x",
    "[" * 300,
    "unlimited",
    ",",
]


class Blob(bytes):
    """Bytes that a failing example shows by their start and length."""

    def __repr__(self) -> str:
        return f"Blob({bytes(self[:24])!r}{'...' if len(self) > 24 else ''}, {len(self)} bytes)"


HOSTILE = st.one_of(
    st.binary(max_size=48),
    st.sampled_from(NUMBERS).map(lambda s: (s + "\n").encode()),
    st.sampled_from(
        [
            b"",
            b"\n",
            b"\0" * 16,
            b"x" * 70000,
            b"1 " * 40000,
            b"\xff\xfe\xc3\x28 not utf-8\n",
            b"a\rb\x1b[2J\n",
        ]
    ),
).map(Blob)
LINKS = ["/", ".", "..", "self", "loop", "/etc/shadow", "/dev/nvidia0", "missing", "../../.."]


def _instance(pattern: str) -> str:
    """One path `pattern` matches, for a glob that matches nothing on the host."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "[":
            end = pattern.index("]", i + 2)
            out.append(pattern[i + 1].replace("!", "x"))
            i = end + 1
            continue
        out.append({"*": "fuzz", "?": "f"}.get(c, c))
        i += 1
    return "".join(out)


@functools.cache
def template() -> Path:
    """The host every example starts from (built once per session, never changed)."""
    top = Path(tempfile.mkdtemp(dir=SCRATCH, prefix="tune-fuzz-host-"))
    atexit.register(shutil.rmtree, top, True)
    return build_host(top / "host")


@functools.cache
def host_files() -> tuple[str, ...]:
    root = template()
    return tuple(sorted("/" + p for p in listing(root)))


@functools.cache
def places(sections: tuple[str, ...]) -> tuple[str, ...]:
    """Every path the kinds of `sections` read: their request's patterns expanded on the host
    (and one made-up match of each), directories they list, device nodes, command outputs."""
    folder = Path(tempfile.mkdtemp(dir=SCRATCH))
    loaded = load_profile(write_profile(folder / "p.yaml", {s: PROFILE[s] for s in sections}))
    shutil.rmtree(folder)
    wanted = request(loaded.profile)
    found: set[str] = set()
    patterns = [
        *wanted.patterns,
        *wanted.whole,
        *wanted.edited,
        *(p for p, _ in wanted.newest),
        *wanted.nodes,
    ]
    patterns += [*wanted.listings, *(d for d, _ in wanted.listings_if_no_file)]
    for pattern in patterns:
        if is_glob(pattern):
            found.update(matching(pattern, host_files()))
            found.add(_instance(pattern))
        else:
            found.add(pattern)
    for argv in wanted.commands:
        found.update(recorded.record(argv, recorded.CommandOutput(0)))
    return tuple(sorted(p for p in found if not p.startswith(("/var/lib/tune", "/run/tune"))))


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[tuple[str, ...], list[tuple[str, str, Any]]]:
    """Sections of the profile, and what to make at paths their kinds read."""
    sections = tuple(sorted(draw(st.sets(st.sampled_from(SECTIONS), min_size=1, max_size=3))))
    paths = st.sampled_from(places(sections))
    changes = []
    for _ in range(draw(st.integers(1, 4))):
        path = draw(paths)
        how = draw(st.sampled_from(["file", "file", "file", "edit", "link", "dir", "absent"]))
        if how == "file":
            changes.append((path, how, draw(HOSTILE)))
        elif how == "edit":
            changes.append((path, how, (draw(st.integers(0, 200)), draw(HOSTILE))))
        elif how == "link":
            changes.append((path, how, draw(st.sampled_from([*LINKS, *places(sections)]))))
        else:
            changes.append((path, how, None))
    return sections, changes


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()


def hostile(root: Path, changes: list[tuple[str, str, Any]]) -> None:
    """Make each change at its path under `root` (a path whose directory is now a file or a
    link stays as the changes before left it)."""
    for where, how, arg in changes:
        path = root / where.lstrip("/")
        original = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        try:
            _clear(path)
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if how == "file":
            path.write_bytes(arg)
        elif how == "edit":  # the host's own text with the hostile bytes spliced in
            at, data = arg
            at = min(at, len(original))
            path.write_bytes(original[:at] + data + original[at:])
        elif how == "link":
            target = {"self": path.name, "loop": path.name + ".2"}.get(arg, arg)
            path.symlink_to(target)
            if arg == "loop":
                (path.parent / (path.name + ".2")).symlink_to(path.name)
        elif how == "dir":
            path.mkdir()


def loaded(root: Path) -> frozenset[str]:
    """The modules the snapshot's /proc/modules lists."""
    try:
        text = (root / "proc/modules").read_bytes()
    except OSError:
        return frozenset()
    return frozenset(
        line.split(b" ", 1)[0].decode("utf-8", "replace") for line in text.splitlines()
    )


def state(root: Path, modules: frozenset[str]) -> dict[str, tuple[int, bytes | str | None]]:
    """Every entry of the snapshot with its mode and its bytes (a link: its target), but tune's
    journal; /proc/modules as its set of lines (a module unloaded and loaded again moves to
    the top, as on any kernel). /sys/module/NAME of a module not among `modules` (loaded
    before the run) is left out: the kernel makes it at a load and removes it at an unload,
    so a snapshot that has it for a module it does not list loses it when a rollback unloads."""
    out: dict[str, tuple[int, bytes | str | None]] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top, name)
            rel = str(path.relative_to(root))
            if rel.startswith(("var/lib/tune", "run/tune")) or rel in ("var/lib", "run"):
                continue
            parts = rel.split("/")
            if parts[:2] == ["sys", "module"] and len(parts) > 2 and parts[2] not in modules:
                continue
            info = path.lstat()
            data: bytes | str | None = None
            if stat.S_ISLNK(info.st_mode):
                data = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                data = path.read_bytes()
                if rel == "proc/modules":
                    data = b"".join(sorted(data.splitlines(keepends=True)))
            out[rel] = (stat.S_IFMT(info.st_mode) | stat.S_IMODE(info.st_mode), data)
    return out


def journaled(root: Path) -> tuple[set[str], dict[str, tuple[Probe, str | None]]]:
    """What the runs on `root` wrote, from their journals: the files their steps replaced or
    removed, and each kernel attribute they set with how its step reads it and what that
    reading must be once rolled back (the oldest run's first step to set it: the runs are
    undone newest first, each in reverse)."""
    host = SnapshotHost(root)
    files: set[str] = set()
    attributes: dict[str, tuple[Probe, str | None]] = {}
    for run_id in run_ids(host):
        run = read_run(host, run_id)
        for _, step in run.steps if run is not None else ():
            for op in (*step.do, *step.undo):
                if isinstance(op, PutFile | DeleteFile):
                    files.add(op.path.lstrip("/"))
                elif isinstance(op, SetAttr) and op.path == step.probe.path:
                    attributes.setdefault(op.path.lstrip("/"), (step.probe, step.restored))
    return files, attributes


def unexplained(
    root: Path,
    before: dict[str, tuple[int, bytes | str | None]],
    after: dict[str, tuple[int, bytes | str | None]],
    failed: str,
) -> list[str]:
    """The entries the runs and their rollbacks left otherwise than they found them, but:
    - a kernel attribute a step set, that reads as its journal says it found it (the kernel
      takes a value and prints it its own way: `0` comes back `0\\n`, an empty `disable` the
      `0` that tune read it as), or that a command that failed named (a value no kernel takes
      back, which the rollback could not put back);
    - a link at a file a step replaced: a known gap (test_fuzz_findings's xfail
      `test_a_link_at_a_file_tune_replaces_is_put_back_by_rollback`); what the link led to
      is compared as any other file."""
    files, attributes = journaled(root)
    out = []
    for path in sorted(before.keys() | after.keys()):
        was, now = before.get(path), after.get(path)
        if was == now:
            continue
        if path in attributes and now is not None and isinstance(now[1], bytes):
            probe, restored = attributes[path]
            if probe.value((root / path).read_bytes()) == restored:
                continue
        if path.startswith(("proc/", "sys/")) and f"/{path}:" in failed:
            continue
        if path in files and was is not None and stat.S_ISLNK(was[0]):
            continue
        out.append(path)
    return out


def _short(entry: tuple[int, bytes | str | None] | None) -> str:
    if entry is None:
        return "(none)"
    mode, data = entry
    return f"{mode:o} {Blob(data) if isinstance(data, bytes) else data!r}"


def _said(result: Any) -> str:
    return f"{result.code}: {result.err[-2000:]}"


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir=SCRATCH, prefix="tune-fuzz-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_fuzzed_profile_has_every_section_of_the_registry() -> None:
    """The registry is the list: a kind with a profile section of its own is fuzzed."""
    assert {k.section for k in REGISTRY if k.spec_type is not None} == set(PROFILE)


def test_the_unchanged_host_is_applied_and_rolled_back_exactly(scratch: Path) -> None:
    """The fuzz's oracle on the host it starts from: every kind plans a change, and after
    both runs are rolled back the host is byte for byte as it was."""
    root = Path(shutil.copytree(template(), scratch / "plain", symlinks=True))
    profile = write_profile(scratch / "all.yaml", PROFILE)
    before = state(root, loaded(root))
    planned = run_tune("plan", profile, "--root", root, "--format", "json")
    assert planned.code == 2, planned.err
    planned_kinds = {change["kind"] for change in json.loads(planned.out)["changes"]}
    assert {kind.kind for kind in REGISTRY if kind.kind != "check"} <= planned_kinds
    for phase in ("--runtime-only", "--reboot-phase"):
        applied = run_tune("apply", profile, "--root", root, "-y", phase)
        assert applied.code == 0, applied.err
    for run in reversed(run_ids(SnapshotHost(root))):
        assert run_tune("rollback", "--yes", "--root", root, run).code == 0
    assert state(root, loaded(root)) == before


@pytest.mark.slow
@BUDGET
@given(snapshot=snapshots())
# Found in CI: the emulated nvidia-smi rewrote its recorded output through UTF-8 with
# replacement, so a byte that is no UTF-8 came back as three.
@example(
    snapshot=(
        ("gpus",),
        [(f"{SMI}/stdout", "edit", (108, Blob(b"H\xfd")))],
    )
)
def test_no_hostile_snapshot_makes_tune_fail_internally_wait_or_leave_a_trace(
    scratch: Path, snapshot: tuple[tuple[str, ...], list[tuple[str, str, Any]]]
) -> None:
    sections, changes = snapshot
    folder = Path(tempfile.mkdtemp(dir=scratch))
    try:
        root = Path(shutil.copytree(template(), folder / "host", symlinks=True))
        hostile(root, changes)
        profile = write_profile(folder / "p.yaml", {s: PROFILE[s] for s in sections})
        modules = loaded(root)
        before = state(root, modules)
        started = time.monotonic()
        with deadline(3 * SECONDS):
            steps = [
                ("plan", profile, "--root", root, "-o", folder / "plan.txt"),
                ("apply", profile, "--root", root, "-y", "--runtime-only"),
                ("apply", profile, "--root", root, "-y", "--reboot-phase"),
            ]
            failed = ""  # what the commands that failed said
            for command in steps:
                result = run_tune(*command)
                assert result.code != 70, (command[0], _said(result))
                assert "Traceback" not in result.out + result.err
                failed += result.out + result.err if result.code not in (0, 2) else ""
            for run in reversed(run_ids(SnapshotHost(root))):
                result = run_tune("rollback", "--yes", "--root", root, run)
                assert result.code != 70, ("rollback", _said(result))
                failed += result.out + result.err if result.code != 0 else ""
        took = time.monotonic() - started
        assert took < SECONDS, f"{took:.1f} s"
        after = state(root, modules)
        moved = unexplained(root, before, after, failed)
        assert moved == [], [(p, _short(before.get(p)), _short(after.get(p))) for p in moved]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
