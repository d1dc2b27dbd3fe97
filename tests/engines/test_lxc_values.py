"""LXC's values as LXC reads them (issue 34, item 1): a limit in any spelling LXC takes for the
same value, and a mount entry with its fields and options in any order or spacing LXC takes for
the same mount, is the value tune wants: in sync, never rewritten. LXC itself judges: `lxc-info
-c KEY` prints what its parser (confile.c, `parse_limit_value`) made of the config."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write
from lxc_oracle import lxc_refuses, lxc_value
from small_host import tree

from reconciler.core.changes import Change
from reconciler.facts import lxc as fmt
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile

from .drive import Engine

CONFIG = "/var/lib/lxc/c/config"
PROXMOX = "/etc/pve/lxc/101.conf"

# Spellings real configs and guides use, and the corners of LXC's reader: strtoull's sign,
# leading zeros and wrap-around (`-1` is RLIM_INFINITY), the blanks around the colon, an empty
# half, LXC's quotes.
WRITTEN = [
    "unlimited",
    "unlimited:unlimited",
    "unlimited : unlimited",
    "-1",
    "-1:-1",
    "18446744073709551615",
    "'unlimited'",
    "65536",
    "65536:65536",
    "65536 : 65536",
    "65536:",
    "+65536",
    "0065536",
    "65536:unlimited",
    "unlimited:65536",
    ":65536",
    "-5",
    "0",
    ":",
    "0" * 40 + "65536",
    "-" + "0" * 30 + "1",
]
# What a profile may say (`memlock:`'s pattern).
WANTED = ["unlimited", "unlimited:unlimited", "65536", "65536:65536", "0065536", "65536:unlimited"]


def memlock_change(root: Path, profile: Path) -> Change:
    loaded = load_profile(profile)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, False), False)
    (change,) = [c for c in plan.compared if c.setting == fmt.MEMLOCK]
    return change


@pytest.mark.parametrize("written", WRITTEN)
def test_a_limit_lxc_reads_as_the_profiles_is_in_sync(tmp_path: Path, written: str) -> None:
    config = f"lxc.uts.name = c\nlxc.prlimit.memlock = {written}\n"
    held = lxc_value(config, fmt.MEMLOCK, tmp_path / "o")
    assert held, f"LXC refuses {written!r}"
    root = tmp_path / "host"
    write(root, CONFIG, config)
    for wanted in WANTED:
        want = lxc_value(f"lxc.prlimit.memlock = {wanted}\n", fmt.MEMLOCK, tmp_path / "o")
        profile = write(
            tmp_path, "p.yaml", f"name: t\nlxc:\n  - path: {CONFIG}\n    memlock: '{wanted}'\n"
        )
        change = memlock_change(root, profile)
        # tune reads what LXC holds, and wants what LXC would hold for the profile's value.
        assert (change.current, change.desired) == (held, want), (written, wanted)
        assert change.in_sync == (held == want), (written, wanted)


@pytest.mark.parametrize(
    "refused", ["18446744073709551616", "9" * 5000, "unlimitedx", "0x10", "1:2:3", "1 2"]
)
def test_a_limit_lxc_refuses_is_never_taken_for_a_value(tmp_path: Path, refused: str) -> None:
    assert lxc_value(f"lxc.prlimit.memlock = {refused}\n", fmt.MEMLOCK, tmp_path) is None
    assert fmt.limit(refused) is None


def test_a_proxmox_config_says_it_in_proxmox_syntax_and_means_the_same(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, PROXMOX, "arch: amd64\nlxc.prlimit.memlock: -1\n")
    profile = write(
        tmp_path, "p.yaml", "name: t\nlxc:\n  - container: '101'\n    memlock: unlimited\n"
    )
    assert memlock_change(root, profile).in_sync


def test_the_last_line_counts_and_an_empty_value_clears(tmp_path: Path) -> None:
    root = tmp_path / "host"
    profile = write(
        tmp_path, "p.yaml", f"name: t\nlxc:\n  - path: {CONFIG}\n    memlock: unlimited\n"
    )
    for config in (
        "lxc.prlimit.memlock = unlimited\nlxc.prlimit.memlock =\n",
        "lxc.prlimit.memlock = unlimited\nlxc.prlimit =\n",
        "lxc.prlimit.memlock = 1024\nlxc.prlimit.memlock = -1\n",
    ):
        write(root, CONFIG, config)
        held = lxc_value(config, fmt.MEMLOCK, tmp_path / "o")
        change = memlock_change(root, profile)
        assert change.current == (held or None), config
        assert change.in_sync == (held == "unlimited"), config


def test_a_limit_in_another_spelling_is_never_rewritten(engine: Engine, scratch: Path) -> None:
    root = scratch / "host"
    original = "lxc.uts.name = c\nlxc.prlimit.memlock = unlimited : -1\n"
    write(root, CONFIG, original)
    profile = write(
        scratch, "p.yaml", f"name: t\nlxc:\n  - path: {CONFIG}\n    memlock: unlimited\n"
    )
    before = tree(root)
    # No run at all: nothing to change.
    assert (
        engine.apply(root, profile, phase="reboot", runtime_only=False, reboot_phase=True) is None
    )
    assert tree(root) == before


def test_a_limit_lxc_reads_otherwise_is_made_right(engine: Engine, scratch: Path) -> None:
    root = scratch / "host"
    original = "lxc.uts.name = c\nlxc.prlimit.memlock = 65536:unlimited\n"
    write(root, CONFIG, original)
    profile = write(
        scratch, "p.yaml", f"name: t\nlxc:\n  - path: {CONFIG}\n    memlock: unlimited\n"
    )
    assert engine.apply(root, profile, phase="reboot", runtime_only=False, reboot_phase=True)
    written = (root / CONFIG.lstrip("/")).read_text()
    assert lxc_refuses(written, scratch) is None
    assert lxc_value(written, fmt.MEMLOCK, scratch) == "unlimited"
    assert memlock_change(root, profile).in_sync


MOUNT = "lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
# One mount as LXC reads it (an fstab line: options a set, parse_mntopts_legacy's
# `lxc_iterate_parts` skips empty parts; blanks between the fields any run of them).
SAME_MOUNT = [
    "lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none optional,create=file,bind\n",
    "lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none create=file,bind,optional,bind 0 0\n",
    "lxc.mount.entry =   /dev/nvidia0\tdev/nvidia0  none\t\tbind,,optional,create=file\n",
]


@pytest.mark.parametrize("entry", SAME_MOUNT)
def test_a_mount_entry_lxc_reads_as_tunes_is_never_touched(
    engine: Engine, scratch: Path, entry: str
) -> None:
    root = scratch / "host"
    write(root, "/proc/devices", "Character devices:\n195 nvidia-frontend\n")
    write(root, "/dev/nvidia0", "")
    original = f"lxc.uts.name = c\nlxc.cgroup2.devices.allow = c 195:* rwm\n{entry}"
    assert lxc_refuses(original, scratch) is None
    write(root, CONFIG, original)
    profile = write(
        scratch, "p.yaml", f"name: t\nlxc:\n  - path: {CONFIG}\n    nvidia_devices: true\n"
    )
    loaded = load_profile(profile)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, False), False)
    assert [c.id for c in plan.changes] == []
    before = tree(root)
    # No run at all: nothing to change.
    assert (
        engine.apply(root, profile, phase="reboot", runtime_only=False, reboot_phase=True) is None
    )
    assert tree(root) == before


def test_other_options_are_another_mount() -> None:
    ours = fmt.meaning(fmt.MOUNT, MOUNT.split("= ", 1)[1].strip())
    for other in ("bind,create=file", "rbind,optional,create=file", "bind,optional,create=dir"):
        assert fmt.meaning(fmt.MOUNT, f"/dev/nvidia0 dev/nvidia0 none {other}") != ours
