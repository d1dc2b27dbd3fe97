"""hugepages: what is about behaviour, not data (the cases are in tests/kinds/hugepages)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import profile, run_tune
from small_host import whole_tree
from test_shell_read import LocalShellHost

from reconciler.apply.python_engine import execute
from reconciler.apply.sh_engine import apply_remote
from reconciler.apply.work import prepare
from reconciler.core.errors import ApplyFailed
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import load_profile

CASES = Path(__file__).resolve().parent / "kinds" / "hugepages"
PAGES = "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"


class ShortOfMemory(SnapshotHost):
    """A host whose nodes have room for `room` more pages of any size: as the kernel does, a
    larger count is accepted and filled only as far as free memory goes."""

    def __init__(self, root: Path, room: int) -> None:
        super().__init__(root)
        self.room = room

    def set_attr(self, path: str, value: str) -> None:
        if path.endswith("/nr_hugepages"):
            now = int(Path(self.local(path)).read_text())
            value = str(min(int(value), now + self.room))
        super().set_attr(path, value)


def test_fewer_pages_than_asked_fail_the_run_say_how_many_and_roll_back(tmp_path: Path) -> None:
    root = shutil.copytree(CASES / "per-node" / "host", tmp_path / "host")
    before = whole_tree(root)
    loaded = load_profile(CASES / "per-node" / "profile.yaml")
    host = ShortOfMemory(root, room=300)
    work = prepare(host, loaded, runtime_only=True, with_persistence=False)
    with pytest.raises(ApplyFailed) as failed:
        execute(host, work, loaded, sync=False)
    message = str(failed.value)
    # The 1 GiB pages fit (0 -> 4, 2 -> 4); node0's 512 pages of 2 MiB do not.
    assert (
        "hugepages:node0:2048kB: asked for 512 huge pages of 2048kB on node0, the kernel "
        "reserved '300' (node0 has too little free contiguous memory" in message
    )
    assert "rolled back 3 writes" in message
    assert whole_tree(root) == before


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("hugepages:\n  2M: {node0: 1}\n", "'2M' is not a valid huge page size in kB"),
        ("hugepages:\n  2048kB: {0: 1}\n", "'0' is not a valid NUMA node"),
        ("hugepages:\n  2048kB: {node0: true}\n", "Input should be a valid integer"),
        ("hugepages:\n  2048kB: {node0: -1}\n", "greater than or equal to 0"),
        ("hugepages:\n  2048kB: {node0: '512'}\n", "Input should be a valid integer"),
    ],
)
def test_sizes_and_nodes_are_the_kernels_names_and_counts_are_numbers(
    tmp_path: Path, text: str, error: str
) -> None:
    result = run_tune("plan", profile(tmp_path, f"name: t\n{text}"), "--root", tmp_path)
    assert result.code == 65, result.err
    assert error in result.err


def test_the_remote_script_words_a_short_reservation_alike(tmp_path: Path) -> None:
    """The sh engine takes the kind's words too: its script reports the count the kernel
    reserved in the same sentence (the snapshot it runs on here reserves every page)."""
    root = shutil.copytree(CASES / "per-node" / "host", tmp_path / "host")
    loaded = load_profile(CASES / "per-node" / "profile.yaml")
    shell = LocalShellHost(root)
    work = prepare(shell, loaded, runtime_only=True, preflight_here=False)
    apply_remote(shell, work, loaded, phase="runtime", timeout=60, interval=0.05)
    said = "asked for 512 huge pages of 2048kB on node0, the kernel reserved "
    assert any(said in script for script in shell.scripts)
    assert (root / PAGES).read_text() == "512\n"
