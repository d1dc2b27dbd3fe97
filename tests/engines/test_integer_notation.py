"""A knob whose file reads as an integer in another notation than decimal (hex `0x10`, octal
`010`, a sign): the plan reads it as the kernel parses it (`normalize_words`), so a pushed run's
check of the host before its first write, every read-back and every restore must read it so too.
The sh engine read `0x10` as the word `0x10` and stopped every push of such a knob with exit 9
("a pull wrote it?")."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write
from small_host import SmallHost, build, write_profile

from reconciler.apply.journal import read_run
from reconciler.hosts.directory import SnapshotHost

from .drive import Engine

KSM = "/sys/kernel/mm/ksm/pages_to_scan"

CASES = {
    # One sysctl: the check reads it on its own (`restored_N`).
    "a sysctl in hex": ({"vm.swappiness": "0x10"}, {}, {"sysctl": {"vm.swappiness": 10}}),
    # Several: one awk checks them all (`words_are`).
    "sysctls in hex and octal": (
        {"vm.swappiness": "0x10", "vm.dirty_ratio": "010", "vm.dirty_background_ratio": "+5"},
        {},
        {"sysctl": {"vm.swappiness": 10, "vm.dirty_ratio": 15, "vm.dirty_background_ratio": 3}},
    ),
    # A sysfs file, words of a file outside /proc/sys (`is_words`, `reading choice`).
    "a sysfs file in hex": ({}, {KSM: "0x64\n"}, {"sysfs": {KSM: 200}}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_knob_read_in_hex_or_octal_is_applied_and_rolled_back(
    engine: Engine, scratch: Path, case: str
) -> None:
    sysctls, files, profile = CASES[case]
    root = build(scratch / "host", SmallHost(sysctls=sysctls))
    for path, text in files.items():
        write(root, path, text)
    (root / "var/lib/tune/runs").mkdir(parents=True, exist_ok=True)
    written = write_profile(scratch / "p.yaml", {"name": "ints", **profile})
    run_id = engine.apply(root, written)
    assert run_id is not None
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None and run.outcome == "applied"
    assert engine.apply(root, written) is None
    (done,) = engine.rollback(root)
    assert done.result.failures == [] and done.result.restored == len(run.steps)
