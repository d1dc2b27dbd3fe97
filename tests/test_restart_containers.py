"""`--restart-containers` after the boot, and the run's outcome when the boot fails its
verification: the container tools (`pct`, `lxc-*`) run through the host, are journaled with
the run, and on a snapshot are emulated from the container's config and the snapshot's /dev;
faults come from a fake that records every argv."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import BLACKWELL, run_tune, write
from shared_run import SharedRun
from small_host import SmallHost, build, tree, write_profile
from test_reboot_phase import pending, reboot

from reconciler.apply.journal import Journal, read_run, run_ids
from reconciler.boot.containers import Container, restart_containers
from reconciler.hosts.base import Completed
from reconciler.hosts.directory import SnapshotHost

CONFIG = "etc/pve/lxc/101.conf"
BOOT_FILES = ("etc/default/grub.d/90-tune.cfg", CONFIG)


class Tools(SnapshotHost):
    """The snapshot's emulated container tools, with every argv recorded; `fail` makes the
    first command of that tool exit 1 as the real one does for a stopped container."""

    def __init__(self, root: Path, fail: str | None = None) -> None:
        super().__init__(root)
        self.calls: list[tuple[str, ...]] = []
        self.fail = fail

    def run(self, argv: Sequence[str]) -> Completed:
        self.calls.append(tuple(argv))
        if argv[0] == self.fail:
            return Completed(1, "", f"{argv[0]}: container is not running\n")
        return super().run(argv)


def container_records(root: Path, run_id: str) -> list[dict[str, object]]:
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None
    return [r for r in (r.to_json() for r in run.records) if r["type"] == "container"]


def only_run(root: Path) -> str:
    (run_id,) = run_ids(SnapshotHost(root))
    return run_id


def test_apply_asks_verify_restarts_and_checks_every_node(untuned: Path) -> None:
    result = run_tune(
        "apply", BLACKWELL, "--reboot-phase", "--restart-containers", "--root", untuned, "-y"
    )
    assert result.code == 0, result.err
    assert pending(untuned)["containers"] == ["/etc/pve/lxc/101.conf"]
    assert pending(untuned)["restart_containers"] is True
    run_id = only_run(untuned)
    reboot(untuned)
    # --reboot-phase wrote no runtime knob; make the runtime part hold as a persisted one would.
    assert run_tune("apply", BLACKWELL, "--runtime-only", "--root", untuned, "-y").code == 0
    result = run_tune("verify", "--root", untuned)
    assert result.code == 0, result.err
    assert "ok  container 101 restarted and sees 13 NVIDIA nodes" in result.out
    argvs = [r["argv"] for r in container_records(untuned, run_id)]
    assert argvs == [["pct", "reboot", "101"], ["pct", "exec", "101", "--", "ls", "/dev"]]
    run = read_run(SnapshotHost(untuned), run_id)
    assert run is not None and run.outcome == "applied"
    assert not (untuned / "var/lib/tune/pending.json").exists()


def test_a_node_the_container_does_not_mount_fails_the_boot_and_rolls_it_back(
    both_phases_applied: SharedRun, scratch: Path
) -> None:
    before = both_phases_applied.before
    assert both_phases_applied.result.code == 0
    untuned = both_phases_applied.copy(scratch / "untuned")
    run_id = only_run(untuned)
    reboot(untuned)
    write(untuned, "/dev/nvidia8", "")  # a ninth GPU came up with the boot
    result = run_tune("verify", "--restart-containers", "--root", untuned)
    assert result.code == 3
    assert "container 101 does not see /dev/nvidia8 after its restart" in result.err
    after = tree(untuned)
    for path in BOOT_FILES:
        assert after.get(path) == before.get(path)
    assert not (untuned / "var/lib/tune/pending.json").exists()

    history = json.loads(run_tune("history", "--root", untuned, "--format", "json").out)["runs"]
    assert [(r["run_id"], r["outcome"]) for r in history] == [(run_id, "boot-rolled-back")]
    check = run_tune("check", BLACKWELL, "--root", untuned, "--since-apply", "--format", "json")
    assert json.loads(check.out)["last_apply"] is None, "a boot rolled back is not applied"


def test_a_container_that_does_not_restart_fails_the_boot(
    reboot_phase_applied: SharedRun, scratch: Path
) -> None:
    assert reboot_phase_applied.result.code == 0
    untuned = reboot_phase_applied.copy(scratch / "untuned")
    run_id = only_run(untuned)
    host = Tools(untuned, fail="pct")
    restarted = restart_containers(host, ["/etc/pve/lxc/101.conf"], Journal(host, run_id))
    assert restarted.failed == [
        "container 101: `pct reboot 101` failed: pct: container is not running"
    ]
    assert host.calls == [("pct", "reboot", "101")], "no ls in a container that did not start"
    (record,) = container_records(untuned, run_id)
    assert (record["argv"], record["returncode"]) == (["pct", "reboot", "101"], 1)


def plain_lxc(tmp_path: Path, mounts: str) -> Path:
    root = tmp_path / "host"
    write(root, "/var/lib/lxc/infer/config", "lxc.uts.name = infer\n" + mounts)
    write(root, "/dev/nvidia0", "")
    write(root, "/dev/nvidiactl", "")
    return root


def test_plain_lxc_is_stopped_started_and_attached(tmp_path: Path) -> None:
    root = plain_lxc(
        tmp_path,
        "lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
        "lxc.mount.entry = /dev/nvidiactl dev/nvidiactl none bind,optional,create=file\n",
    )
    host = Tools(root)
    restarted = restart_containers(host, ["/var/lib/lxc/infer/config"], Journal(host, "r"))
    assert (restarted.held, restarted.failed) == (
        ["container infer restarted and sees 2 NVIDIA nodes"],
        [],
    )
    lxc = ("-n", "infer", "-P", "/var/lib/lxc")
    assert host.calls == [
        ("lxc-stop", *lxc),
        ("lxc-start", *lxc),
        ("lxc-attach", *lxc, "--", "ls", "/dev"),
    ]


def test_a_failed_stop_starts_nothing(tmp_path: Path) -> None:
    host = Tools(plain_lxc(tmp_path, ""), fail="lxc-stop")
    restarted = restart_containers(host, ["/var/lib/lxc/infer/config"], Journal(host, "r"))
    assert restarted.failed == [
        "container infer: `lxc-stop -n infer -P /var/lib/lxc` failed: "
        "lxc-stop: container is not running"
    ]
    assert [argv[0] for argv in host.calls] == ["lxc-stop"]


def test_a_container_without_nvidia_mounts_is_only_restarted(tmp_path: Path) -> None:
    host = Tools(plain_lxc(tmp_path, ""))
    restarted = restart_containers(host, ["/var/lib/lxc/infer/config"], Journal(host, "r"))
    assert restarted.held == ["container infer restarted"]
    assert "lxc-attach" not in [argv[0] for argv in host.calls]


def test_containers_by_config_path() -> None:
    assert Container("/etc/pve/lxc/101.conf").restart() == [("pct", "reboot", "101")]
    assert Container("/srv/lxc/gpu/config").list_dev() == (
        "lxc-attach", "-n", "gpu", "-P", "/srv/lxc", "--", "ls", "/dev",
    )  # fmt: skip


def test_rollback_of_a_reboot_phase_run_clears_what_is_pending(
    reboot_phase_applied: SharedRun, scratch: Path
) -> None:
    assert reboot_phase_applied.result.code == 0
    untuned = reboot_phase_applied.copy(scratch / "untuned")
    assert pending(untuned)["run_id"] == only_run(untuned)
    assert run_tune("rollback", "--yes", "--root", untuned).code == 0
    assert not (untuned / "var/lib/tune/pending.json").exists()
    result = run_tune("verify", "--root", untuned)
    assert result.code == 0
    assert "Nothing to verify" in result.out


def test_rollback_of_another_run_keeps_what_is_pending(untuned: Path) -> None:
    assert run_tune("apply", BLACKWELL, "--runtime-only", "--root", untuned, "-y").code == 0
    runtime_run = only_run(untuned)
    assert run_tune("apply", BLACKWELL, "--reboot-phase", "--root", untuned, "-y").code == 0
    assert run_tune("rollback", "--yes", runtime_run, "--root", untuned).code == 0
    assert pending(untuned)["run_id"] != runtime_run


def test_restart_containers_is_refused_with_runtime_only(tmp_path: Path) -> None:
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    result = run_tune(
        "apply", "--yes", profile, "--runtime-only", "--restart-containers", "--root", root
    )
    assert result.code == 64
    assert "--restart-containers follows the boot configuration" in result.err


def test_no_container_is_restarted_after_a_boot_that_failed_its_checks(
    both_phases_applied: SharedRun, scratch: Path
) -> None:
    assert both_phases_applied.result.code == 0
    untuned = both_phases_applied.copy(scratch / "untuned")
    run_id = only_run(untuned)
    reboot(untuned, move=("509 nvidia-uvm", "508 nvidia-uvm"))
    result = run_tune("verify", "--restart-containers", "--root", untuned)
    assert result.code == 3
    assert "allows majors [195, 509, 510] but /proc/devices now says" in result.err
    assert container_records(untuned, run_id) == []


@pytest.mark.parametrize(
    ("ended", "said"),
    [
        (Completed(1, "usage\n", "pct: no such container\nmore\n"), "pct: no such container"),
        (Completed(1, "\nlxc-stop: timed out\n", ""), "lxc-stop: timed out"),
        (Completed(137), "exit status 137"),
    ],
)
def test_a_failed_command_is_quoted_by_its_first_line_of_stderr_else_stdout_else_status(
    ended: Completed, said: str
) -> None:
    assert ended.said == said
