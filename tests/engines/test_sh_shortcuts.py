"""The sh engine's shortcuts (apply/lib.sh) give the answers of the slower way they replace:
one awk for the sysctls a pushed run checks before its first write (`words_are`, a `tr` each
before), one `stat` for whether a script's many files are writable on a snapshot
(`writable_all`), the kernel's print-back of a plain number without awk (`plain_ktext`), and
`reads words` without a subshell. Each is judged against the slow way, or against the Python
emulation (`hosts/emulate.py`), on generated files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from conftest import BLACKWELL, UNTUNED
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lab import lab_env
from small_host import SmallHost, build, sysctls_of

from reconciler.apply.sh_script import LIBRARY
from reconciler.core.quoting import quoted
from reconciler.hosts.emulate import kernel_text
from reconciler.profile.load import load_profile
from reconciler.steps.ops import Probe, Read

from .drive import ShEngine

FILE = "/proc/sys/net/ipv4/tcp_rmem"
# Every byte class the readers tell apart: digits, letters, the six spaces `tr -s [:space:]`
# folds, a bracket (a choice), a sign, and bytes outside printable ASCII.
TEXT = st.text(alphabet="019ax \t\n\r\v\f[]-\x00\x7fé", max_size=24)


def sh(root: Path, body: str) -> str:
    env = {"PATH": "/usr/bin:/bin", **lab_env(root)}
    done = subprocess.run(["sh"], input=(LIBRARY + body).encode(), capture_output=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


def put(root: Path, path: str, data: bytes, mode: int = 0o644) -> None:
    local = root / path.lstrip("/")
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(data)
    local.chmod(mode)


def normalised(data: bytes) -> str:
    """What `tr -s '[:space:]' ' '` and the trim around it make of a file (`reads words`)."""
    return b" ".join(data.translate(None, b"\x00").split()).decode("utf-8", "replace")


@settings(max_examples=60)
@given(contents=st.lists(TEXT, min_size=1, max_size=4), changed=st.integers(0, 8))
@example(contents=["4096\t131072\t6291456\n", "060\n"], changed=1)  # 060 is not 60
@example(contents=["1\r\n", "-1"], changed=8)
def test_one_awk_reads_the_sysctls_as_tr_reads_each(
    tmp_path_factory: object, contents: list[str], changed: int
) -> None:
    """`words_are` says "all as read" only where every file reads as its value by `reads
    words`; where the files hold printable text and spaces only, it says the same as they do."""
    root = tmp_path_factory.mktemp("host")  # type: ignore[attr-defined]
    pairs = []
    for n, text in enumerate(contents):
        path = f"/proc/sys/vm/knob{n}"
        data = text.encode()
        put(root, path, data)
        want = normalised(data)
        if n == changed:
            want = "60" if want == "060" else want + "0"
        pairs.append((path, want))
    args = " ".join(f"{quoted(p)} {quoted(w)}" for p, w in pairs)
    each = " && ".join(f"reads words {quoted(p)} '' {quoted(w)}" for p, w in pairs)
    said = sh(root, f"words_are {args} && echo same || echo differs\n")
    slow = sh(root, f"{each} && echo same || echo differs\n")
    plain = all(all(c in " \t\n\r\v\f" or " " <= c <= "~" for c in t) for t in contents)
    if plain:
        assert said == slow
    else:
        assert said == "differs\n" or slow == "same\n"


def test_one_awk_refuses_a_path_out_of_the_tree_and_a_file_not_there(tmp_path: Path) -> None:
    put(tmp_path, "/proc/sys/vm/swappiness", b"60\n")
    for pairs in ("'/proc/sys/vm/../vm/swappiness' 60", "'/proc/sys/vm/nothing' ''"):
        assert sh(tmp_path, f"words_are {pairs} && echo same || echo differs\n") == "differs\n"
    assert sh(tmp_path, "words_are '/proc/sys/vm/swappiness' 60 && echo same\n") == "same\n"


@settings(max_examples=60)
@given(old=TEXT, value=st.text(alphabet="0129x+- \t", max_size=12))
@example(old="[always] madvise never\n", value="madvise")
@example(old="4096\t131072\t6291456\n", value="4096 87380 268435456")
@example(old="1\n", value="007")
@example(old="\x00 []", value="")  # a NUL beside a choice: dropped by both emulations
def test_a_write_on_a_snapshot_prints_back_what_the_emulation_says(
    tmp_path_factory: object, old: str, value: str
) -> None:
    """`set_attr` on a snapshot, plain numbers without awk or not, leaves the text that
    `emulate.kernel_text` (the Python engine's emulated kernel) says the kernel prints."""
    root = tmp_path_factory.mktemp("host")  # type: ignore[attr-defined]
    put(root, FILE, old.encode())
    said = sh(root, f"set_attr {FILE} {quoted(value)} && echo ok || echo refused\n")
    try:
        expected = kernel_text(old.encode().decode("utf-8", "replace"), value)
    except ValueError:
        assert said == "refused\n"
        return
    assert said == "ok\n"
    assert (root / FILE.lstrip("/")).read_text() == expected


def test_one_stat_answers_whether_each_path_is_writable_as_a_stat_each_does(
    tmp_path: Path,
) -> None:
    """On a snapshot, `writable` after `writable_all` (one stat for all the paths) answers as
    it does without: by the permission bits, for a file, a read-only file, a directory, a
    path not there yet (by the directory above it), a link to a read-only file, and a read-only
    file whose name is part of a writable one's."""
    put(tmp_path, "/proc/sys/vm/swappiness", b"60\n")
    put(tmp_path, "/proc/sys/kernel/osrelease", b"6.8.0\n", 0o444)
    (tmp_path / "etc/sysctl.d").mkdir(parents=True)
    (tmp_path / "etc/ro").mkdir(mode=0o555)
    (tmp_path / "proc/sys/vm/linked").symlink_to("../kernel/osrelease")
    put(tmp_path, "/etc/sysctl", b"", 0o444)  # its name inside a writable one's
    paths = [
        "/proc/sys/vm/swappiness",
        "/proc/sys/kernel/osrelease",
        "/etc/sysctl.d",
        "/etc/sysctl.d/90-tune.conf",
        "/etc/ro/x.conf",
        "/proc/sys/vm/linked",
        "/etc/sysctl",
    ]
    ask = "".join(f"writable {quoted(p)} && echo yes || echo no\n" for p in paths)
    prefilled = " ".join(f'"$R"{quoted(p)}' for p in paths)
    slow = sh(tmp_path, ask)
    assert slow == "yes\nno\nyes\nyes\nno\nno\nno\n"
    assert sh(tmp_path, f"writable_all {prefilled}\n{ask}") == slow
    # What it keeps is all it trusts: only the writable ones, each whole.
    kept = sh(tmp_path, f'writable_all {prefilled}\nprintf %s "$EMU_W"\n').split("\n")
    assert sorted(filter(None, kept)) == sorted(
        str(tmp_path) + p for p in ("/proc/sys/vm/swappiness", "/etc/sysctl.d")
    )


# What a pushed run may start on the target, by name (the shims below log each).
TOOLS = [
    "awk",
    "cat",
    "chmod",
    "date",
    "dd",
    "flock",
    "head",
    "id",
    "mkdir",
    "mktemp",
    "mv",
    "nohup",
    "rm",
    "sed",
    "setsid",
    "sleep",
    "stat",
    "sync",
    "tail",
    "tee",
    "touch",
    "tr",
    "truncate",
    "wc",
]


def test_a_pushed_sysctl_step_starts_two_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run script of a sysctl profile, as a push runs it (rooted at a snapshot): per step,
    one dd that journals the step (with the markers of the one before) and one tr that reads it
    back; the write itself (an emulated one here) and the check of what the push read start
    none. Seven a step before: a dd per marker, a stat and an awk per write, a tr per read."""
    log = logged(tmp_path, TOOLS, monkeypatch)
    keys = {k: str(e.value) for k, e in load_profile(BLACKWELL).profile.sysctl.items()}
    # The untuned example host's values of them, and its /etc (the run makes /etc/sysctl.d).
    root = build(tmp_path / "h", SmallHost(sysctls=sysctls_of(UNTUNED, keys)))
    (root / "etc").mkdir()
    steps = pushed(tmp_path, root, keys, monkeypatch)
    assert steps == len(keys) + 1  # each key, and the sysctl.d file that persists them
    started = Counter(line.split()[0] for line in log.read_text().splitlines())
    # And one each for the run with its plan, the directory the sysctl.d file makes, the
    # profile's prior, the end.
    assert started["dd"] <= steps + 4, started
    assert started["tr"] <= steps + 1, started
    assert started["awk"] + started["stat"] <= 8, started
    # The rest is the start: the upload, the lock (125 in all before), and the library stored
    # on the host, once a connection (its directory, its bytes, the rename: 3). Not the first
    # poll's tail, sleep and flock: as many as the run takes 0.2 s.
    polled = sum(started.pop(name, 0) for name in ("tail", "sleep", "flock"))
    assert polled > 0, "the poll's processes were not logged"
    assert sum(started.values()) <= 2 * steps + 36 + 3, started


def logged(
    tmp_path: Path, tools: list[str], monkeypatch: pytest.MonkeyPatch, refusing: str = ""
) -> Path:
    """Shims first on PATH for `tools`: each logs its name (tail and sleep their arguments too),
    then runs the real one; an argument starting with `refusing` (when given) is refused as
    busybox would."""
    shims = tmp_path / "shims"
    shims.mkdir()
    log = tmp_path / "started"
    for name in tools:
        real = shutil.which(name)
        assert real is not None, name
        refuse = (
            f'for a; do case "$a" in {refusing}*) echo "unrecognized option" >&2; exit 1;; esac; '
            "done\n"
            if refusing
            else ""
        )
        shim = shims / name
        said = '"$@"' if name in ("tail", "sleep") else ""  # others take text of many lines
        shim.write_text(f'#!/bin/sh\necho {name} {said} >>{log}\n{refuse}exec {real} "$@"\n')
        shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    return log


def pushed(
    tmp_path: Path, root: Path, sysctls: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> int:
    """`sysctls` applied to `root` as a push applies them (the sh engine); the steps run."""
    profile = tmp_path / "sysctl.yaml"
    profile.write_text(json.dumps({"name": "sysctl-only", "sysctl": sysctls}))
    engine = ShEngine()
    with monkeypatch.context() as unshimmed:  # the plan's reads are not the run's
        unshimmed.setenv("PATH", os.environ["PATH"].split(":", 1)[1])
        work = engine.prepare(root, profile)
    engine.execute(root, work, load_profile(profile), "runtime")
    return len(work.steps)


@pytest.mark.parametrize("tail", ["GNU", "without --pid"])
def test_the_first_poll_waits_for_the_run_it_started_with_one_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: str
) -> None:
    """The run a round trip starts is its shell's child: `tail --pid` waits for it (one
    process however long it runs), then one look at the journal finds its end. A tail without
    --pid (busybox) fails at once, and the looks every 0.02 s wait instead."""
    untuned = build(
        tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60", "vm.dirty_ratio": "20"})
    )
    log = logged(tmp_path, ["tail", "sleep"], monkeypatch, "" if tail == "GNU" else "--pid")
    pushed(tmp_path, untuned, {"vm.swappiness": "10", "vm.dirty_ratio": "15"}, monkeypatch)
    assert (untuned / "proc/sys/vm/dirty_ratio").read_text() == "15\n"
    started = log.read_text().splitlines()
    waits = [line for line in started if line.startswith("tail --pid=")]
    assert len(waits) == 1, started
    looks = [line for line in started if line.startswith("tail -n 1")]
    slept = [line for line in started if line.startswith("sleep")]
    if tail == "GNU":
        assert len(looks) == 1 and not slept, started
    else:
        assert slept, started


NUMBERS = st.text(alphabet="0178afxX+- \t\n", max_size=40) | st.builds(
    lambda sign, prefix, n: f"{sign}{prefix}{n}",
    st.sampled_from(["", "+", "-"]),
    st.sampled_from(["", "0", "00", "0x", "0X"]),
    st.integers(0, 1 << 70).map(str),
)


@settings(max_examples=80)
@given(text=NUMBERS)
@example(text="0x10\n")
@example(text="010 0x1F -0 +5 08 0x")
@example(text="0xffffffffffffffff 0x10000000000000000 18446744073709551616")
@example(text="0" * 70 + "1")
def test_the_words_of_a_file_read_their_integers_as_the_plan_does(
    tmp_path_factory: object, text: str
) -> None:
    """`reading words`, `is_words` and `words_are` read each integer as the kernel parses it,
    exactly as `Probe.value` and the plan (`normalize_words`) do: `0x10` is 16, `010` 8, and
    a number past 64 bits stays the word it is."""
    root = tmp_path_factory.mktemp("host")  # type: ignore[attr-defined]
    put(root, "/sys/kernel/knob", text.encode())
    put(root, FILE, text.encode())
    want = Probe("/sys/kernel/knob", Read.WORDS).value(text.encode())
    assert want is not None
    assert sh(root, "reading words /sys/kernel/knob ''\n") == want
    said = sh(
        root,
        f"is_words /sys/kernel/knob {quoted(want)} && words_are {FILE} {quoted(want)} "
        f"{FILE} {quoted(want)} && echo same\n",
    )
    assert said == "same\n"
