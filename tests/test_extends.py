"""extends: mappings merge recursively, lists are replaced whole, later parents win, the file
itself wins over all; cycles are an error."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import BLACKWELL, run_tune, write

from reconciler.core.changes import Priority
from reconciler.core.errors import ProfileError
from reconciler.profile.load import load_profile


def test_mappings_merge_key_by_key_recursively(tmp_path: Path) -> None:
    write(
        tmp_path,
        "/base.yaml",
        "name: base\nsysctl:\n  vm.swappiness: {value: 10, priority: P0, reason: keep}\n"
        "  kernel.numa_balancing: 0\ncpu:\n  governor: performance\n",
    )
    write(
        tmp_path,
        "/child.yaml",
        "name: child\nextends: base.yaml\nsysctl:\n  vm.swappiness: {value: 1, priority: P2}\n"
        "cpu:\n  idle_states: {disable: [C2]}\n",
    )
    loaded = load_profile(tmp_path / "child.yaml")
    sysctl = loaded.profile.sysctl
    assert set(sysctl) == {"vm.swappiness", "kernel.numa_balancing"}
    # The entry itself merges: value and priority from the child, reason from the base.
    assert (sysctl["vm.swappiness"].value, sysctl["vm.swappiness"].priority) == ("1", Priority.P2)
    assert sysctl["vm.swappiness"].reason == "keep"
    assert loaded.profile.cpu is not None
    assert loaded.profile.cpu.governor is not None
    assert loaded.profile.cpu.idle_states is not None
    assert loaded.profile.name == "child"


def test_lists_are_replaced_whole(tmp_path: Path) -> None:
    write(
        tmp_path,
        "/base.yaml",
        "name: base\ncpu:\n  idle_states: {disable: [C2, C3]}\n"
        "pci:\n  - {select: {vendor: 0x10de}, max_read_request: 4096}\n"
        "  - {select: {vendor: 0x15b3}, max_read_request: 4096}\n",
    )
    write(
        tmp_path,
        "/child.yaml",
        "name: child\nextends: [base.yaml]\ncpu:\n  idle_states: {disable: [C6]}\n"
        "pci:\n  - {select: {vendor: 0x8086}, max_read_request: 512}\n",
    )
    profile = load_profile(tmp_path / "child.yaml").profile
    assert profile.cpu is not None and profile.cpu.idle_states is not None
    assert profile.cpu.idle_states.disable == ["C6"]
    assert [(p.select.vendor, p.max_read_request) for p in profile.pci] == [(0x8086, 512)]


def test_later_parents_win_and_the_file_wins_over_all(tmp_path: Path) -> None:
    write(tmp_path, "/a.yaml", "name: a\nsysctl:\n  vm.swappiness: 1\n  vm.dirty_ratio: 1\n")
    write(
        tmp_path,
        "/sub/b.yaml",
        "name: b\nsysctl:\n  vm.swappiness: 2\n  vm.dirty_ratio: 2\n  vm.dirty_bytes: 2\n",
    )
    write(
        tmp_path,
        "/c.yaml",
        "name: c\nextends: [a.yaml, sub/b.yaml]\nsysctl:\n  vm.dirty_ratio: 3\n",
    )
    loaded = load_profile(tmp_path / "c.yaml")
    values = {k: v.value for k, v in loaded.profile.sysctl.items()}
    assert values == {"vm.swappiness": "2", "vm.dirty_ratio": "3", "vm.dirty_bytes": "2"}
    assert loaded.locate("sysctl", "vm.swappiness") == f"{tmp_path / 'sub/b.yaml'}:3:18"
    assert loaded.locate("sysctl", "vm.dirty_ratio").startswith(f"{tmp_path / 'c.yaml'}:4:")


def test_parents_resolve_relative_to_the_file_that_names_them(tmp_path: Path) -> None:
    write(tmp_path, "/lib/base.yaml", "name: base\nsysctl:\n  vm.swappiness: 1\n")
    write(tmp_path, "/lib/mid.yaml", "name: mid\nextends: base.yaml\n")
    write(tmp_path, "/top.yaml", "name: top\nextends: lib/mid.yaml\n")
    assert set(load_profile(tmp_path / "top.yaml").profile.sysctl) == {"vm.swappiness"}


def test_diamond_is_not_a_cycle(tmp_path: Path) -> None:
    write(tmp_path, "/base.yaml", "name: base\nsysctl:\n  vm.swappiness: 1\n")
    write(tmp_path, "/left.yaml", "name: left\nextends: base.yaml\n")
    write(tmp_path, "/right.yaml", "name: right\nextends: base.yaml\n")
    write(tmp_path, "/top.yaml", "name: top\nextends: [left.yaml, right.yaml]\n")
    assert load_profile(tmp_path / "top.yaml").profile.name == "top"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a.yaml": "name: a\nextends: a.yaml\n"}, "extends cycle: a.yaml -> a.yaml"),
        (
            {"a.yaml": "name: a\nextends: b.yaml\n", "b.yaml": "name: b\nextends: a.yaml\n"},
            "extends cycle: a.yaml -> b.yaml -> a.yaml",
        ),
        (
            {
                "a.yaml": "name: a\nextends: b.yaml\n",
                "b.yaml": "name: b\nextends: c.yaml\n",
                "c.yaml": "name: c\nextends: [b.yaml]\n",
            },
            "extends cycle: a.yaml -> b.yaml -> c.yaml -> b.yaml",
        ),
    ],
)
def test_cycles_are_an_error(tmp_path: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(ProfileError) as error:
        load_profile(tmp_path / "a.yaml")
    [diagnostic] = error.value.diagnostics
    assert diagnostic.message == message
    assert diagnostic.line == 2


def test_validate_names_the_parents(tmp_path: Path) -> None:
    result = run_tune("validate", BLACKWELL)
    assert result.code == 0
    assert "valid profile 'blackwell-8x'" in result.out
    # A bundled parent by its bundled name, not its path in site-packages (#33, item 9).
    assert "(with base-gpu-inference);" in result.out
