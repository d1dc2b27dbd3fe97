"""`--root DIR`: a snapshot is data from another machine, and tune stays inside it.

A snapshot comes from a support ticket or another host; its links are resolved the way that
host's kernel would resolve them, inside the snapshot. A link that leads out of it is an error
for that path, for every read and every write; a FIFO or a device where a file is expected is a
read error, not a hang; links inside the snapshot (all of /sys is made of them) keep working.
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

import pytest
from conftest import run_tune
from small_host import SmallHost, build, listing, whole_tree, write_profile
from ssh_fixture import StartLab, sshd_available

from reconciler.apply.journal import Journal
from reconciler.core.errors import HostError
from reconciler.hosts.directory import SnapshotHost
from reconciler.steps.records import End

SECRET = "SECRET-OUTSIDE-THE-SNAPSHOT"
SWAPPINESS = "proc/sys/vm/swappiness"
GPU = "sys/bus/pci/devices/0000:01:00.0"
OUTSIDE = "a symbolic link in the snapshot points outside it"


def small(root: Path) -> Path:
    return build(root, SmallHost(sysctls={"vm.swappiness": "60"}, modules=["nvidia"], gpus=[512]))


def up_to(root: Path, link: Path) -> str:
    """The relative target from `link`'s directory to `root`'s parent: one `..` too many."""
    return os.path.relpath(root.parent, link.parent)


def plant(root: Path, rel: str, outside: Path, *, absolute: bool = False) -> None:
    """Replace `rel` in the snapshot with a link to `outside`, a path of this machine."""
    link = root / rel
    if link.is_dir() and not link.is_symlink():
        for child in sorted(link.rglob("*"), reverse=True):
            child.rmdir() if child.is_dir() else child.unlink()
        link.rmdir()
    else:
        link.unlink(missing_ok=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    if absolute:
        link.symlink_to(outside)
    else:
        link.symlink_to(os.path.join(up_to(root, link), outside.relative_to(root.parent)))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory of this machine next to the snapshot, holding what no plan may show."""
    target = tmp_path / "outside"
    target.mkdir()
    (target / "shadow").write_text(SECRET + "\n")
    return target


def swappiness_profile(tmp_path: Path) -> Path:
    return write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})


@pytest.mark.parametrize("absolute", [False, True], ids=["relative", "absolute"])
def test_a_link_in_a_snapshot_never_shows_a_file_outside_it(
    tmp_path: Path, outside: Path, absolute: bool
) -> None:
    """plan, check and snapshot -o read vm.swappiness through a planted link: a relative link
    that climbs out is an error for that path; an absolute one means the snapshot's own file,
    as it did on the host the snapshot came from (here, none)."""
    root = small(tmp_path / "host")
    plant(root, SWAPPINESS, outside / "shadow", absolute=absolute)
    profile = swappiness_profile(tmp_path)
    for command in (["plan"], ["check"], ["plan", "--format", "json"]):
        result = run_tune(*command, profile, "--root", root)
        assert SECRET not in result.out + result.err
        assert result.code == 2, result.err
        if not absolute:
            assert OUTSIDE in result.out + result.err
    archive = tmp_path / "snap.tar.gz"
    assert run_tune("snapshot", profile, "--root", root, "-o", archive).code == 0
    with tarfile.open(archive) as tar:
        for member in tar:
            extracted = tar.extractfile(member)
            assert extracted is None or SECRET.encode() not in extracted.read()


def test_a_glob_never_expands_through_a_link_out_of_the_snapshot(
    tmp_path: Path, outside: Path
) -> None:
    """cpu1 is a link to a directory of this machine laid out like a CPU: the governor glob
    of the cpu kind must not list, read or change it."""
    root = build(tmp_path / "host", SmallHost(governors=["schedutil", "schedutil"]))
    (outside / "cpufreq").mkdir()
    (outside / "cpufreq/scaling_governor").write_text(SECRET + "\n")
    plant(root, "sys/devices/system/cpu/cpu1", outside)
    profile = write_profile(tmp_path / "p.yaml", {"cpu": {"governor": "performance"}})
    before = listing(outside)
    plan = run_tune("plan", profile, "--root", root, "--format", "json")
    assert SECRET not in plan.out + plan.err
    assert "cpu1" not in plan.out
    run_tune("apply", profile, "--root", root, "--runtime-only", "--no-persist", "-y")
    assert listing(outside) == before


def host_with_escape(tmp_path: Path, outside: Path, rel: str) -> SnapshotHost:
    """A snapshot whose `rel` (a file or a directory) is a link to a copy of it outside."""
    root = small(tmp_path / "host")
    source = root / rel
    copy = outside / rel.replace("/", "_")
    if source.is_dir():
        os.rename(source, copy)
    else:
        copy.write_bytes(source.read_bytes() if source.exists() else b"")
    plant(root, rel, copy)
    return SnapshotHost(root)


