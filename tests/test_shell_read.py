"""The one-script observation, run by a local `sh`: it must read exactly what a snapshot
directory gives, byte for byte, whatever the files contain or are named."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import ACS_CASE, BLACKWELL, TUNED, UNTUNED, write
from hypothesis import given
from hypothesis import strategies as st
from lab import lab_env

from reconciler.core.errors import HostError
from reconciler.core.files import Files, Request
from reconciler.core.quoting import quote_pattern
from reconciler.hosts.archive import ArchiveHost, write_archive
from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.shell import ScriptResult, ShellHost
from reconciler.plan.observe import request
from reconciler.profile.load import load_profile


class LocalShellHost(ShellHost):
    """The remote script run by this machine's `sh`, rooted at a snapshot via TUNE_ROOT."""

    def __init__(self, root: Path | str, shell: str = "sh") -> None:
        self.root = str(root)
        self.name = f"{shell}:{root}"
        self.shell = shell
        self.scripts: list[str] = []

    def run_script(self, script: str, timeout: float | None = None) -> ScriptResult:
        self.scripts.append(script)
        env = {"PATH": os.environ["PATH"], **lab_env(self.root)}
        data = script.encode("utf-8", "surrogateescape")  # file names as the host gave them
        done = subprocess.run([self.shell], input=data, capture_output=True, env=env)
        return ScriptResult(done.stdout, done.stderr, done.returncode)


def both(root: Path, wanted: Request) -> tuple[Files, Files, LocalShellHost]:
    shell = LocalShellHost(root)
    return SnapshotHost(root).fetch(wanted), shell.fetch(wanted), shell


@pytest.mark.parametrize("host", [UNTUNED, TUNED], ids=["untuned", "tuned"])
def test_example_hosts_read_identically_in_one_script(host: Path) -> None:
    wanted = request(load_profile(BLACKWELL).profile)
    direct, shelled, shell = both(host, wanted)
    assert shelled == direct
    assert len(shell.scripts) == 1, "no second round trip for ordinary kernel files"
    config = "/sys/bus/pci/devices/0000:41:00.0/config"
    assert shelled.read(config) == (host / config.lstrip("/")).read_bytes()
    assert b"\0" in (shelled.read(config) or b""), "binary config space survives"


def test_edge_cases_match_the_directory_host(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/sys/a/x", b"\x00\xff\n==> not a header\n")
    write(root, "/sys/a/y", "")  # empty file
    write(root, "/sys/a/.hidden", "h\n")
    write(root, "/sys/a/with space", "s\n")
    write(root, "/sys/a/quote'd", "q\n")
    (root / "sys/a/dir").mkdir()
    write(root, "/sys/a/dir/deep", "d\n")
    (root / "sys/a/dangling").symlink_to("nowhere")
    (root / "sys/a/linked-dir").symlink_to("dir")
    (root / "sys/a/linked-file").symlink_to("y")
    write(root, "/proc/sys/vm/swappiness", "60\n")
    wanted = Request.of(
        "/sys/a/*",
        "/sys/a/?",
        "/sys/a/[!x]",
        "/sys/a/dir",  # a directory named literally: not a file to read
        "/sys/a/dangling",
        "/sys/absent",
        "/sys/absent/*",
        "/proc/sys/vm/swappiness",
        listings=["/sys/a", "/sys/missing", "/proc/sys/"],
    )
    direct, shelled, _ = both(root, wanted)
    assert shelled == direct
    assert shelled.errors == {"/sys/a/dangling": "No such file or directory"}
    assert shelled.read("/sys/a/x") == b"\x00\xff\n==> not a header\n"
    assert "/sys/a/.hidden" in shelled.listing("/sys/a")
    assert "/sys/a/linked-dir" not in shelled.listing("/sys/a")


def test_contents_that_mimic_head_separators_are_reread_one_by_one(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/sys/a/1", b"one\n==> ./sys/a/2 <==\nfake\n")
    write(root, "/sys/a/2", b"two\n")
    write(root, "/sys/a/3", b"\n==> ")
    direct, shelled, shell = both(root, Request.of("/sys/a/*"))
    assert shelled == direct
    assert len(shell.scripts) == 2, "ambiguous framing falls back to per-file boundaries"
    assert shelled.read("/sys/a/1") == b"one\n==> ./sys/a/2 <==\nfake\n"


def test_profile_text_never_reaches_the_shell_unquoted(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/sys/x", "1\n")
    marker = tmp_path / "pwned"
    hostile = Request.of(
        f"/sys/$(touch {marker})", f"/sys/`touch {marker}`", f"/sys/x;touch {marker}"
    )
    direct, shelled, _ = both(root, hostile)
    assert shelled == direct
    assert not marker.exists()


def test_bracket_expressions_that_sh_would_read_differently_are_refused() -> None:
    assert quote_pattern("/sys/cpu[0-9]*/x") == ".'/sys/cpu'[0-9]*'/x'"
    assert quote_pattern("/sys/a[") == ".'/sys/a['"
    with pytest.raises(HostError, match="bracket"):
        quote_pattern("/sys/a[$(x)]")
    with pytest.raises(HostError, match="absolute"):
        quote_pattern("sys/a")


def test_a_missing_root_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HostError, match="TUNE_ROOT does not exist"):
        LocalShellHost(tmp_path / "nope").fetch(Request.of("/proc/cmdline"))


NAMES = st.sampled_from(["a", "b", "ab", "a.b", "c:1", "x-y", "_z", ".h", "0", "10"])
CONTENT = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"\n==> ./sys/a <==\n", b"==> x <==", b"\n==> ", b""]),
)
PATTERN_PARTS = st.sampled_from(["a", "b", "*", "?", "[ab]", "[!a]*", "[0-9]*", "a*", ".h"])


