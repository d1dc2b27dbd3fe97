"""sysctl: read from /proc/sys, normalised before comparing, a missing key named with its
closest neighbour."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import UNTUNED, by_id, notes, plan_json, write

from reconciler.facts.sysctl import path_of
from reconciler.hosts.directory import SnapshotHost
from reconciler.kinds.sysctl import KIND
from reconciler.plan.model import Priority
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


def test_a_different_value_is_a_change_with_normalised_current_and_desired(tmp_path: Path) -> None:
    write(tmp_path / "host", "/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n")
    plan = plan_json(
        tmp_path,
        tmp_path / "host",
        "name: t\nsysctl:\n  net.ipv4.tcp_rmem:\n"
        '    {value: "4096  87380\t268435456", priority: P0, reason: big buffers}\n',
    )
    assert plan["code"] == 2
    assert plan["changes"] == [
        {
            "id": "sysctl:net.ipv4.tcp_rmem",
            "kind": "sysctl",
            "target": "net.ipv4.tcp_rmem",
            "current": "4096 131072 6291456",
            "desired": "4096 87380 268435456",
            "phase": "runtime",
            "priority": "P0",
            "reason": "big buffers",
        }
    ]


def test_zero_on_the_host_is_not_absent(tmp_path: Path) -> None:
    write(tmp_path / "host", "/proc/sys/kernel/numa_balancing", "0\n")
    plan = plan_json(tmp_path, tmp_path / "host", "name: t\nsysctl:\n  kernel.numa_balancing: 1\n")
    assert by_id(plan)["sysctl:kernel.numa_balancing"]["current"] == "0"


def test_missing_key_is_a_change_from_none_with_the_closest_key_and_where(
    tmp_path: Path,
) -> None:
    text = "name: t\nsysctl:\n  vm.swappiness: 10\n  kernel.numa_balancin: 0\n"
    plan = plan_json(tmp_path, UNTUNED, text)
    change = by_id(plan)["sysctl:kernel.numa_balancin"]
    assert change["current"] is None
    assert change["desired"] == "0"
    assert plan["code"] == 2
    [note] = notes(plan)
    assert note.startswith(f"{tmp_path / 'p.yaml'}:4:25: ")
    assert "kernel.numa_balancin does not exist on this host" in note
    assert "did you mean kernel.numa_balancing?" in note


def test_a_key_one_level_short_names_the_files_below_it(tmp_path: Path) -> None:
    # A directory is no sysctl: /proc/sys is listed for the hint as for a missing key.
    write(tmp_path / "host", "/proc/sys/net/ipv4/conf/eth0/rp_filter", "1\n")
    plan = plan_json(tmp_path, tmp_path / "host", "name: t\nsysctl:\n  net.ipv4.conf.eth0: 1\n")
    [note] = notes(plan)
    assert "did you mean net.ipv4.conf.eth0.rp_filter?" in note


def test_missing_key_with_nothing_close_names_nothing(tmp_path: Path) -> None:
    write(tmp_path / "host", "/proc/sys/vm/swappiness", "60\n")
    plan = plan_json(tmp_path, tmp_path / "host", "name: t\nsysctl:\n  net.core.rmem_max: 1\n")
    [note] = notes(plan)
    assert "did you mean" not in note
    assert note.endswith("(no /proc/sys/net/core/rmem_max).")


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


def test_default_priority_is_p1_and_short_form_equals_long_form(tmp_path: Path) -> None:
    short = load_profile(write(tmp_path, "/a.yaml", "name: a\nsysctl:\n  vm.swappiness: 10\n"))
    long = load_profile(
        write(tmp_path, "/b.yaml", "name: b\nsysctl:\n  vm.swappiness: {value: 10}\n")
    )
    assert short.profile.sysctl == long.profile.sysctl
    assert short.profile.sysctl["vm.swappiness"].priority is Priority.P1
