"""Input that would never end or never fit: a YAML alias bomb, a FIFO where a profile should be, a
profile of 200,000 keys, a snapshot archive that unpacks to hundreds of megabytes, a sparse
journal of 20 GiB; and a disk that fills up under an apply. Each is refused with one sentence
(or, for a full disk, stops before the write it could not journal), never a hang, never exit 70.

A hang must fail the test, not block the suite: such runs go to a child process with a timeout
and a memory limit."""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import BLACKWELL, UNTUNED, Result, copy_host, run_tune
from small_host import SmallHost, build, whole_tree, write_profile

import reconciler
from reconciler.core.errors import ExitCode, HostError
from reconciler.hosts import archive as host_mod
from reconciler.hosts.archive import ArchiveHost
from reconciler.profile import load as profile_mod
from reconciler.profile.load import load_profile

# Generous for a machine of two busy cores: the unbounded cases take minutes or forever.
CHILD_SECONDS = 20
CHILD_MEMORY = 2 << 30
# Reports the child's peak memory on stderr, whatever way it ends. VmHWM is the peak of the
# child's own memory since its exec: getrusage's ru_maxrss keeps the high-water mark of the
# process image exec replaced, the forked pytest worker's (preexec_fn forces a fork), which
# is larger than the bound once a worker has run a few hundred tests.
CHILD = (
    "import atexit, sys\n"
    "def peak():\n"
    "    with open('/proc/self/status') as status:\n"
    "        kb = [l.split()[1] for l in status if l.startswith('VmHWM:')]\n"
    "    print('peak-kb', kb[0], file=sys.stderr)\n"
    "atexit.register(peak)\n"
    "from reconciler.cli.main import main\n"
    "main(sys.argv[1:])\n"
)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))


