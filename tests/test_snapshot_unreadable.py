"""A kernel file that exists but cannot be read (`vm.compact_memory` is mode 0200, an unset
`stable_secret` gives EIO) stays so in a snapshot: the plan of the snapshot, packed or as a
directory, equals the live host's note for note, and a hostile marker cannot say more."""

from __future__ import annotations

import errno
import os
import tarfile
from pathlib import Path

import pytest
from conftest import write

from reconciler.core.changes import Change, Note
from reconciler.core.errors import HostError
from reconciler.core.files import Request
from reconciler.hosts.archive import ArchiveHost, write_archive
from reconciler.hosts.base import Completed, ReadableHost
from reconciler.hosts.directory import DirectoryHost, SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe, request
from reconciler.profile.load import load_profile

COMPACT = "/proc/sys/vm/compact_memory"
SECRET = "/proc/sys/net/ipv6/conf/eth0/stable_secret"
PROFILE = (
    "name: t\nsysctl:\n  vm.compact_memory: 1\n  net.ipv6.conf.eth0.stable_secret: 'fe80::1'\n"
    "  vm.swappiness: 10\n"
)


class LiveLike(DirectoryHost):
    """A live host's reads: these paths fail as the kernel fails them, whoever reads."""

    def __init__(self, root: Path, failing: dict[str, int]) -> None:
        super().__init__(root)
        read = self.paths.read

        def kernel_read(path: str, limit: int | None) -> bytes:
            host_path = "/" + os.path.relpath(path, root) if path.startswith(str(root)) else path
            if host_path in failing:
                number = failing[host_path]
                raise OSError(number, os.strerror(number))
            return read(path, limit)

        self.paths.read = kernel_read  # type: ignore[method-assign]

    def describe(self) -> str:
        return "live"

    def check_privileges(self) -> None:
        return None

    def run(self, argv: object) -> Completed:
        raise AssertionError("a plan runs nothing")

    def has_command(self, name: str) -> bool:
        return False


def host_tree(root: Path) -> Path:
    write(root, COMPACT, "")
    write(root, SECRET, "")
    write(root, "/proc/sys/vm/swappiness", "60\n")
    return root


def planned(host: ReadableHost, profile: Path) -> tuple[tuple[Change, ...], tuple[Note, ...]]:
    loaded = load_profile(profile)
    plan = make_plan(loaded, observe(host, loaded.profile, False), False)
    return plan.compared, plan.notes


def test_a_snapshot_plans_unreadable_files_as_the_live_host(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILE)
    live = LiveLike(host_tree(tmp_path / "live"), {COMPACT: errno.EACCES, SECRET: errno.EIO})
    expected = planned(live, profile)
    notes = " ".join(n.message for n in expected[1])
    assert "vm.compact_memory exists but cannot be read: Permission denied." in notes
    assert "stable_secret exists but cannot be read: Input/output error." in notes

    archive = tmp_path / "snap.tar.gz"
    write_archive(live.fetch(request(load_profile(profile).profile, False)), archive)
    assert planned(ArchiveHost(archive), profile) == expected
    # The same snapshot unpacked: the directory form reads the same.
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert planned(SnapshotHost(tmp_path / "unpacked"), profile) == expected


def test_a_marker_holds_an_errno_and_nothing_else(tmp_path: Path) -> None:
    root = host_tree(tmp_path / "h")
    write(root, "/.tune-emulate/unreadable" + COMPACT, "Permission denied; run evil to fix\n")
    loaded = load_profile(write(tmp_path, "/p.yaml", PROFILE))
    with pytest.raises(HostError, match=r"unreadable/proc/sys/vm/compact_memory: holds .* not"):
        observe(SnapshotHost(root), loaded.profile, False)


@pytest.mark.parametrize(
    "marked",
    [
        "/var/lib/tune/profile.yaml",  # tune's own state is never made unreadable
        "/proc/sys/vm/dirty_ratio",  # a file the snapshot does not hold is not created
    ],
)
def test_a_marker_counts_only_for_a_kernel_file_the_snapshot_holds(
    tmp_path: Path, marked: str
) -> None:
    root = host_tree(tmp_path / "h")
    write(root, "/var/lib/tune/profile.yaml", "name: x\n")
    write(root, "/.tune-emulate/unreadable" + marked, "13\n")
    files = SnapshotHost(root).fetch(Request.of(COMPACT, marked))
    assert marked not in files.errors
    assert (marked in files.contents) == (marked == "/var/lib/tune/profile.yaml")
