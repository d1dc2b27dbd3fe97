"""Files the operator names for output (`-o`, `--save`, `--prometheus`, `snapshot -o`) from
issue #30, item 4: a rename put a regular file in place of whatever had the name, so
`tune plan -o /dev/null` run as root replaced the machine's null device (and broke sshd); a
FIFO and a `/dev/stdout` link were replaced too, and `tune snapshot -o` opened the name
directly, following another user's link to whatever it led to.

Never the real /dev: each test makes its own FIFO, its own character device (the null
device's numbers, 1:3, as a node in the test's directory) and its own links.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import BLACKWELL, UNTUNED, copy_host, run_tune

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a device node")

# Each way of naming an output file, as the arguments of a command that writes it there.
WRITERS: dict[str, Callable[[Path, Path], list[str | Path]]] = {
    "plan -o": lambda host, out: ["plan", BLACKWELL, "--root", host, "-o", out],
    "plan --save": lambda host, out: ["plan", BLACKWELL, "--root", host, "--save", out],
    "check --prometheus": lambda host, out: [
        "check",
        BLACKWELL,
        "--root",
        host,
        "--prometheus",
        out,
    ],
    "snapshot -o": lambda host, out: ["snapshot", BLACKWELL, "--root", host, "-o", out],
}


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def null_device(path: Path) -> Path:
    """A character device node with /dev/null's numbers, in the test's own directory."""
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


class Reader:
    """Reads a FIFO to its end in a thread, as `tune ... -o fifo | consumer` would."""

    def __init__(self, path: Path) -> None:
        self.data = b""
        self.thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self.thread.start()

    def _read(self, path: Path) -> None:
        with open(path, "rb") as handle:
            self.data = handle.read()

    def done(self) -> bytes:
        self.thread.join(30)
        assert not self.thread.is_alive(), "the FIFO was never opened for writing"
        return self.data


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Path]:
    yield copy_host(UNTUNED, tmp_path / "host")


@pytest.mark.parametrize("writer", WRITERS.values(), ids=WRITERS.keys())
@pytest.mark.parametrize("linked", [False, True], ids=["fifo", "link to a fifo"])
def test_an_output_fifo_is_written_through_never_replaced(
    tmp_path: Path, host: Path, writer: Callable[[Path, Path], list[str | Path]], linked: bool
) -> None:
    pipe = fifo(tmp_path / "pipe")
    named = tmp_path / "stdout"  # as /dev/stdout leads to a pipe
    if linked:
        named.symlink_to(pipe)
    reader = Reader(pipe)
    result = run_tune(*writer(host, named if linked else pipe))
    assert result.code in (0, 2), result.err
    assert reader.done(), "nothing reached the FIFO's reader"
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode)
    assert not linked or named.is_symlink()


@as_root
@pytest.mark.parametrize("writer", WRITERS.values(), ids=WRITERS.keys())
@pytest.mark.parametrize("linked", [False, True], ids=["device", "link to a device"])
def test_an_output_character_device_is_written_through_never_replaced(
    tmp_path: Path, host: Path, writer: Callable[[Path, Path], list[str | Path]], linked: bool
) -> None:
    device = null_device(tmp_path / "null")
    named = tmp_path / "out"
    if linked:
        named.symlink_to(device)
    result = run_tune(*writer(host, named if linked else device))
    assert result.code in (0, 2), result.err
    info = os.lstat(device)
    assert stat.S_ISCHR(info.st_mode) and info.st_rdev == os.makedev(1, 3)
    assert not linked or named.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) in (
        [],
        [".tune"],
    ), "a temporary file was left beside the device"


@as_root
@pytest.mark.parametrize("writer", WRITERS.values(), ids=WRITERS.keys())
def test_an_output_through_another_users_link_is_refused(
    tmp_path: Path, host: Path, writer: Callable[[Path, Path], list[str | Path]]
) -> None:
    victim = tmp_path / "authorized_keys"
    victim.write_text("ssh-ed25519 AAAA admin\n")
    link = tmp_path / "report.out"
    link.symlink_to(victim)
    os.lchown(link, NOBODY, NOBODY)
    result = run_tune(*writer(host, link))
    assert victim.read_text() == "ssh-ed25519 AAAA admin\n"
    assert link.is_symlink()
    said = result.err.strip().splitlines()[-1]
    assert f"through the symbolic link {link}: uid {NOBODY} owns it, not root or you" in said


def test_a_link_of_the_callers_to_a_regular_file_keeps_the_link(tmp_path: Path, host: Path) -> None:
    target = tmp_path / "reports/latest.txt"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "latest"
    link.symlink_to(target)
    result = run_tune(*WRITERS["plan -o"](host, link))
    assert result.code == 2, result.err
    assert link.is_symlink()
    assert target.read_text() == run_tune(*WRITERS["plan -o"](host, "-")).out


def test_an_output_directory_is_one_sentence(tmp_path: Path, host: Path) -> None:
    directory = tmp_path / "reports"
    directory.mkdir()
    result = run_tune(*WRITERS["plan -o"](host, directory))
    assert result.code == 1
    assert result.err.endswith(f"\n{directory}: cannot write the output (it is a directory).\n")


def test_a_fifo_swapped_for_a_link_after_it_was_looked_at_gets_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever owns the output's directory shows a FIFO, then swaps it for a link to another
    device between tune's look and its open: the write must not reach what the link leads to
    (it could be /dev/port, a watchdog or another user's terminal)."""
    from reconciler.core.errors import OutputError
    from reconciler.hosts import replaced

    shown, victim = tmp_path / "metrics.prom", tmp_path / "victim"
    os.mkfifo(shown)
    os.mkfifo(victim)
    reader = os.open(victim, os.O_RDONLY | os.O_NONBLOCK)  # so a writer's open does not wait
    looked = replaced._destination

    def look_then_swap(path: Path, doing: str) -> object:
        seen = looked(path, doing)
        shown.unlink()
        shown.symlink_to(victim)
        return seen

    monkeypatch.setattr(replaced, "_destination", look_then_swap)
    try:
        with pytest.raises(OutputError):
            replaced.write_output(shown, "secret\n", "write metrics")
        assert os.read(reader, 64) == b""  # no writer ever opened it: nothing came
    finally:
        os.close(reader)