def tune_in_child(*args: str | Path) -> tuple[Result, int]:
    """`tune ARGS` in a child process: its result and its peak memory in KiB. A run past
    CHILD_SECONDS fails the test."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=CHILD_SECONDS,
            preexec_fn=_limit_memory,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"tune {' '.join(map(str, args))} was still running after {CHILD_SECONDS} s")
    lines = done.stderr.splitlines()
    peak = [int(line.split()[1]) for line in lines if line.startswith("peak-kb ")]
    err = "\n".join(line for line in lines if not line.startswith("peak-kb "))
    return Result(done.returncode, done.stdout, err), peak[0] if peak else 0


def alias_bomb(levels: int = 9) -> str:
    """Each anchor repeats the one before nine times: 9**9 strings from a few hundred bytes."""
    lines = ["name: bomb", 'l0: &l0 ["x","x","x","x","x","x","x","x","x"]']
    for n in range(1, levels):
        lines.append(f"l{n}: &l{n} [{','.join([f'*l{n - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    assert bomb.stat().st_size < 500
    result, _peak = tune_in_child("validate", bomb)
    assert result.code == 65, result.err
    assert "more than 20,000 keys, values and list items" in result.err
    assert result.err.startswith(f"{bomb}:")


@pytest.mark.parametrize("bracket", ["[", "{a: "])
def test_a_profile_of_nested_brackets_is_refused_where_it_nests_too_deep(
    tmp_path: Path, bracket: str
) -> None:
    nested = tmp_path / "nested.yaml"
    nested.write_text("name: deep\nsysctl:\n  vm.x: " + bracket * 10_000 + "\n")
    result, _peak = tune_in_child("validate", nested)
    assert result.code == 65, result.err
    found = re.fullmatch(rf"{re.escape(str(nested))}:3:(\d+): (.*)\n?", result.err)
    assert found is not None, result.err
    assert found[2] == "collections nested more than 64 deep, the most tune reads in a profile"
    assert int(found[1]) < 64 * len(bracket) + 20


def test_a_profile_nested_a_few_levels_is_still_a_profile(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: n\nsysctl:\n  vm.swappiness: {value: [[[[[[10]]]]]]}\n")
    assert "collections nested" not in run_tune("validate", path).err


def test_aliases_that_repeat_a_little_are_still_a_profile(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: shared\nsysctl:\n  vm.swappiness: &low 10\n  vm.dirty_ratio: *low\n")
    assert load_profile(path).data["sysctl"] == {"vm.swappiness": 10, "vm.dirty_ratio": 10}


@pytest.mark.parametrize("command", ["validate", "plan", "check"])
def test_a_fifo_as_the_profile_is_refused_not_waited_on(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "profile.yaml"
    os.mkfifo(fifo)
    args = [command, fifo] if command == "validate" else [command, fifo, "--root", UNTUNED]
    result, _peak = tune_in_child(*args)
    assert result.code == 65, result.err
    assert result.err.strip() == f"{fifo}:1:1: cannot read profile: a FIFO is not a regular file"


def test_a_profile_of_200000_keys_is_refused_quickly(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: huge\nsysctl:\n" + "".join(f"  k{n}: 1\n" for n in range(200_000)))
    result, _peak = tune_in_child("validate", huge)
    assert result.code == 65, result.err
    assert "larger than 256 KiB, the most tune reads for a profile" in result.err


def test_a_profile_just_under_the_size_limit_with_too_many_keys_is_refused_by_count(
    tmp_path: Path,
) -> None:
    many = tmp_path / "many.yaml"
    many.write_text("name: many\nsysctl:\n" + "".join(f"  k{n}: 1\n" for n in range(12_000)))
    assert many.stat().st_size < 256 << 10
    result, _peak = tune_in_child("validate", many)
    assert result.code == 65, result.err
    assert "more than 20,000 keys" in result.err


@pytest.mark.parametrize("edited", ["the profile", "its parent"])
def test_the_cached_profile_is_the_one_parsed_even_if_a_file_changes_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edited: str
) -> None:
    """An edit between the parse and the cache's store: the entry must describe the bytes
    parsed, so the next run sees the edit (before: the old profile under the new hash)."""
    monkeypatch.setenv("TUNE_CACHE_DIR", str(tmp_path / "cache"))
    parent = tmp_path / "parent.yaml"
    parent.write_text("sysctl:\n  vm.swappiness: 10\n")
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nextends: parent.yaml\n")
    # Either edit sets 99: the profile its own value, or the parent the one it passes on.
    changed, text = {
        "the profile": (path, "name: p\nextends: parent.yaml\nsysctl:\n  vm.swappiness: 99\n"),
        "its parent": (parent, "sysctl:\n  vm.swappiness: 99\n"),
    }[edited]
    real = profile_mod._validated

    def edited_meanwhile(tree: profile_mod.Tree, name: str) -> profile_mod.LoadedProfile:
        loaded = real(tree, name)
        changed.write_text(text)
        return loaded

    monkeypatch.setattr(profile_mod, "_validated", edited_meanwhile)
    assert load_profile(path).data["sysctl"] == {"vm.swappiness": 10}
    monkeypatch.setattr(profile_mod, "_validated", real)
    assert load_profile(path).data["sysctl"] == {"vm.swappiness": 99}


# A full disk: the journal's device fills up in the middle of an apply.

LIBRARY = Path(reconciler.__file__).parent / "apply" / "lib.sh"

JOURNALS = "var/lib/tune/runs"


def journal_lines(root: Path) -> list[bytes]:
    (journal,) = (root / JOURNALS).glob("*.jsonl")
    return journal.read_bytes().splitlines(keepends=True)


def assert_whole_records(root: Path) -> None:
    for line in journal_lines(root):
        assert line.endswith(b"\n"), line
        json.loads(line)


# Four sysctls, written in this order: a full disk is a matter of the journal, not of the knobs.
SYSCTLS = {
    "kernel.numa_balancing": ("1", 0),
    "kernel.nmi_watchdog": ("1", 0),
    "vm.swappiness": ("60", 10),
    "vm.max_map_count": ("65530", 262144),
}


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path]:
    """A small host and a runtime profile of four changes for it."""
    root = build(tmp_path / "h", SmallHost(sysctls={k: v for k, (v, _) in SYSCTLS.items()}))
    profile = write_profile(
        tmp_path / "p.yaml", {"sysctl": {k: v for k, (_, v) in SYSCTLS.items()}}
    )
    return root, profile


def fill_up_at(monkeypatch: pytest.MonkeyPatch, nth_step: int) -> None:
    """The journal's device fills up while the `nth_step`-th step record (0-based) is written:
    write(2) takes half of it, then ENOSPC for everything after (sysfs is not on that device)."""
    real = os.write
    state = {"steps": 0, "full": False}

    def write(fd: int, data: bytes | memoryview) -> int:
        if not os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
            return real(fd, data)
        if state["full"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if bytes(data[:15]) == b'{"type":"step",':
            state["steps"] += 1
            if state["steps"] > nth_step:
                state["full"] = True
                return real(fd, data[: len(data) // 2])
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def test_a_step_whose_record_the_full_disk_cut_short_is_never_written(
    small: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, profile = small
    before = whole_tree(root)
    fill_up_at(monkeypatch, nth_step=2)
    result = run_tune("apply", profile, "--runtime-only", "--root", root, "--yes")
    monkeypatch.undo()
    assert result.code == ExitCode.NO_SPACE, result.err
    assert "no space left on the device" in result.err
    assert "rolled back 2 writes" in result.err
    assert "not restored" not in result.err
    assert whole_tree(root) == before
    assert_whole_records(root)


def test_no_room_for_the_first_record_changes_nothing_and_says_so(
    small: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, profile = small
    before = whole_tree(root)
    real = os.write

    def full(fd: int, data: bytes | memoryview) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", full)
    result = run_tune("apply", profile, "--runtime-only", "--root", root, "--yes")
    monkeypatch.undo()
    assert result.code == ExitCode.NO_SPACE, result.err
    assert result.err.strip().endswith(
        "no space left on the device to append; nothing was changed."
    )
    assert whole_tree(root) == before


def tune_with_files_up_to(limit: int, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """`tune ARGS` in a child whose files cannot grow past `limit` bytes (RLIMIT_FSIZE):
    the kernel writes what fits of the write that crosses it, then refuses with EFBIG (Python
    ignores SIGXFSZ), as a device that fills up does."""

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "reconciler.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=small_files,
        check=False,
    )


def test_a_real_short_write_of_the_kernel_stops_the_apply_before_the_step(
    tmp_path: Path, small: tuple[Path, Path]
) -> None:
    """RLIMIT_FSIZE: the kernel itself writes part of the record that crosses the limit (then
    EFBIG, SIGXFSZ being ignored by Python), as a device that fills up would."""
    root, profile = small
    rehearsal = copy_host(root, tmp_path / "rehearsal")
    assert run_tune("apply", profile, "--runtime-only", "--root", rehearsal, "--yes").code == 0
    lines = journal_lines(rehearsal)
    steps = [n for n, line in enumerate(lines) if line.startswith(b'{"type":"step",')]
    third = steps[2]
    limit = sum(map(len, lines[:third])) + len(lines[third]) // 2
    shutil.rmtree(rehearsal)
    before = whole_tree(root)

    args = ("--runtime-only", "--root", root, "--yes")
    done = tune_with_files_up_to(limit, "apply", "--yes", profile, *args)
    assert done.returncode == ExitCode.APPLY_FAILED, done.stderr
    assert "File too large" in done.stderr
    assert "rolled back 2 writes" in done.stderr
    assert "not restored" not in done.stderr
    assert whole_tree(root) == before
    assert_whole_records(root)


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_the_remote_engine_keeps_a_record_whole_or_not_at_all(tmp_path: Path, shell: str) -> None:
    """apply/lib.sh's `rec` under a file size limit: the kernel takes part of the record; `rec`
    must fail (so the step is not written) and leave only whole records behind."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    journal = tmp_path / "run.jsonl"
    journal.write_bytes(b'{"type":"run"}\n')
    record = json.dumps({"type": "step", "seq": 0, "data": "x" * 1000})
    script = (
        f". {LIBRARY}\nJ={journal}\ntrap '' XFSZ\nulimit -f 1\n"  # 512 bytes
        'note \'{"type":"written","seq":9}\'\n'
        'if rec "$1"; then echo wrote; else echo "refused: $ERR"; fi\n'
        'echo "kept: $PEND"\n'
    )
    done = subprocess.run(
        [shell, "-c", script, shell, record], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.startswith("refused: "), done.stdout + done.stderr
    assert journal.read_bytes() == b'{"type":"run"}\n'
    # The marker noted before it is not lost with it: the next record takes it.
    assert done.stdout.endswith('kept: {"type":"written","seq":9}\n'), done.stdout


def rec_with(
    tmp_path: Path, dd: str | None, body: str, *args: str, library: Path = LIBRARY
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`body` run by sh with `library` (lib.sh) sourced and J a journal holding a `run` record;
    `dd`: the text of a `dd` that comes first on PATH (None: the system's). Returns how it
    ended and J."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if dd is not None:
        (bin_dir / "dd").write_text(dd)
        (bin_dir / "dd").chmod(0o755)
    journal = tmp_path / "run.jsonl"
    journal.write_bytes(b'{"type":"run"}\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["sh", "-c", f". {library}\nJ={journal}\n{body}", "sh", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    return done, journal


@pytest.mark.parametrize("dd", ["system", "without oflag=append"])
def test_the_remote_engine_appends_records_whole_with_either_dd(tmp_path: Path, dd: str) -> None:
    """`rec` appends with dd (one process a record); a dd that refuses oflag=append writes
    nothing and the shell appends instead. Either way every record lands whole, a long one
    (past a pipe's 4 KiB, which dash feeds through a process of its own) too, and `JSIZE`
    keeps up with the journal's size."""
    refusing = "#!/bin/sh\necho \"dd: invalid output flag: 'append'\" >&2\nexit 1\n"
    records = [
        json.dumps({"type": "step", "seq": 0, "data": "a \\ $HOME `id` \\n"}),
        json.dumps({"type": "step", "seq": 1, "data": "x" * 9000}),
        json.dumps({"type": "written", "seq": 1}),
    ]
    done, journal = rec_with(
        tmp_path,
        None if dd == "system" else refusing,
        'for r; do rec "$r" || { echo "refused: $ERR"; exit 1; }; done\n'
        '[ "$JSIZE" -eq "$(wc -c <"$J")" ] && echo whole\n',
        *records,
    )
    assert done.stdout == "whole\n", done.stdout + done.stderr
    expected = '{"type":"run"}\n' + "".join(f"{r}\n" for r in records)
    assert journal.read_text() == expected


def test_noted_markers_reach_the_disk_with_the_next_record_in_one_dd(tmp_path: Path) -> None:
    """A step's `written` and `verified` are noted, not synced on their own: the next `rec`
    appends them before its own record, in the one dd that syncs it; `end` (a `rec`) takes
    whatever is left, and `flush` appends without a record of its own."""
    calls = tmp_path / "dd-calls"
    counting = f'#!/bin/sh\necho dd >>{calls}\nexec /usr/bin/env PATH=/usr/bin:/bin dd "$@"\n'
    done, journal = rec_with(
        tmp_path,
        counting,
        'note \'{"type":"written","seq":0}\'\nnote \'{"type":"verified","seq":0}\'\n'
        'wc -l <"$J"\n'
        'rec \'{"type":"step","seq":1}\'\nnote \'{"type":"written","seq":1}\'\n'
        'flush && flush && [ "$JSIZE" -eq "$(wc -c <"$J")" ] && echo whole\n',
    )
    assert done.stdout == "1\nwhole\n", done.stdout + done.stderr
    types = [json.loads(line)["type"] for line in journal.read_text().splitlines()]
    assert types == ["run", "written", "verified", "step", "written"]
    assert calls.read_text() == "dd\ndd\n"  # the rec, the first flush; the second had nothing


def test_a_signal_right_after_an_append_leaves_each_record_once(tmp_path: Path) -> None:
    """A signal trapped between the two assignments that end an append (dash runs a trap
    between any two commands; a `kill` is put there): `fail` either cuts the records just
    appended off again or keeps them, and never appends them a second time (a step recorded
    twice is a damaged journal)."""
    text = LIBRARY.read_text()
    done_with = re.search(r"then JSIZE=\$\(\(s \+ \$\{#PEND\} \+ 1\)\); (\w+=); (\w+=);", text)
    assert done_with is not None and {done_with[1], done_with[2]} == {"PEND=", "RECAT="}
    signalled = f"{done_with[1]}; kill -TERM $$; {done_with[2]};"
    library = tmp_path / "lib.sh"
    library.write_text(text.replace(f"{done_with[1]}; {done_with[2]};", signalled, 1))
    done, journal = rec_with(
        tmp_path,
        None,
        "DONE=; AT=start\ntrap 'fail \"interrupted by SIGTERM\"' TERM\n"
        'note \'{"type":"verified","seq":4}\'\nrec \'{"type":"step","seq":5}\'\necho survived\n',
        library=library,
    )
    assert done.returncode == 3 and "survived" not in done.stdout, done.stdout + done.stderr
    lines = journal.read_text().splitlines()
    assert len(lines) == len(set(lines)), lines
    assert [json.loads(line)["type"] for line in lines] == ["run", "verified", "failed", "end"]


def test_a_signal_in_the_middle_of_a_record_leaves_only_whole_records(tmp_path: Path) -> None:
    """A SIGTERM to the script while dd appends a record (dd killed part way, as a signal to the
    whole process group does): the script's trap (`fail`) runs before `rec` can truncate, so
    `fail` cuts the torn part off before it journals the failure and the end. The marker noted
    before the torn record is whole: it is journaled with the failure."""
    once = tmp_path / "torn-once"
    torn = (
        "#!/bin/sh\n"
        f'[ -e {once} ] && exec /usr/bin/env PATH=/usr/bin:/bin dd "$@"\n'
        f": >{once}\n"
        'for a; do case "$a" in of=*) out=${a#of=} ;; esac; done\n'
        'head -c 100 >>"$out"\n'
        'kill -TERM "$PPID"; kill -KILL $$\n'
    )
    record = json.dumps({"type": "step", "seq": 0, "data": "x" * 1000})
    done, journal = rec_with(
        tmp_path,
        torn,
        "DONE=; AT=start\ntrap 'fail \"interrupted by SIGTERM\"' TERM\n"
        'note \'{"type":"verified","seq":4}\'\nrec "$1"\necho survived\n',
        record,
    )
    assert done.returncode == 3 and "survived" not in done.stdout, done.stdout + done.stderr
    lines = journal.read_text().splitlines()
    types = [json.loads(line)["type"] for line in lines]
    assert types == ["run", "verified", "failed", "end"], lines


# Snapshot archives: a few hundred KB of gzip that unpack to hundreds of megabytes.

BOMB_MEMBER = 300 << 20
PEAK_KB = 200 << 10  # the interpreter and tune's imports take well under half of it


def zeros_archive(path: Path, members: list[tuple[str, int, bytes]]) -> Path:
    """A .tar.gz of members (name, size, tar type) whose contents are zeros."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar, open("/dev/zero", "rb") as zero:
        for name, size, kind in members:
            info = tarfile.TarInfo(name)
            info.size, info.type = size, kind
            tar.addfile(info, zero)
    return path


def test_an_archive_member_that_unpacks_to_300_mb_is_refused_from_its_header(
    tmp_path: Path,
) -> None:
    bomb = zeros_archive(
        tmp_path / "bomb.tar.gz", [("proc/sys/vm/swappiness", BOMB_MEMBER, tarfile.REGTYPE)]
    )
    assert bomb.stat().st_size < 2 << 20
    result, peak = tune_in_child("plan", BLACKWELL, "--root", bomb)
    assert result.code == 1, result.err
    assert result.err.strip() == (
        f"{bomb}: cannot read snapshot archive (its member proc/sys/vm/swappiness is 300 MiB, "
        "more than the 16 MiB tune reads of one file)."
    )
    assert peak < PEAK_KB


def test_an_archive_whose_files_add_up_past_the_limit_is_refused(tmp_path: Path) -> None:
    members = [(f"proc/f{n}", 15 << 20, tarfile.REGTYPE) for n in range(18)]
    bomb = zeros_archive(tmp_path / "many.tar.gz", members)
    result, peak = tune_in_child("plan", BLACKWELL, "--root", bomb)
    assert result.code == 1, result.err
    assert "its files hold more than 256 MiB, the most tune reads" in result.err
    assert peak < PEAK_KB


def test_a_long_name_header_of_300_mb_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """tarfile reads a GNU long-name header whole, before it shows any member: the size of that
    read is what stops it."""
    bomb = zeros_archive(tmp_path / "name.tar.gz", [("x", BOMB_MEMBER, tarfile.GNUTYPE_LONGNAME)])
    result, peak = tune_in_child("plan", BLACKWELL, "--root", bomb)
    assert result.code == 1, result.err
    assert (
        "one of its headers is 300 MiB, more than the 16 MiB tune reads of one file" in result.err
    )
    assert peak < PEAK_KB


def test_an_archive_of_too_many_files_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_mod, "MAX_ARCHIVE_MEMBERS", 10)
    crowd = zeros_archive(
        tmp_path / "crowd.tar.gz", [(f"f{n}", 1, tarfile.REGTYPE) for n in range(11)]
    )
    with pytest.raises(HostError, match=r"more than 10 members, the most tune reads"):
        ArchiveHost(crowd)


def test_a_snapshot_that_does_not_fit_says_so_and_leaves_no_half_archive(tmp_path: Path) -> None:
    target = tmp_path / "snap.tar.gz"

    done = tune_with_files_up_to(4096, "snapshot", BLACKWELL, "--root", UNTUNED, "-o", target)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == f"{target}: cannot write the snapshot (File too large)."
    assert not target.exists()


# Run journals: a sparse file of 20 GiB where a journal should be.


@pytest.mark.parametrize("command", ["history", "rollback", "report"])
def test_a_sparse_20_gib_journal_is_refused_in_a_sentence(
    small: tuple[Path, Path], command: str
) -> None:
    root, _ = small
    journal = root / JOURNALS / "20260101T000000Z-abcdef.jsonl"
    journal.parent.mkdir(parents=True)
    journal.touch()
    os.truncate(journal, 20 << 30)
    result, peak = tune_in_child(command, "--root", root)
    assert result.code == ExitCode.JOURNAL, result.err
    assert result.err.strip() == (
        "/var/lib/tune/runs/20260101T000000Z-abcdef.jsonl: larger than 64 MiB, the most tune "
        "reads of a run journal; it is not one tune wrote: move it out of the way to go on."
    )
    assert peak < PEAK_KB


# Other files tune reads on this machine.


def test_a_fifo_as_the_inventory_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "hosts.ini"
    os.mkfifo(fifo)
    result, _peak = tune_in_child("plan", BLACKWELL, "--inventory", fifo)
    assert result.code == ExitCode.USAGE, result.err
    assert result.err.strip() == (
        f"{fifo}: cannot read the inventory (a FIFO is not a regular file)."
    )


def test_a_fifo_as_the_saved_plan_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    result, _peak = tune_in_child("apply", fifo, "--root", UNTUNED, "--yes")
    assert result.code == ExitCode.USAGE, result.err
    assert result.err.strip() == (
        f"{fifo} is not a plan saved by tune plan (a FIFO is not a regular file)."
    )


def test_no_room_for_the_lock_is_a_sentence_not_an_internal_error(
    small: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock file takes the holder's pid before any change: a full device there (before:
    exit 70, "internal error") changes nothing and says so."""
    root, profile = small
    before = whole_tree(root)
    real_write, real_pwrite = os.write, os.pwrite

    def is_lock(fd: int) -> bool:
        return os.readlink(f"/proc/self/fd/{fd}").endswith("tune.lock")

    def write(fd: int, data: bytes | memoryview) -> int:
        if is_lock(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
        if is_lock(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "pwrite", pwrite)
    result = run_tune("apply", profile, "--runtime-only", "--root", root, "--yes")
    monkeypatch.undo()
    assert result.code == ExitCode.NO_SPACE, result.err
    assert result.err.strip().endswith("no space left on the device; nothing was changed.")
    assert whole_tree(root) == before
