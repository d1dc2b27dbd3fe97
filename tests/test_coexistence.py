"""Another tuning daemon on the host: tuned (its real profiles, tests/corpus/tuned),
power-profiles-daemon or cpupower's service, active and setting a knob the profile sets, is
named in the plan with the fix, since it puts its own value back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import UNTUNED, copy_host, plan_json, write
from small_host import SmallHost, build, sysctls_of
from test_shell_read import both

from reconciler.plan.observe import request
from reconciler.profile.load import load_profile

CORPUS = Path(__file__).resolve().parent / "corpus" / "tuned"
BASE = Path(__file__).resolve().parent.parent / "profiles" / "base-gpu-inference.yaml"
UNITS = "/run/systemd/units"


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A small host with what BASE sets as the untuned example host has it: its sysctls, THP
    always, the schedutil governor (the daemons' notes are about the knobs, not the host)."""
    sysctls = sysctls_of(UNTUNED, load_profile(BASE).profile.sysctl)
    return build(tmp_path / "h", SmallHost(sysctls=sysctls, governors=["schedutil"] * 2))


def running(root: Path, unit: str) -> None:
    # systemd's link for an active unit points at its invocation id, not at a file.
    (root / UNITS.lstrip("/")).mkdir(parents=True, exist_ok=True)
    os.symlink("0f1e2d3c4b5a69788796a5b4c3d2e1f0", root / f"{UNITS.lstrip('/')}/invocation:{unit}")


def with_tuned(root: Path, profile: str = "network-latency") -> Path:
    write(root, "/etc/tuned/active_profile", f"{profile}\n")
    for conf in CORPUS.glob("*/tuned.conf"):
        write(root, f"/usr/lib/tuned/profiles/{conf.parent.name}/tuned.conf", conf.read_text())
    return root


def daemon_notes(tmp_path: Path, root: Path) -> dict[str, str]:
    plan = plan_json(tmp_path, root, BASE.read_text())
    return {
        n["about"]: n["message"]
        for n in plan["notes"]
        if "will put its own value back" in n["message"]
    }


def test_an_active_tuned_profile_and_its_parent_are_named_for_each_knob(
    tmp_path: Path, host: Path
) -> None:
    running(with_tuned(host), "tuned.service")
    found = daemon_notes(tmp_path, host)
    # network-latency sets THP and kernel.numa_balancing and kernel.nmi_watchdog; its parent
    # latency-performance the governor, vm.swappiness and the dirty limits (as percentages).
    assert sorted(found) == [
        "cpu:governor",
        "sysctl:kernel.nmi_watchdog",
        "sysctl:kernel.numa_balancing",
        "sysctl:vm.dirty_background_ratio",
        "sysctl:vm.dirty_ratio",
        "sysctl:vm.swappiness",
        "sysfs:/sys/kernel/mm/transparent_hugepage/enabled",
    ]
    assert found["sysctl:vm.swappiness"].endswith(
        "tuned (profile network-latency) is active and sets vm.swappiness too: it will put its "
        "own value back. Fix: tuned-adm off && systemctl disable --now tuned, or drop the "
        "setting from its profile."
    )


def test_tuned_installed_but_not_running_is_no_concern(tmp_path: Path, host: Path) -> None:
    assert daemon_notes(tmp_path, with_tuned(host)) == {}


@pytest.mark.parametrize(
    ("unit", "fix"),
    [
        ("power-profiles-daemon", "systemctl mask --now power-profiles-daemon."),
        ("cpupower", "systemctl disable --now cpupower."),
    ],
)
def test_a_frequency_daemon_is_named_for_the_governor(
    tmp_path: Path, host: Path, unit: str, fix: str
) -> None:
    running(host, f"{unit}.service")
    found = daemon_notes(tmp_path, host)
    assert list(found) == ["cpu:governor"]
    assert found["cpu:governor"].endswith(
        f"{unit} is active and sets the CPU frequency governor too: it will put its own value "
        f"back. Fix: {fix}"
    )


def test_over_ssh_the_daemons_read_as_from_a_snapshot(scratch: Path) -> None:
    untuned = copy_host(UNTUNED, scratch / "untuned")  # the whole host, read both ways
    # The shell reader lists systemd's dangling invocation links as a snapshot does: in the
    # same single script as every other file.
    running(with_tuned(untuned), "tuned.service")
    direct, shelled, shell = both(untuned, request(load_profile(BASE).profile))
    assert shelled == direct
    assert direct.node_paths(f"{UNITS}/invocation:tuned.service")
    assert len(shell.scripts) == 1
