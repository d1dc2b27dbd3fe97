"""Device nodes (`Request.nodes`): listed by name and type, never opened, and the same from a
snapshot directory, the one-script SSH read and a `tune snapshot` archive."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from conftest import BLACKWELL, UNTUNED, run_tune, write
from test_shell_read import LocalShellHost

from reconciler.core.files import Files, Request
from reconciler.facts import lxc as fmt
from reconciler.hosts.archive import ArchiveHost, write_archive
from reconciler.hosts.directory import SnapshotHost

WANTED = Request.of(fmt.PROC_DEVICES, nodes=[fmt.NVIDIA_NODES])


def node_host(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    write(root, fmt.PROC_DEVICES, "Character devices:\n195 nvidia-frontend\n")
    write(root, "/dev/nvidia0", "")
    write(root, "/dev/nvidia-caps/nvidia-cap1", "")
    write(root, "/dev/null", "")  # not NVIDIA's
    # A FIFO blocks whoever opens it for reading: an observation that opened nodes would hang
    # here, as opening /dev/nvidia0 on a real host would initialise the GPU.
    os.mkfifo(root / "dev/nvidia-uvm")
    os.symlink("nvidia0", root / "dev/nvidia-link")
    return root


def test_nodes_are_listed_never_opened_and_directories_marked(tmp_path: Path) -> None:
    files = SnapshotHost(node_host(tmp_path)).fetch(WANTED)
    assert files.node_paths(fmt.NVIDIA_NODES) == (
        "/dev/nvidia-caps/",
        "/dev/nvidia-link",
        "/dev/nvidia-uvm",
        "/dev/nvidia0",
    )
    assert not any(p.startswith("/dev/") for p in files.contents)


def test_the_shell_read_lists_the_same_nodes(tmp_path: Path) -> None:
    root = node_host(tmp_path)
    shell = LocalShellHost(root)
    assert shell.fetch(WANTED) == SnapshotHost(root).fetch(WANTED)
    assert len(shell.scripts) == 1


def test_an_archive_keeps_nodes_as_empty_files_and_directories(tmp_path: Path) -> None:
    root = node_host(tmp_path)
    archive = tmp_path / "host.tar.gz"
    write_archive(SnapshotHost(root).fetch(WANTED), archive)
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["dev/nvidia0"].isfile() and members["dev/nvidia0"].size == 0
    assert members["dev/nvidia-caps"].isdir()
    assert ArchiveHost(archive).fetch(WANTED) == SnapshotHost(root).fetch(WANTED)


def test_an_archive_implies_a_directory_from_a_file_below_it(tmp_path: Path) -> None:
    archive = tmp_path / "host.tar.gz"
    files = Files(contents={"/dev/nvidia-caps/nvidia-cap1": b"", "/dev/nvidia0": b""})
    write_archive(files, archive)
    found = ArchiveHost(archive).fetch(WANTED).node_paths(fmt.NVIDIA_NODES)
    assert found == ("/dev/nvidia-caps/", "/dev/nvidia0")


def test_tune_snapshot_captures_the_example_hosts_nodes(tmp_path: Path) -> None:
    archive = tmp_path / "host.tar.gz"
    assert run_tune("snapshot", BLACKWELL, "--root", UNTUNED, "-o", archive).code == 0
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert {"dev/nvidia0", "dev/nvidia-modeset", "dev/nvidia-caps"} <= names
    assert "dev/nvidia-caps/nvidia-cap1" not in names  # the directory is mounted whole
