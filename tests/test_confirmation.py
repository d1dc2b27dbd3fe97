"""The question before a write: what it names, and what `rollback --dry-run` shows instead.
(`tests/test_contract.py` checks every writing command refuses without a terminal.)"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import BLACKWELL, run_tune
from small_host import SmallHost, build, tree, write_profile

from reconciler.core.errors import ExitCode


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bare_apply_asks_naming_the_boot_configuration_it_changes(
    untuned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    before = tree(untuned)
    declined = run_tune("apply", BLACKWELL, "--root", untuned)
    assert declined.code == ExitCode.NOT_CONFIRMED
    question = declined.out.splitlines()[-1]
    assert question == (
        f"Apply 29 changes (368 writes) to snapshot {untuned}, the boot configuration among them "
        "(/etc/pve/lxc/101.conf, /etc/default/grub.d/90-tune.cfg, update-grub)? [y/N]: "
    )
    assert tree(untuned) == before


def test_a_runtime_only_apply_asks_without_boot_configuration(
    untuned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    declined = run_tune("apply", BLACKWELL, "--root", untuned, "--runtime-only")
    assert declined.out.splitlines()[-1] == (
        f"Apply 24 changes (363 writes) to snapshot {untuned}? [y/N]: "
    )


def test_rollback_dry_run_shows_each_restore_newest_first_and_writes_nothing(
    tmp_path: Path,
) -> None:
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}, thp="always"))
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "sysctl": {"vm.swappiness": 10},
            "sysfs": {"/sys/kernel/mm/transparent_hugepage/enabled": "madvise"},
        },
    )
    done = run_tune("apply", profile, "--runtime-only", "--no-persist", "--root", root, "--yes")
    assert done.code == 0, done.err
    before = tree(root)
    shown = run_tune("rollback", "--root", root, "--dry-run")
    assert shown.code == 0, shown.err
    run = done.out.split("(run ")[1].split(")")[0]
    assert shown.out.splitlines() == [
        f"Dry run of the rollback of run {run} on snapshot {root}, nothing written: 2 writes.",
        "sysfs:/sys/kernel/mm/transparent_hugepage/enabled: 'madvise' -> 'always'",
        "    write /sys/kernel/mm/transparent_hugepage/enabled: always",
        "sysctl:vm.swappiness: '10' -> '60'",
        "    write /proc/sys/vm/swappiness: 60",
    ]
    assert tree(root) == before


def test_a_fleet_without_a_terminal_or_yes_is_refused_before_any_host_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reconciler.cli.fleet import FleetTerminal
    from reconciler.cli.output import Output
    from reconciler.core.errors import NotConfirmed

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(NotConfirmed, match="`tune apply --yes` goes ahead"):
        FleetTerminal([], dry_run=False, yes=False, out=Output("json")).confirm([], 281, 12)
    FleetTerminal([], dry_run=False, yes=True, out=Output("json")).confirm([], 281, 12)
