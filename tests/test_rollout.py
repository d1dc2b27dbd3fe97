"""Rollouts of the reboot phase over a fleet of lab hosts (real sshd on loopback addresses,
the sh library's emulated reboot): waves, canaries, the failure budget, the hooks, the
controller's journal, resume after a SIGKILL, a host that never comes back."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import BLACKWELL, UNTUNED, copy_host, run_tune, write
from ssh_fixture import SshLab, StartLab, minimal_host, sshd_available

from reconciler.apply.journal import read_run, run_ids
from reconciler.hosts.directory import SnapshotHost
from reconciler.rollout import journal
from reconciler.rollout.waves import FailureBudget, Size, parse_sizes, waves

lab_only = pytest.mark.skipif(
    not sshd_available(), reason="needs root and openssh-server (.ci/run installs it)"
)

NEW_CMDLINE = "BOOT_IMAGE=/vmlinuz quiet amd_pstate=active processor.max_cstate=1\n"
FAST = ("--reboot-poll", "0.1", "--reboot-timeout", "20", "--no-probes", "-y")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The untuned example cut down to what the Blackwell profile reads, GRUB_DEFAULT=saved
    (a try-once boot)."""
    root = minimal_host(UNTUNED, BLACKWELL, tmp_path_factory.mktemp("t") / "untuned")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0", "GRUB_DEFAULT=saved"))
    return root


def fleet(tmp_path: Path, template: Path, count: int) -> dict[str, Path]:
    # Copies, not hard links: the emulated reboot rewrites /proc/cmdline in place.
    return {f"h{n}": copy_host(template, tmp_path / f"h{n}") for n in range(1, count + 1)}


def hosts_args(lab: SshLab) -> list[str]:
    return [arg for name in lab.roots for arg in ("-H", name)]


def rollout(lab: SshLab, *args: str | Path) -> Any:
    return run_tune(
        "apply", BLACKWELL, "--reboot", "--ssh-config", lab.config, *FAST, *hosts_args(lab), *args
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# Waves, as Ansible cuts them.


def test_serial_is_read_as_ansible_reads_it() -> None:
    hosts = [f"h{n}" for n in range(1, 21)]
    assert parse_sizes("1,5,25%", "--serial") == [Size(1), Size(5), Size(25, percent=True)]
    cut = waves(hosts, parse_sizes("1,5,25%", "--serial"))
    assert [len(w) for w in cut] == [1, 5, 5, 5, 4]
    assert [n for w in cut for n in w] == hosts
    # A percentage rounds down, never to 0.
    assert [len(w) for w in waves(hosts[:3], [Size(10, percent=True)])] == [1, 1, 1]
    # The canaries alone first; percentages still count the whole fleet.
    cut = waves(hosts, parse_sizes("25%", "--serial"), ["h7"])
    assert cut[0] == ["h7"] and [len(w) for w in cut[1:]] == [5, 5, 5, 4]
    assert "h7" not in [n for w in cut[1:] for n in w]


@pytest.mark.parametrize("text", ["0", "", "a", "1,,2", "150%", "-1"])
def test_a_serial_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(Exception, match="--serial"):
        parse_sizes(text, "--serial")


def test_the_failure_budget_counts_hosts_or_a_share_of_the_fleet() -> None:
    assert FailureBudget.parse("0").allowed(20) == 0
    assert FailureBudget.parse("2").allowed(20) == 2
    assert FailureBudget.parse("10%").allowed(20) == 2
    assert FailureBudget.parse("10%").allowed(9) == 0


# The lab.


@lab_only
def test_waves_reboot_verify_and_journal_every_host(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots = fleet(tmp_path, template, 4)
    lab = start_lab(roots)
    result = rollout(lab, "--serial", "1,2", "--format", "json")
    assert result.code == 0, result.out + result.err
    lines = json_lines(result.out)
    hosts = [line for line in lines if "host" in line]
    # In wave order; within a wave, as the hosts end.
    assert [h["wave"] for h in hosts] == [1, 2, 2, 3]
    assert sorted((h["host"]["name"], h["wave"], h["state"]) for h in hosts) == [
        ("h1", 1, "done"),
        ("h2", 2, "done"),
        ("h3", 2, "done"),
        ("h4", 3, "done"),
    ]
    summary = lines[-1]
    assert summary["kind"] == "rollout"
    assert summary["counts"]["done"] == 4
    assert summary["configurations"]["new"] == ["h1", "h2", "h3", "h4"]
    for root in roots.values():
        assert (root / "proc/cmdline").read_text() == NEW_CMDLINE
        assert not (root / "var/lib/tune/pending.json").exists()
        host = SnapshotHost(root)
        (run_id,) = run_ids(host)
        run = read_run(host, run_id)
        assert run is not None and run.outcome == "applied"
    saved = journal.load(None)
    assert saved.waves == [["h1"], ["h2", "h3"], ["h4"]]
    assert {e.state for e in saved.hosts.values()} == {journal.DONE}
    assert saved.path is not None and saved.path.stat().st_mode & 0o777 == 0o600
    assert saved.path.parent.stat().st_mode & 0o777 == 0o700


@lab_only
def test_an_emulated_reboot_of_fixed_duration_keeps_the_old_boot_id_meanwhile(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots = fleet(tmp_path, template, 2)
    for root in roots.values():
        write(root, ".tune-emulate/reboot-seconds", "2\n")
    boot_ids = {n: (r / "proc/sys/kernel/random/boot_id").read_text() for n, r in roots.items()}
    lab = start_lab(roots)
    started = time.monotonic()
    result = rollout(lab, "--serial", "1")
    took = time.monotonic() - started
    assert result.code == 0, result.out + result.err
    # Two waves of one host, each rebooting for 2 s, one after the other.
    assert took >= 4, took
    for name, root in roots.items():
        assert (root / "proc/sys/kernel/random/boot_id").read_text() != boot_ids[name]
        assert (root / "proc/cmdline").read_text() == NEW_CMDLINE
    assert "wave 2  h2  rebooting" in result.out
    assert "2 applied, 0 rolled back, 0 failed, 0 not started" in result.out