WRITES = {
    "set_attr": (SWAPPINESS, lambda host: host.set_attr("/" + SWAPPINESS, "10")),
    "put_file": ("etc", lambda host: host.put_file("/etc/sysctl.d/90-tune.conf", b"x=1\n")),
    "delete_file": (
        "etc/sysctl.d",
        lambda host: host.delete_file("/etc/sysctl.d/99-old.conf"),
    ),
    "append": ("var/lib/tune", lambda host: host.append("/var/lib/tune/runs/r.jsonl", b"{}\n")),
    "journal": ("var/lib/tune/runs", lambda host: Journal(host, "r").record(End("applied", "now"))),
    "modprobe": ("proc/modules", lambda host: host.run(["modprobe", "nvidia_peermem"])),
    "setpci": (
        f"{GPU}/config",
        lambda host: host.run(["setpci", "-s", "0000:01:00.0", "CAP_EXP+8.w=5000:7000"]),
    ),
}


@pytest.mark.parametrize("primitive", sorted(WRITES))
def test_no_write_primitive_follows_a_link_out_of_the_snapshot(
    tmp_path: Path, outside: Path, primitive: str
) -> None:
    rel, write = WRITES[primitive]
    (tmp_path / "host/etc/sysctl.d").mkdir(parents=True)
    (tmp_path / "host/etc/sysctl.d/99-old.conf").write_text("vm.swappiness = 1\n")
    (tmp_path / "host/var/lib/tune/runs").mkdir(parents=True)
    host = host_with_escape(tmp_path, outside, rel)
    before = listing(outside)
    with pytest.raises(HostError, match=OUTSIDE):
        done = write(host)
        # A command reports its failure as a command does: an exit status and a message.
        if done is not None and done.returncode != 0:
            raise HostError(done.stderr)
    assert listing(outside) == before


def test_an_apply_and_a_rollback_write_nothing_outside_the_snapshot(
    tmp_path: Path, outside: Path
) -> None:
    """The issue's attack: links where apply writes (the drop-ins, the journal), then where a
    rollback writes after an apply that went well."""
    root = small(tmp_path / "host")
    profile = write_profile(
        tmp_path / "p.yaml",
        {"sysctl": {"vm.swappiness": 10}, "modules": {"nvidia_peermem": "loaded"}},
    )
    (outside / "etc").mkdir()
    plant(root, "etc", outside / "etc")
    before = listing(outside)
    applied = run_tune("apply", profile, "--root", root, "-y")
    assert applied.code in (1, 3), applied.out
    assert OUTSIDE in applied.err
    assert listing(outside) == before

    (root / "etc").unlink()
    assert run_tune("apply", profile, "--root", root, "-y").code == 0
    (outside / "sysctl").write_text("10\n")
    (outside / "modules").write_text("nvidia_peermem 16384 0 - Live 0x0000000000000000\n")
    plant(root, SWAPPINESS, outside / "sysctl")
    plant(root, "proc/modules", outside / "modules")
    plant(root, "etc/sysctl.d", outside / "etc")
    before = listing(outside)
    rolled = run_tune("rollback", "--yes", "--root", root)
    assert rolled.code != 0
    assert OUTSIDE in rolled.out + rolled.err
    assert listing(outside) == before