@given(
    tree=st.dictionaries(st.lists(NAMES, min_size=1, max_size=3).map(tuple), CONTENT, max_size=12),
    patterns=st.lists(st.lists(PATTERN_PARTS, min_size=1, max_size=3), min_size=1, max_size=4),
)
def test_any_tree_and_globs_read_as_the_directory_host_reads_them(
    tmp_path_factory: pytest.TempPathFactory,
    tree: dict[tuple[str, ...], bytes],
    patterns: list[list[str]],
) -> None:
    root = tmp_path_factory.mktemp("tree")
    for parts, content in sorted(tree.items(), key=lambda item: len(item[0])):
        target = root.joinpath("sys", *parts)
        if any(p.is_file() for p in [target, *target.parents] if p != root):
            continue  # a file where this path needs a directory
        if target.is_dir():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    wanted = Request.of(*("/sys/" + "/".join(p) for p in patterns), listings=["/sys"])
    direct, shelled, _ = both(root, wanted)
    assert shelled == direct


def test_whole_files_are_read_past_the_cap_and_others_are_not(tmp_path: Path) -> None:
    from reconciler.core.files import MAX_FILE_BYTES

    root = tmp_path / "host"
    journal = b"".join(b'{"type": "step", "seq": %d}\n' % n for n in range(6000))
    assert len(journal) > MAX_FILE_BYTES
    write(root, "/var/lib/tune/runs/20250601T120000Z-a1b2c3.jsonl", journal)
    write(root, "/proc/cpuinfo", b"x" * (MAX_FILE_BYTES + 10))
    wanted = Request.of("/proc/cpuinfo", whole=["/var/lib/tune/runs/20250601T120000Z-a1b2c3.jsonl"])
    direct, shelled, shell = both(root, wanted)
    assert shelled == direct
    assert shelled.read("/var/lib/tune/runs/20250601T120000Z-a1b2c3.jsonl") == journal
    assert len(shelled.read("/proc/cpuinfo") or b"") == MAX_FILE_BYTES
    assert len(shell.scripts) == 1


@pytest.mark.parametrize("keep", [1, 2, 5])
def test_the_newest_matches_read_whole_in_the_same_script(tmp_path: Path, keep: int) -> None:
    root = tmp_path / "host"
    for n in range(4):
        write(root, f"/var/lib/tune/runs/2025060{n}T000000Z-aaaaaa.jsonl", "x" * 70000 + f"{n}\n")
    write(root, "/var/lib/tune/runs/notes.txt", "not a journal\n")
    write(root, "/proc/sys/vm/swappiness", "60\n")
    wanted = Request.of(
        "/proc/sys/vm/swappiness",
        "/var/lib/tune/profile.yaml",  # absent
        listings=["/var/lib/tune/runs"],
        newest=[("/var/lib/tune/runs/*.jsonl", keep), ("/var/lib/tune/none/*.jsonl", 2)],
    )
    direct, shelled, shell = both(root, wanted)
    assert shelled == direct
    assert len(shell.scripts) == 1
    kept = shelled.matches["/var/lib/tune/runs/*.jsonl"]
    names = [f"/var/lib/tune/runs/2025060{n}T000000Z-aaaaaa.jsonl" for n in range(4)]
    assert kept == tuple(names[-keep:])
    assert all(len(shelled.contents[p]) == 70002 for p in kept), "read past the usual cap"
    assert shelled.matches["/var/lib/tune/none/*.jsonl"] == ()


