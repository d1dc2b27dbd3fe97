"""sysctl: read from /proc/sys, normalised before comparing, a missing key named with its
closest neighbour.

Cases of a host's files in and a plan out are data, in tests/kinds/sysctl/ (`test_kinds_data`);
what stays here are tables of values, the example hosts and behaviour.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import by_id, plan_json, run_tune, write

from reconciler.core.changes import Priority
from reconciler.core.errors import ExitCode
from reconciler.facts.sysctl import path_of
from reconciler.hosts.directory import SnapshotHost
from reconciler.kinds.sysctl import KIND
from reconciler.profile.load import load_profile


@pytest.mark.parametrize(
    ("on_host", "in_profile"),
    [
        ("4096\t131072\t6291456\n", "4096 131072 6291456"),  # the kernel separates with tabs
        ("4096 131072   6291456", " 4096\t131072 6291456 "),
        ("16\n", "0x10"),
        ("0x10", "16"),
        ("8", "010"),  # a leading zero is octal, as the kernel parses it
        ("16", "0X10"),
        ("08", "08"),  # not a number the kernel accepts: compared as text
        ("-1", "-0x1"),
        ("16", "+0x10"),
        ("cubic\n", "cubic"),
    ],
)
def test_values_that_mean_the_same_are_in_sync(
    tmp_path: Path, on_host: str, in_profile: str
) -> None:
    write(tmp_path / "host", "/proc/sys/net/ipv4/tcp_rmem", on_host)
    plan = plan_json(
        tmp_path, tmp_path / "host", f'name: t\nsysctl:\n  net.ipv4.tcp_rmem: "{in_profile}"\n'
    )
    assert plan["code"] == 0
    assert plan["changes"] == []


def test_unreadable_file_is_absent_and_says_why(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/proc/sys/vm/dirty_ratio", "20\n")
    # A symlink loop: exists, and open() fails even for root (tests may run as root).
    (root / "proc/sys/vm/swappiness").symlink_to("swappiness")
    text = "name: t\nsysctl:\n  vm.swappiness: 10\n"
    loaded = load_profile(write(tmp_path, "/p.yaml", text))
    files = SnapshotHost(root).fetch(KIND.request(loaded.profile.sysctl))
    outcome = KIND.compare(loaded.profile.sysctl, files)
    [change] = outcome.changes
    assert (change.current, change.desired) == (None, "10")
    [note] = outcome.notes
    assert (
        note.message
        == "vm.swappiness exists but cannot be read: Too many levels of symbolic links."
    )
    plan = plan_json(tmp_path, root, text)
    assert plan["code"] == 2
    assert by_id(plan)["sysctl:vm.swappiness"]["current"] is None


def test_slash_in_a_key_is_a_dot_inside_one_component(tmp_path: Path) -> None:
    assert (
        path_of("net.ipv4.conf.eth0/100.rp_filter") == "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"
    )
    write(tmp_path / "host", "/proc/sys/net/ipv4/conf/eth0.100/rp_filter", "2\n")
    plan = plan_json(
        tmp_path, tmp_path / "host", "name: t\nsysctl:\n  net.ipv4.conf.eth0/100.rp_filter: 1\n"
    )
    assert by_id(plan)["sysctl:net.ipv4.conf.eth0/100.rp_filter"]["current"] == "2"


@pytest.mark.parametrize(
    ("key", "path"),
    [
        # sysctl.d(5)'s own example: the first separator is a slash, so dots are in names.
        ("net/ipv4/conf/enp3s0.200/forwarding", "net/ipv4/conf/enp3s0.200/forwarding"),
        ("net.ipv4.conf.enp3s0/200.forwarding", "net/ipv4/conf/enp3s0.200/forwarding"),
        ("net/ipv4/conf/eth0.100/rp_filter", "net/ipv4/conf/eth0.100/rp_filter"),
        ("kernel/numa_balancing", "kernel/numa_balancing"),
    ],
)
def test_a_key_whose_first_separator_is_a_slash_is_a_path(
    tmp_path: Path, key: str, path: str
) -> None:
    # As procps' sysctl (slashdot) and systemd-sysctl (sysctl_normalize) read a name.
    assert path_of(key) == f"/proc/sys/{path}"
    write(tmp_path / "host", f"/proc/sys/{path}", "2\n")
    plan = plan_json(tmp_path, tmp_path / "host", f"name: t\nsysctl:\n  {key}: 1\n")
    assert by_id(plan)[f"sysctl:{key}"]["current"] == "2"


@pytest.mark.parametrize("key", ["net/../../etc/x", "net/./x", "net/.x", "/net/x", "net//x"])
def test_a_path_form_key_never_leaves_proc_sys(tmp_path: Path, key: str) -> None:
    result = run_tune("validate", write(tmp_path, "/p.yaml", f"name: t\nsysctl:\n  {key}: 1\n"))
    assert result.code == ExitCode.INVALID_PROFILE
    assert "sysctl name" in result.err


def test_default_priority_is_p1_and_short_form_equals_long_form(tmp_path: Path) -> None:
    short = load_profile(write(tmp_path, "/a.yaml", "name: a\nsysctl:\n  vm.swappiness: 10\n"))
    long = load_profile(
        write(tmp_path, "/b.yaml", "name: b\nsysctl:\n  vm.swappiness: {value: 10}\n")
    )
    assert short.profile.sysctl == long.profile.sysctl
    assert short.profile.sysctl["vm.swappiness"].priority is Priority.P1
