"""ACS redirect bits persisted as a kernel boot argument (`acs: ... persist: cmdline`) against
both engines: the runtime write and the `pci=` option in one run, the plan empty after it, a
second apply with nothing to do, and rollback giving back every byte; on a 6.10 kernel on GRUB
with `pci=realloc` already configured, and on a 6.11 kernel on /etc/kernel/cmdline."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import PROJECT
from small_host import whole_tree

from reconciler.facts import cmdline as fmt
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile

from .drive import Engine
from .test_kinds import PORTS, acs_control

CASES = PROJECT / "tests/kinds/acs"
GRUB_6_10 = CASES / "cmdline-disable-acs-redir-before-6.11-joins-pci-on-grub"
CMDLINE_6_11 = CASES / "cmdline-config-acs-from-6.11-on-kernel-cmdline"
# What the next boot passes: joined to the pci= word there (6.10), or a new one (6.11).
EXPECTED = {
    GRUB_6_10: ("realloc,disable_acs_redir=0000:00:03.0;0000:00:07.0",),
    CMDLINE_6_11: ("config_acs=0x00xx@0000:00:03.0;0x00xx@0000:00:07.0",),
}


def configured(root: Path) -> fmt.Parameters:
    boot = fmt.boot_config(SnapshotHost(root).fetch(fmt.request()))
    assert boot is not None and boot.cmdline is not None
    return fmt.parameters(boot.cmdline) or fmt.NONE


@pytest.mark.parametrize("case", sorted(EXPECTED), ids=lambda c: c.name)
def test_acs_boot_argument_applies_with_the_runtime_write_and_rolls_back(
    engine: Engine, tmp_path: Path, case: Path
) -> None:
    root = shutil.copytree(case / "host", tmp_path / "h", symlinks=True)
    profile = case / "profile.yaml"
    before = whole_tree(root)
    assert engine.apply(root, profile, runtime_only=False) is not None
    assert [acs_control(root, port) for port in PORTS] == [0x0011, 0x0011]
    assert configured(root).every("pci") == EXPECTED[case]
    loaded = load_profile(profile)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, True), True)
    assert plan.changes == ()
    assert engine.apply(root, profile, runtime_only=False) is None
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert whole_tree(root) == before