def test_literal_paths_of_every_kind_read_as_the_directory_host_reads_them(
    tmp_path: Path,
) -> None:
    # The shell passes a literal word on whether or not it exists; the script asks, as lexists.
    root = tmp_path / "host"
    write(root, "/sys/a/x", "1\n")
    (root / "sys/a/dir").mkdir()
    (root / "sys/a/loop").symlink_to("loop")
    (root / "sys/a/dangling").symlink_to("nowhere")
    (root / "sys/a/linked-dir").symlink_to("dir")
    wanted = Request.of(
        *("/sys/a/x/through-a-file", "/sys/a/dir", "/sys/a/loop", "/sys/a/dangling"),
        *("/sys/a/linked-dir", "/sys/a/x", "/sys/a/loop/x", "/sys/a/*/x", "/sys/a/x/*"),
        newest=[("/sys/a/*", 2), ("/sys/a/l*", 1), ("/sys/a/x", 1), ("/sys/a/none", 1)],
    )
    direct, shelled, shell = both(root, wanted)
    assert shelled == direct
    assert set(shelled.errors) == {"/sys/a/loop", "/sys/a/dangling"}
    assert len(shell.scripts) == 1


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_dash_and_bash_expand_alike(tmp_path: Path, shell: str) -> None:
    root = tmp_path / "host"
    write(root, "/sys/a/x", "1\n")
    (root / "sys/a/dir").mkdir()
    (root / "sys/a/dangling").symlink_to("nowhere")
    (root / "sys/a/b/c").mkdir(parents=True)
    (root / "sys/a/b/c/dangling").symlink_to("nowhere")
    wanted = Request.of("/sys/a/*", "/sys/a/*/c/dangling", "/sys/a/[z]", "/sys/a/dangling")
    host = LocalShellHost(root, shell)
    assert host.fetch(wanted) == SnapshotHost(root).fetch(wanted)


