"""`tune apply --runtime-only`, `tune rollback` and `tune history` on writable snapshot hosts."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import BLACKWELL, TUNED, run_tune, write
from shared_run import SharedRun
from small_host import SmallHost, build, tree, write_profile

from reconciler.apply.engines import engine_for
from reconciler.apply.journal import LOCK, PROFILE, read_run, run_ids
from reconciler.apply.python_engine import execute
from reconciler.apply.work import prepare
from reconciler.core.errors import ApplyFailed, HostError
from reconciler.hosts import lock as locking
from reconciler.hosts.base import Completed
from reconciler.hosts.directory import LocalHost, SnapshotHost
from reconciler.profile.load import load_profile


def runtime_changes(root: Path, profile: Path = BLACKWELL) -> list[dict]:
    result = run_tune("plan", profile, "--root", root, "--format", "json", "--save", "p.json")
    return [c for c in json.loads(result.out)["changes"] if c["phase"] == "runtime"]


def test_apply_makes_the_runtime_plan_empty_and_a_second_apply_changes_nothing(
    runtime_applied: SharedRun, scratch: Path
) -> None:
    result = runtime_applied.result
    assert result.code == 0, result.err
    assert "Applied 24 changes (363 writes)" in result.out
    untuned = runtime_applied.copy(scratch / "untuned")
    assert runtime_changes(untuned) == []
    assert (untuned / "sys/kernel/mm/transparent_hugepage/enabled").read_text() == (
        "always [madvise] never\n"
    )
    assert (untuned / "proc/sys/net/ipv4/tcp_rmem").read_text() == "4096\t87380\t268435456\n"
    assert (untuned / "proc/modules").read_text().startswith("nvidia_peermem ")
    again = run_tune("apply", BLACKWELL, "--runtime-only", "--root", untuned, "--yes")
    assert again.code == 0 and "In sync: nothing to change" in again.out
    assert len(run_ids(SnapshotHost(untuned))) == 1


def test_applied_snapshot_has_the_tuned_hosts_boot_files_and_mrrs(
    runtime_applied: SharedRun,
) -> None:
    untuned, tuned = runtime_applied.root, TUNED
    assert runtime_applied.result.code == 0
    for rel in (
        "etc/sysctl.d/90-tune.conf",
        "etc/modules-load.d/tune.conf",
        "etc/udev/rules.d/90-tune-pci.rules",
    ):
        assert (untuned / rel).read_bytes() == (tuned / rel).read_bytes()
    gpu = "sys/bus/pci/devices/0000:41:00.0/config"
    assert (untuned / gpu).read_bytes() == (tuned / gpu).read_bytes()
    nic = "sys/bus/pci/devices/0000:c2:00.0/config"
    assert (untuned / nic).read_bytes() == (tuned / nic).read_bytes()


def test_masked_setpci_write_keeps_the_other_device_control_bits(tmp_path: Path) -> None:
    from small_host import config_space

    root = build(tmp_path / "h", SmallHost(gpus=[512]))
    config = root / "sys/bus/pci/devices/0000:01:00.0/config"
    config.write_bytes(config_space(512, other_bits=0x0C3F))
    profile = write_profile(
        tmp_path / "p.yaml", {"pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 4096}]}
    )
    assert (
        run_tune("apply", "--yes", profile, "--runtime-only", "--root", root, "--no-persist").code
        == 0
    )
    assert config.read_bytes() == config_space(4096, other_bits=0x0C3F)


def test_rollback_restores_every_byte_and_history_says_so(
    runtime_applied: SharedRun, scratch: Path
) -> None:
    before = runtime_applied.before
    assert runtime_applied.result.code == 0
    untuned = runtime_applied.copy(scratch / "untuned")
    assert tree(untuned) != before
    result = run_tune("rollback", "--yes", "--root", untuned)
    assert result.code == 0, result.err
    assert "363 restored" in result.out
    assert tree(untuned) == before
    assert not (untuned / PROFILE.lstrip("/")).exists()
    history = run_tune("history", "--root", untuned, "--format", "json")
    (row,) = json.loads(history.out)["runs"]
    assert row["outcome"] == "rolled-back" and (row["changes"], row["writes"]) == (24, 363)
    assert row["profile"] == "blackwell-8x"
    text = run_tune("history", "--root", untuned).out
    assert "rolled-back" in text and "blackwell-8x" in text
    assert "already rolled back" in run_tune("rollback", "--yes", "--root", untuned).out


def test_journal_follows_the_contract(runtime_applied: SharedRun) -> None:
    untuned = runtime_applied.root
    assert runtime_applied.result.code == 0
    (run_id,) = run_ids(SnapshotHost(untuned))
    assert len(run_id) == 23 and run_id[8] == "T" and run_id[15:17] == "Z-"
    path = untuned / "var/lib/tune/runs" / f"{run_id}.jsonl"
    assert path.stat().st_mode & 0o777 == 0o600
    records = [json.loads(line) for line in path.read_text().splitlines()]
    head = records[0]
    assert {k: head[k] for k in ("type", "run_id", "profile", "phase", "host")} == {
        "type": "run",
        "run_id": run_id,
        "profile": "blackwell-8x",
        "phase": "runtime",
        "host": "gpu-node-07",
    }
    assert head["boot_id"] and head["started"].endswith("Z")
    steps = [r for r in records if r["type"] == "step"]
    first = steps[0]
    assert (first["id"], first["prior"], first["desired"]) == (
        "sysctl:kernel.numa_balancing",
        "1",
        "0",
    )
    # Each step is journaled before its write: its record precedes its `written` marker.
    order = [(r["type"], r.get("seq")) for r in records]
    for step in steps:
        assert order.index(("step", step["seq"])) < order.index(("written", step["seq"]))
    assert records[-1]["type"] == "end" and records[-1]["outcome"] == "applied"
    stored = untuned / PROFILE.lstrip("/")
    assert run_tune("validate", stored).code == 0
    file_step = next(s for s in steps if s["id"] == "file:/etc/sysctl.d/90-tune.conf")
    assert file_step["prior"] is None and "vm.swappiness = 10" in file_step["desired"]


def test_dry_run_prints_exact_operations_and_writes_nothing(untuned: Path) -> None:
    before = tree(untuned)
    result = run_tune("apply", BLACKWELL, "--runtime-only", "--root", untuned, "--dry-run")
    assert result.code == 0, result.err
    assert "write /proc/sys/kernel/numa_balancing: 0" in result.out
    assert "run setpci -s 0000:01:00.0 CAP_EXP+8.w=5000:7000" in result.out
    assert "run modprobe nvidia_peermem" in result.out
    assert "write file /etc/sysctl.d/90-tune.conf (mode 0644" in result.out
    assert "--- /dev/null\n        +++ b/etc/sysctl.d/90-tune.conf\n" in result.out
    assert "\n        +net.ipv4.tcp_rmem = 4096 87380 268435456\n" in result.out
    assert tree(untuned) == before
    assert not (untuned / "var").exists() and not (untuned / "run").exists()


def test_dry_run_folds_what_each_cpu_and_device_does_alike(untuned: Path) -> None:
    # cpu5 is another case: its own block, the others still one.
    write(untuned, "/sys/devices/system/cpu/cpu5/cpufreq/scaling_governor", "powersave\n")
    result = run_tune("apply", BLACKWELL, "--runtime-only", "--root", untuned, "--dry-run")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    governor = lines.index("cpu governor on 127 CPUs (cpu0-4,6-127): 'schedutil' -> 'performance'")
    assert lines[governor + 1 : governor + 3] == [
        "    write /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor: performance",
        "    (the same for cpu1-4,6-127)",
    ]
    assert "cpu:cpu5:governor: 'powersave' -> 'performance'" in lines
    pci = lines.index(
        "pci max_read_request on 8 devices (0000:01:00.0 ... 0000:e1:00.0): '512' -> '4096'"
    )
    assert lines[pci + 2] == "    (the same for 0000:21:00.0 ... 0000:e1:00.0)"
    irqs = lines.index(
        "irq_affinity IRQs of vendor=0x15b3,class=0x0200 on 64 IRQs (irq120-183): "
        "'0-127' -> '32-63,96-127'"
    )
    assert lines[irqs + 1 : irqs + 3] == [
        "    write /proc/irq/120/smp_affinity_list: 32-63,96-127",
        "    (the same for irq121-183)",
    ]
    assert lines[0] == f"Dry run on snapshot {untuned}: 24 changes (363 writes), nothing written."
    assert len(lines) < 110  # over 650 unfolded


def test_no_persist_writes_no_boot_files(untuned: Path) -> None:
    result = run_tune(
        "apply", "--yes", BLACKWELL, "--runtime-only", "--root", untuned, "--no-persist"
    )
    assert result.code == 0, result.err
    assert "Applied 19 changes (358 writes)" in result.out
    assert not (untuned / "etc/sysctl.d").exists()


def test_saved_plan_is_applied_after_reobserving(sysctls: tuple[Path, Path]) -> None:
    root, profile = sysctls
    assert run_tune("plan", profile, "--root", root).code == 2
    assert Path(".tune/plan.json").is_file()
    result = run_tune("apply", "--yes", "--runtime-only")
    assert result.code == 0, result.err
    assert runtime_changes(root, profile) == []


def test_stale_plan_is_refused_with_what_moved(sysctls: tuple[Path, Path]) -> None:
    root, profile = sysctls
    assert run_tune("plan", profile, "--root", root, "--save", "plan.json").code == 2
    write(root, "/proc/sys/vm/swappiness", "30\n")
    before = tree(root)
    result = run_tune("apply", "--yes", "plan.json", "--runtime-only")
    assert result.code == 1
    said = result.err.splitlines()[-1]
    assert said.startswith("stale plan: the host changed since plan.json was made")
    assert "sysctl:vm.swappiness: 60 -> 30" in result.err
    assert tree(root) == before and not (root / "var").exists()


def test_plan_from_another_boot_is_stale(sysctls: tuple[Path, Path]) -> None:
    root, profile = sysctls
    assert run_tune("plan", profile, "--root", root).code == 2
    write(root, "/proc/sys/kernel/random/boot_id", "4f1e0c8a-0000-4000-8000-000000000000\n")
    result = run_tune("apply", "--yes", "--runtime-only")
    assert result.code == 1 and "the host rebooted since" in result.err


def test_apply_without_a_saved_plan_says_what_to_do() -> None:
    result = run_tune("apply", "--yes", "--runtime-only")
    assert result.code == 64 and "run tune plan PROFILE first" in result.err


def test_lock_held_refuses_and_writes_nothing(
    sysctls: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    root, profile = sysctls
    # The wait before giving up, a second here (5 s in a real run: test_pull_lock waits them).
    monkeypatch.setattr(locking, "WAIT", 1)
    lock = root / LOCK.lstrip("/")
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242\n")
        held.flush()
        before = tree(root)
        result = run_tune("apply", "--yes", profile, "--runtime-only", "--root", root)
    assert result.code == 1
    # A lock from an older tune holds the pid alone.
    assert result.err == (
        f"another tune run holds {LOCK} (pid 4242); gave up after {locking.WAIT} s.\n"
    )
    assert tree(root) == before and not (root / "var").exists()


def test_read_only_knob_is_refused_before_any_write(sysctls: tuple[Path, Path]) -> None:
    root, profile = sysctls
    (root / "proc/sys/vm/swappiness").chmod(0o444)
    before = tree(root)
    result = run_tune("apply", "--yes", profile, "--runtime-only", "--root", root)
    assert result.code == 1
    assert result.err.strip() == (
        "sysctl:vm.swappiness cannot be changed: /proc/sys/vm/swappiness is read-only on this host."
    )
    assert tree(root) == before


def test_missing_knob_and_unmatched_pci_selector_are_skipped(tmp_path: Path) -> None:
    # A host without the knob: one note each, and apply makes the rest.
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "sysctl": {"vm.swappiness": 10, "vm.nosuchknob": 1},
            "pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 4096}],
        },
    )
    result = run_tune("apply", profile, "--runtime-only", "--root", root, "--yes")
    assert result.code == 0, result.err
    assert (root / "proc/sys/vm/swappiness").read_text() == "10\n"
    assert runtime_changes(root, profile) == []


def test_missing_knob_and_unmatched_pci_selector_that_are_required_are_refused(
    tmp_path: Path,
) -> None:
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "sysctl": {"vm.swappiness": 10, "vm.nosuchknob": {"value": 1, "required": True}},
            "pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 4096, "required": True}],
        },
    )
    before = tree(root)
    result = run_tune("apply", "--yes", profile, "--runtime-only", "--root", root)
    assert result.code == 1
    assert result.err.splitlines() == [
        "sysctl:vm.nosuchknob cannot be set: /proc/sys/vm/nosuchknob does not exist on this host.",
        "No PCI device matches vendor=0x10de.",
    ]
    assert tree(root) == before


def test_missing_module_shows_modprobes_message(tmp_path: Path) -> None:
    root = build(tmp_path / "h", SmallHost())
    write(root, "/lib/modules/6.14.8-2-pve/modules.dep", "kernel/drivers/net/dummy.ko.zst:\n")
    profile = write_profile(
        tmp_path / "p.yaml", {"modules": {"dummy": "loaded", "nvidia_peermem": "loaded"}}
    )
    before = tree(root)
    result = run_tune("apply", "--yes", profile, "--runtime-only", "--root", root)
    assert result.code == 1
    assert result.err.strip() == (
        "Module nvidia_peermem cannot be loaded on this host (modprobe: FATAL: Module "
        "nvidia_peermem not found in directory /lib/modules/6.14.8-2-pve)."
    )
    assert tree(root) == before


SKIPPED_PEERMEM = (
    "module:nvidia_peermem skipped (--skip-missing): modprobe: FATAL: Module nvidia_peermem "
    "not found in directory /lib/modules/6.14.8-2-pve."
)


def peermem_on_a_vm(tmp_path: Path) -> tuple[Path, Path]:
    """A host whose kernel has dummy but not nvidia_peermem, and a profile that loads both."""
    root = build(tmp_path / "h", SmallHost())
    write(root, "/lib/modules/6.14.8-2-pve/modules.dep", "kernel/drivers/net/dummy.ko.zst:\n")
    profile = write_profile(
        tmp_path / "p.yaml", {"modules": {"dummy": "loaded", "nvidia_peermem": "loaded"}}
    )
    return root, profile


def test_skip_missing_applies_the_rest_and_says_what_it_left_out(tmp_path: Path) -> None:
    root, profile = peermem_on_a_vm(tmp_path)
    result = run_tune("apply", "--yes", "--skip-missing", profile, "--runtime-only", "--root", root)
    assert result.code == 0, result.err
    assert SKIPPED_PEERMEM in result.out.splitlines()
    assert "dummy " in (root / "proc/modules").read_text()


def test_skip_missing_lists_what_it_left_out_in_json(tmp_path: Path) -> None:
    root, profile = peermem_on_a_vm(tmp_path)
    args = ("apply", "--yes", "--skip-missing", profile, "--runtime-only", "--root", root)
    result = run_tune(*args, "--format", "json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["status"] == "applied"
    assert document["skipped"] == [
        {
            "id": "module:nvidia_peermem",
            "reason": "modprobe: FATAL: Module nvidia_peermem not found in directory "
            "/lib/modules/6.14.8-2-pve",
        }
    ]
    assert SKIPPED_PEERMEM in result.err.splitlines()
    again = json.loads(run_tune(*args, "--format", "json").out)
    assert (again["status"], len(again["skipped"])) == ("in-sync", 1)


def test_check_after_skip_missing_says_not_applied_not_drift(tmp_path: Path) -> None:
    # From cron: tune never set what it skipped, so it cannot have drifted.
    root, profile = peermem_on_a_vm(tmp_path)
    applied = run_tune("apply", "--yes", "--skip-missing", profile, "--root", root)
    assert applied.code == 0, applied.err
    check = run_tune("check", "--root", root)
    assert check.code == 0, check.out + check.err
    assert "DRIFT" not in check.out
    assert "NOT APPLIED module nvidia_peermem" in check.out
    assert "NOT APPLIED file /etc/modules-load.d/tune.conf" in check.out


def test_apply_help_says_what_skip_missing_does() -> None:
    assert "--skip-missing" in run_tune("apply", "--help").out


def test_setpci_missing_is_refused(tmp_path: Path) -> None:
    root = build(tmp_path / "h", SmallHost(gpus=[512]))
    profile = write_profile(
        tmp_path / "p.yaml", {"pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 4096}]}
    )
    host = SnapshotHost(root, commands=["modprobe"])
    with pytest.raises(
        HostError, match=r"^setpci is not installed on this host \(package pciutils\)"
    ):
        prepare(host, load_profile(profile), runtime_only=True)


def test_journal_directory_not_writable_is_refused(sysctls: tuple[Path, Path]) -> None:
    root, profile = sysctls
    (root / "var/lib/tune").mkdir(parents=True)
    (root / "var/lib/tune").chmod(0o555)
    result = run_tune("apply", "--yes", profile, "--runtime-only", "--root", root)
    assert result.code == 1
    assert result.err.strip() == (
        "/var/lib/tune/runs is not writable, so tune cannot keep its journal there."
    )


def test_not_root_on_a_live_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    engine = engine_for(LocalHost())
    with pytest.raises(HostError, match="must run as root"):
        engine.session()


def test_a_live_host_reads_a_sysctl_as_a_whole_file() -> None:
    # What an apply journals before writing a sysctl. procfs answers one read(2) of 4 MiB or
    # more on a sysctl with ENOMEM, and a whole read once asked for all of MAX_STATE_BYTES
    # (64 MiB) at once: every local apply of a sysctl failed on a real kernel.
    assert LocalHost().read_file("/proc/sys/kernel/ostype") == b"Linux\n"


def test_reboot_phase_is_refused_with_runtime_only(sysctls: tuple[Path, Path]) -> None:
    root, profile = sysctls
    before = tree(root)
    result = run_tune("apply", "--yes", profile, "--root", root, "--runtime-only", "--reboot-phase")
    assert result.code == 64
    assert "--runtime-only and --reboot-phase exclude each other" in result.err
    assert tree(root) == before


class PeermemMismatch(SnapshotHost):
    """modprobe as it fails when nvidia_peermem was built against another RDMA stack."""

    def run(self, argv: Sequence[str]) -> Completed:
        if list(argv[:2]) == ["modprobe", "nvidia_peermem"]:
            return Completed(
                1,
                "",
                "modprobe: ERROR: could not insert 'nvidia_peermem': "
                "Invalid argument\nnvidia_peermem: disagrees about version of "
                "symbol ib_register_peer_memory_client",
            )
        return super().run(argv)


def test_nvidia_peermem_symbol_mismatch_is_explained_and_rolled_back(tmp_path: Path) -> None:
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    profile = write_profile(
        tmp_path / "p.yaml",
        {"sysctl": {"vm.swappiness": 10}, "modules": {"nvidia_peermem": "loaded"}},
    )
    before = tree(root)
    host = PeermemMismatch(root)
    loaded = load_profile(profile)
    with pytest.raises(ApplyFailed) as failed:
        execute(host, prepare(host, loaded, runtime_only=True), loaded)
    message = str(failed.value)
    assert "the NVIDIA driver and the RDMA stack do not match" in message
    assert "rolled back 2 writes" in message
    assert tree(root) == before
    assert failed.value.exit_code == 3


class Clamping(SnapshotHost):
    """A kernel that caps rmem_max at 1 MiB and still reports success."""

    def set_attr(self, path: str, value: str) -> None:
        if path.endswith("/rmem_max"):
            value = str(min(int(value), 1 << 20))
        super().set_attr(path, value)


def test_clamped_value_is_a_failure_and_everything_is_restored(untuned: Path) -> None:
    before = tree(untuned)
    loaded = load_profile(BLACKWELL)
    host = Clamping(untuned)
    with pytest.raises(ApplyFailed, match=r"reads back '1048576' \(refused or clamped"):
        execute(host, prepare(host, loaded, runtime_only=True), loaded)
    assert tree(untuned) == before
    (run_id,) = run_ids(host)
    run = read_run(host, run_id)
    assert run is not None and run.outcome == "rolled-back"


def test_later_sysctl_file_is_warned_about(sysctls: tuple[Path, Path]) -> None:
    root, profile = sysctls
    write(root, "/etc/sysctl.d/99-sysctl.conf", "# local\nvm.swappiness=60\nfs.file-max = 1\n")
    write(root, "/usr/lib/sysctl.d/50-default.conf", "vm/swappiness = 1\n")
    result = run_tune("plan", profile, "--root", root)
    assert (
        "/etc/sysctl.d/99-sysctl.conf also sets vm.swappiness = 60 and is read after "
        "/etc/sysctl.d/90-tune.conf: its value wins at boot." in result.out
    )
    assert "50-default.conf" not in result.out


class StuckSwappiness(Clamping):
    """rmem_max clamps (the run fails) and vm.swappiness then refuses to go back to 60."""

    def set_attr(self, path: str, value: str) -> None:
        if path.endswith("/swappiness") and value == "60":
            raise HostError(f"{path}: the kernel refused '60' (Device or resource busy).")
        super().set_attr(path, value)


def test_a_failing_restore_is_reported_and_the_rest_still_restored(untuned: Path) -> None:
    before = tree(untuned)
    loaded = load_profile(BLACKWELL)
    host = StuckSwappiness(untuned)
    with pytest.raises(ApplyFailed, match=r"left 1 not restored: .*swappiness.*busy") as failed:
        execute(host, prepare(host, loaded, runtime_only=True), loaded)
    assert failed.value.exit_code == 3
    after = tree(untuned)
    assert after["proc/sys/vm/swappiness"] == b"10\n"
    assert {k: v for k, v in after.items() if k != "proc/sys/vm/swappiness"} == {
        k: v for k, v in before.items() if k != "proc/sys/vm/swappiness"
    }
    (run_id,) = run_ids(host)
    run = read_run(host, run_id)
    assert run is not None and run.outcome == "rollback-failed"
    assert any(r["type"] == "restore-failed" for r in (r.to_json() for r in run.records))
    # Once the kernel lets go, `tune rollback` finishes the job.
    assert run_tune("rollback", "--yes", "--root", untuned).code == 0
    assert tree(untuned) == before