def test_links_inside_the_snapshot_lead_where_the_kernel_would(tmp_path: Path) -> None:
    """As in /sys: the PCI device is a relative link into /sys/devices, the netdev an absolute
    one; plan reads through them and apply writes through them."""
    root = small(tmp_path / "host")
    real = root / "sys/devices/pci0000:00/0000:01:00.0"
    real.parent.mkdir(parents=True)
    os.rename(root / GPU, real)
    (root / GPU).symlink_to("../../../devices/pci0000:00/0000:01:00.0")
    (root / "sys/class/net").mkdir(parents=True)
    (root / "sys/class/net/gpu").symlink_to("/sys/devices/pci0000:00/0000:01:00.0")
    profile = write_profile(
        tmp_path / "p.yaml", {"pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 4096}]}
    )
    plan = run_tune("plan", profile, "--root", root)
    assert plan.code == 2, plan.err
    assert "0000:01:00.0" in plan.out
    before = (real / "config").read_bytes()
    assert run_tune("apply", profile, "--root", root, "--no-persist", "-y").code == 0
    assert (real / "config").read_bytes() != before
    assert (root / GPU).is_symlink()
    host = SnapshotHost(root)
    assert host.read_file("/sys/class/net/gpu/vendor") == b"0x10de\n"
    assert run_tune("plan", profile, "--root", root, "--no-persist").code == 0


@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_a_fifo_or_a_device_where_a_file_is_expected_is_a_read_error(
    tmp_path: Path, kind: str, no_hang: None
) -> None:
    root = small(tmp_path / "host")
    target = root / SWAPPINESS
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        import socket

        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(target))
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod of a device needs root")
        os.mknod(target, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    profile = swappiness_profile(tmp_path)
    for command in ("plan", "check"):
        result = run_tune(command, profile, "--root", root)
        assert result.code == 2, result.err
        assert "vm.swappiness exists but cannot be read: not a regular file." in result.out
    with pytest.raises(HostError, match="not a regular file"):
        SnapshotHost(root).read_file("/" + SWAPPINESS)


# Item 16: a rollback restores the tree, the directories apply created included, and no
# temporary file of a write outlives it.

RUNTIME_AND_FILES = {"sysctl": {"vm.swappiness": 10}, "modules": {"nvidia_peermem": "loaded"}}


def bare(tmp_path: Path) -> Path:
    """A small host with tune's state directories (as any host has /var/lib and /run)
    and no /etc: apply creates /etc/sysctl.d and /etc/modules-load.d for its drop-ins."""
    root = small(tmp_path / "host")
    (root / "var/lib/tune/runs").mkdir(parents=True)
    (root / "run").mkdir()
    return root


def test_a_rollback_leaves_the_tree_as_it_was_directories_included(tmp_path: Path) -> None:
    root = bare(tmp_path)
    profile = write_profile(tmp_path / "p.yaml", RUNTIME_AND_FILES)
    before = whole_tree(root)
    assert run_tune("apply", profile, "--root", root, "-y").code == 0
    assert (root / "etc/sysctl.d/90-tune.conf").exists()
    rolled = run_tune("rollback", "--yes", "--root", root)
    assert rolled.code == 0, rolled.err
    assert whole_tree(root) == before


class Crash(BaseException):
    """The process dies here: no handler of tune's runs (what kill -9 does)."""


def cut_renames(monkeypatch: pytest.MonkeyPatch, cut: BaseException) -> None:
    """Every rename of a temporary file into place raises `cut` instead."""
    rename = os.replace

    def cut_short(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        if os.fspath(source).endswith(".tune-new"):
            raise cut
        rename(source, target)

    monkeypatch.setattr("reconciler.hosts.directory.os.replace", cut_short)


@pytest.mark.parametrize("how", ["signal", "crash"])
def test_a_write_cut_short_leaves_neither_its_temporary_file_nor_its_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The drop-in's rename is interrupted: by SIGTERM (the run rolls itself back), or by a
    crash, after which `tune rollback` finds the temporary file a kill leaves."""
    root = bare(tmp_path)
    profile = write_profile(tmp_path / "p.yaml", RUNTIME_AND_FILES)
    before = whole_tree(root)
    cut_renames(monkeypatch, Crash() if how == "crash" else KeyboardInterrupt())
    if how == "crash":
        with pytest.raises(Crash):
            run_tune("apply", profile, "--root", root, "-y")
        monkeypatch.undo()
        # What a kill at that moment leaves behind.
        (root / "etc/sysctl.d/.90-tune.conf.tune-new").write_text("vm.swappiness = 10\n")
        assert run_tune("rollback", "--yes", "--root", root).code == 0
    else:
        assert run_tune("apply", profile, "--root", root, "-y").code == 3
    assert whole_tree(root) == before


@pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")
def test_a_rollback_over_ssh_leaves_the_tree_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start_lab: StartLab
) -> None:
    """The sh engine: an apply and its rollback, then a run crashed by a local apply of the
    same snapshot, rolled back over SSH from its journal alone."""
    root = bare(tmp_path)
    profile = write_profile(tmp_path / "p.yaml", RUNTIME_AND_FILES)
    before = whole_tree(root)
    lab = start_lab({"h1": root})
    ssh = ("--ssh-config", lab.config)
    assert run_tune("apply", profile, "-H", "h1", "-y", *ssh).code == 0
    assert (root / "etc/sysctl.d/90-tune.conf").exists()
    rolled = run_tune("rollback", "--yes", "-H", "h1", *ssh)
    assert rolled.code == 0, rolled.err
    assert whole_tree(root) == before

    cut_renames(monkeypatch, Crash())
    with pytest.raises(Crash):
        run_tune("apply", profile, "--root", root, "-y")
    monkeypatch.undo()
    (root / "etc/sysctl.d/.90-tune.conf.tune-new").write_text("vm.swappiness = 10\n")
    rolled = run_tune("rollback", "--yes", "-H", "h1", *ssh)
    assert rolled.code == 0, rolled.err
    assert whole_tree(root) == before