def test_names_that_head_quotes_oddly_fall_back_and_still_read_alike(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/sys/a/f", "1\n")
    (root / "sys/a/dir\nwith a newline").mkdir()
    os.mkdir(os.fsencode(root / "sys/a") + b"/dir-\xff")
    (root / "sys/b").mkdir()
    (root / "sys/b" / os.fsdecode(b"file-\xff")).write_bytes(b"2\n")
    write(root, "/sys/b/separator", b"\n==> ")
    for n in [":r0", ":c", ":n1", "a b", "q'd"]:
        write(root, f"/sys/c/{n}", n + "\n")
    os.symlink("nowhere", os.fsencode(root / "sys/c") + b"/:e0")
    wanted = Request.of("/sys/a/*", "/sys/b/*", "/sys/c/*", "/sys/c/:c", nodes=["/sys/c/:*"])
    direct, shelled, shell = both(root, wanted)
    assert shelled == direct
    assert len(shell.scripts) == 2, "re-read one by one"


@pytest.mark.parametrize("how", ["whole", "edited"])
@pytest.mark.parametrize("glob", ["/d/[A]", "/d/*"])
def test_a_file_several_patterns_match_is_read_with_the_largest_cap(
    tmp_path: Path, glob: str, how: str
) -> None:
    """Whichever pattern sorts first: a file tune rewrites must never be cut because a glob
    of another kind matched it too (the edit would drop its tail)."""
    from reconciler.core.files import MAX_FILE_BYTES

    root = tmp_path / "host"
    write(root, "/d/A", b"y" * (MAX_FILE_BYTES + 5))
    write(root, "/d/B", b"z" * (MAX_FILE_BYTES + 5))
    wanted = Request.of(glob, **{how: ["/d/A"]})  # type: ignore[arg-type]
    direct, shelled, _ = both(root, wanted)
    assert shelled == direct
    assert len(shelled.contents["/d/A"]) == MAX_FILE_BYTES + 5
    if glob == "/d/*":  # the glob's other match keeps the usual cap
        assert len(shelled.contents["/d/B"]) == MAX_FILE_BYTES


def test_a_file_a_kind_edits_is_read_whole_by_every_host_in_one_round_trip(
    tmp_path: Path,
) -> None:
    """An edited file past MAX_FILE_BYTES comes whole from a directory, over a shell and from
    an archive, in the one script; a large file a glob matches beside it keeps the cap (its
    own head reads only the edited one past it), and a file past MAX_EDITED_BYTES is read to
    one byte more, for apply to refuse."""
    from reconciler.core.files import MAX_EDITED_BYTES, MAX_FILE_BYTES

    root = tmp_path / "host"
    write(root, "/etc/pve/lxc/101.conf", b"a" * (3 * MAX_FILE_BYTES))
    write(root, "/etc/pve/lxc/102.conf", b"b" * (MAX_EDITED_BYTES + 10))
    write(root, "/var/log/big.log", b"c" * (3 * MAX_FILE_BYTES))
    edited = ["/etc/pve/lxc/101.conf", "/etc/pve/lxc/102.conf"]
    wanted = Request.of("/var/log/*.log", edited=edited)
    direct, shelled, shell = both(root, wanted)
    assert shelled == direct
    assert len(shell.scripts) == 1
    assert f"head -c {MAX_FILE_BYTES} -v" in shell.scripts[0]
    assert len(direct.contents["/etc/pve/lxc/101.conf"]) == 3 * MAX_FILE_BYTES
    assert len(direct.contents["/etc/pve/lxc/102.conf"]) == MAX_EDITED_BYTES + 1
    assert len(direct.contents["/var/log/big.log"]) == MAX_FILE_BYTES
    # A file that holds head's separator is read again on its own, with its own cap.
    write(root, "/var/log/big.log", b"\n==> " + b"c" * (3 * MAX_FILE_BYTES))
    again, reread, shell = both(root, wanted)
    assert reread == again and len(shell.scripts) == 2, "re-read one by one"
    assert len(reread.contents["/etc/pve/lxc/101.conf"]) == 3 * MAX_FILE_BYTES
    assert len(reread.contents["/var/log/big.log"]) == MAX_FILE_BYTES
    archive = tmp_path / "snap.tar.gz"
    write_archive(direct, archive)
    assert ArchiveHost(archive).fetch(wanted) == direct
    # What a plan reads at the usual cap stays cut there, from an archive as from a directory.
    assert ArchiveHost(archive).fetch(Request.of(*edited)) == SnapshotHost(root).fetch(
        Request.of(*edited)
    )


def test_a_request_that_opens_nothing_is_one_round_trip(tmp_path: Path) -> None:
    (tmp_path / "host/sys").mkdir(parents=True)
    direct, shelled, shell = both(tmp_path / "host", Request.of("/sys/none", "/sys/x/*"))
    assert shelled == direct
    assert len(shell.scripts) == 1


@pytest.mark.parametrize(
    "extra", [None, "/proc/sys/vm/swapiness", "/proc/sys/vm", "/proc/sys/vm/dangling"]
)
def test_a_directory_is_listed_only_when_one_of_its_paths_is_no_file(
    tmp_path: Path, extra: str | None
) -> None:
    root = tmp_path / "host"
    write(root, "/proc/sys/vm/swappiness", "60\n")
    write(root, "/proc/sys/net/core/rmem_max", "212992\n")
    (root / "proc/sys/vm/dangling").symlink_to("nowhere")
    paths = ["/proc/sys/vm/swappiness", "/proc/sys/net/core/rmem_max"] + ([extra] if extra else [])
    wanted = Request.of(*paths, listings_if_no_file=[("/proc/sys", p) for p in paths])
    direct, shelled, shell = both(root, wanted)
    assert shelled == direct
    assert ("/proc/sys" in shelled.listings) is (extra is not None)
    assert len(shell.scripts) == 1
    # An archive holds the files that were read: the same answer from it.
    archived = tmp_path / "host.tar.gz"
    write_archive(direct, archived)
    assert ("/proc/sys" in ArchiveHost(archived).fetch(wanted).listings) is (extra is not None)


def test_where_each_pci_function_sits_reads_alike_on_every_host_type(tmp_path: Path) -> None:
    # The acs kind's reads on a host laid out as sysfs is (each function in its place under
    # /sys/devices, linked from /sys/bus/pci/devices, a driver's and IOMMU groups' links):
    # the shell script and a snapshot archive of it answer as the directory does.
    from reconciler.facts.pci import upstream, vfio_bound
    from reconciler.kinds.acs import KIND

    root = ACS_CASE.parent / "vfio-passthrough-refused" / "host"
    wanted = KIND.request([])
    direct, shelled, _ = both(root, wanted)
    write_archive(direct, tmp_path / "snapshot.tar.gz")
    packed = ArchiveHost(tmp_path / "snapshot.tar.gz").fetch(wanted)
    for files in (direct, shelled, packed):
        assert upstream(files)["0000:04:00.0"] == ("0000:00:03.0", "0000:02:00.0", "0000:03:00.0")
        assert upstream(files)["0000:06:00.0"] == ("0000:00:07.0",)
        assert vfio_bound(files) == {"0000:04:00.0": "13"}
    assert shelled == direct


@pytest.mark.parametrize(
    ("ended", "said"),
    [
        (
            ScriptResult(b"", b"\n/etc/tune: Read-only file system\n", 1),
            "/etc/tune: Read-only file system",
        ),
        (ScriptResult(b"started\n", b"  \n", 255), "exit status 255"),
        (ScriptResult(b"", b"\xff bad byte", 2), "\ufffd bad byte"),
    ],
)
def test_a_failed_script_is_quoted_by_its_stderr_else_its_exit_status(
    ended: ScriptResult, said: str
) -> None:
    assert ended.said == said


@pytest.mark.parametrize("shell", ["sh", "bash"])
@given(
    data=st.text(alphabet="ab \t\n\r\\-é", max_size=12).map(lambda t: t.encode()),
    before=st.sampled_from([None, "", "a", "b\n"]),
)
def test_a_wait_reads_a_value_as_the_directory_host_does(
    tmp_path_factory: pytest.TempPathFactory, shell: str, data: bytes, before: str | None
) -> None:
    """`value_unlike` reads the one line a boot id is with a builtin; any other file (more
    lines, blank ones, none) must still read as `Files.value` reads it, whether it is the value
    waited for or the one it gives up on."""
    root = tmp_path_factory.mktemp("value")
    write(root, "/proc/sys/kernel/random/boot_id", data)
    path = "/proc/sys/kernel/random/boot_id"
    expected = SnapshotHost(root).fetch(Request.of(path)).value(path)
    # Up to three polls: a value equal to `before` is read again, as a wait reads it.
    assert LocalShellHost(root, shell).value_unlike(path, before, 0.02, 0.01) == expected


class ShellHostWithEnv(LocalShellHost):
    """A session whose environment holds more (a login's /etc/environment, AcceptEnv)."""

    def __init__(self, root: Path, shell: str, env: dict[str, str]) -> None:
        super().__init__(root, shell)
        self.env = env

    def run_script(self, script: str, timeout: float | None = None) -> ScriptResult:
        env = {"PATH": os.environ["PATH"], **lab_env(self.root), **self.env}
        done = subprocess.run([self.shell], input=script.encode(), capture_output=True, env=env)
        return ScriptResult(done.stdout, done.stderr, done.returncode)


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_a_wait_on_what_cannot_be_read_fails_and_never_answers_an_old_value(
    tmp_path: Path, shell: str
) -> None:
    """bash keeps a variable that a failed `read` would set: a directory where the boot id
    should be once answered the value the session's environment held, as a new boot id."""
    path = "/proc/sys/kernel/random/boot_id"
    (tmp_path / path.lstrip("/")).mkdir(parents=True)
    host = ShellHostWithEnv(tmp_path, shell, {"v": "0a1b", "w": "", "r": "0", "s": "1"})
    with pytest.raises(HostError, match="reading /proc/sys/kernel/random/boot_id failed"):
        host.value_unlike(path, "old", 0.02, 0.01)
