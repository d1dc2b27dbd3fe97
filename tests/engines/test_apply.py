"""`tune apply` and `tune rollback` scenarios (tests/test_apply.py's), run against both engines:
the domain assertions hold for each, and both leave the same files and journals."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest
from conftest import BLACKWELL, write
from small_host import SmallHost, build, config_space, tree, write_profile

from reconciler.apply import sh_script
from reconciler.apply.journal import LOCK, PROFILE, Run, read_run, run_ids
from reconciler.apply.pending import PENDING
from reconciler.core.errors import ApplyFailed, HostError
from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.emulate import LISTED, LOAD_FAILS, REFUSES
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile
from reconciler.steps.ops import PutFile
from reconciler.steps.persist import MODULES_LOAD, header
from reconciler.steps.records import PlanRecord

from .drive import FAULT, Engine


def runtime_changes(root: Path, profile: Path, persist: bool = True) -> list[str]:
    loaded = load_profile(profile)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, persist), persist)
    return [c.id for c in plan.changes if c.phase.value == "runtime"]


def test_apply_makes_the_runtime_plan_empty_and_rollback_restores_every_byte(
    engine: Engine, untuned: Path
) -> None:
    before = tree(untuned)
    run_id = engine.apply(untuned, BLACKWELL)
    assert run_id is not None
    assert runtime_changes(untuned, BLACKWELL) == []
    assert (untuned / "sys/kernel/mm/transparent_hugepage/enabled").read_text() == (
        "always [madvise] never\n"
    )
    assert (untuned / "proc/sys/net/ipv4/tcp_rmem").read_text() == "4096\t87380\t268435456\n"
    assert (untuned / "proc/modules").read_text().startswith("nvidia_peermem ")
    run = read_run(SnapshotHost(untuned), run_id)
    assert run is not None and run.outcome == "applied" and len(run.steps) == 363
    assert engine.apply(untuned, BLACKWELL) is None
    (done,) = engine.rollback(untuned)
    assert done.result.restored == 363 and done.result.failures == []
    assert tree(untuned) == before
    assert not (untuned / PROFILE.lstrip("/")).exists()


def test_masked_setpci_write_keeps_the_other_device_control_bits(
    engine: Engine, tmp_path: Path
) -> None:
    root = build(tmp_path / "h", SmallHost(gpus=[512]))
    config = root / "sys/bus/pci/devices/0000:01:00.0/config"
    config.write_bytes(config_space(512, other_bits=0x0C3F))
    profile = write_profile(
        tmp_path / "p.yaml", {"pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 4096}]}
    )
    assert engine.apply(root, profile, with_persistence=False) is not None
    assert config.read_bytes() == config_space(4096, other_bits=0x0C3F)


def refused(engine: Engine, root: Path, profile: Path) -> list[str]:
    """The lines an apply that must write nothing refuses with; nothing was written."""
    before = tree(root)
    with pytest.raises(HostError) as caught:
        engine.apply(root, profile)
    assert tree(root) == before
    assert run_ids(SnapshotHost(root)) == []
    return str(caught.value).splitlines()


def test_read_only_knob_is_refused_before_any_write(
    engine: Engine, sysctls: tuple[Path, Path]
) -> None:
    root, profile = sysctls
    (root / "proc/sys/vm/swappiness").chmod(0o444)
    assert refused(engine, root, profile) == [
        "sysctl:vm.swappiness cannot be changed: /proc/sys/vm/swappiness is read-only on this host."
    ]


def test_missing_module_shows_modprobes_message(engine: Engine, tmp_path: Path) -> None:
    root = build(tmp_path / "h", SmallHost())
    write(root, "/lib/modules/6.14.8-2-pve/modules.dep", "kernel/drivers/net/dummy.ko.zst:\n")
    profile = write_profile(
        tmp_path / "p.yaml", {"modules": {"dummy": "loaded", "nvidia_peermem": "loaded"}}
    )
    assert refused(engine, root, profile) == [
        "Module nvidia_peermem cannot be loaded on this host (modprobe: FATAL: Module "
        "nvidia_peermem not found in directory /lib/modules/6.14.8-2-pve)."
    ]


HUGEPAGES_2M = "sys/devices/system/node/{}/hugepages/hugepages-2048kB/nr_hugepages"


def test_huge_pages_of_a_node_the_host_lacks_are_skipped_the_rest_applied(
    engine: Engine, tmp_path: Path
) -> None:
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    write(root, "/" + HUGEPAGES_2M.format("node0"), "0\n")
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "sysctl": {"vm.swappiness": 10},
            "hugepages": {"2048kB": {"node0": 8, "node1": 8}, "1048576kB": {"node*": 1}},
        },
    )
    assert engine.apply(root, profile) is not None
    assert (root / "proc/sys/vm/swappiness").read_text() == "10\n"
    assert (root / HUGEPAGES_2M.format("node0")).read_text() == "8\n"
    assert not (root / HUGEPAGES_2M.format("node1")).exists()
    assert runtime_changes(root, profile) == []
    assert engine.apply(root, profile) is None


def test_a_container_the_host_does_not_have_is_skipped_the_others_edited(
    engine: Engine, tmp_path: Path
) -> None:
    config = "/etc/pve/lxc/101.conf"
    root = build(tmp_path / "h", SmallHost())
    write(root, config, "arch: amd64\nlxc.prlimit.memlock: 65536\n")
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "lxc": [
                {"container": "101", "memlock": "unlimited"},
                {"container": "999", "memlock": "unlimited"},
            ]
        },
    )
    how = {"phase": "reboot", "runtime_only": False, "reboot_phase": True}
    assert engine.apply(root, profile, **how) is not None
    assert (root / config.lstrip("/")).read_text() == (
        "arch: amd64\nlxc.prlimit.memlock: unlimited\n"
    )
    assert not (root / "etc/pve/lxc/999.conf").exists()
    assert engine.apply(root, profile, **how) is None


def test_a_required_container_the_host_does_not_have_is_refused(
    engine: Engine, tmp_path: Path
) -> None:
    root = build(tmp_path / "h", SmallHost())
    write(root, "/etc/pve/lxc/101.conf", "arch: amd64\nlxc.prlimit.memlock: 65536\n")
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "lxc": [
                {"container": "101", "memlock": "unlimited"},
                {"container": "999", "memlock": {"value": "unlimited", "required": True}},
            ]
        },
    )
    before = tree(root)
    with pytest.raises(HostError, match=r"/etc/pve/lxc/999\.conf does not exist"):
        engine.apply(root, profile, phase="reboot", runtime_only=False, reboot_phase=True)
    assert tree(root) == before


def test_skip_missing_leaves_out_a_module_the_kernel_does_not_have(
    engine: Engine, tmp_path: Path
) -> None:
    # nvidia_peermem on a VM without NVIDIA's driver: no modules.dep of the kernel lists it.
    root = build(tmp_path / "h", SmallHost())
    write(root, "/lib/modules/6.14.8-2-pve/modules.dep", "kernel/drivers/net/dummy.ko.zst:\n")
    profile = write_profile(
        tmp_path / "p.yaml", {"modules": {"dummy": "loaded", "nvidia_peermem": "loaded"}}
    )
    work = engine.prepare(root, profile, skip_missing=True)
    assert [s.line for s in work.skipped] == [
        "module:nvidia_peermem skipped (--skip-missing): modprobe: FATAL: Module "
        "nvidia_peermem not found in directory /lib/modules/6.14.8-2-pve."
    ]
    assert engine.apply(root, profile, skip_missing=True) is not None
    assert "dummy " in (root / "proc/modules").read_text()
    # The plan still wants it, and the boot-time file that would load it.
    assert runtime_changes(root, profile) == [
        "module:nvidia_peermem",
        "file:/etc/modules-load.d/tune.conf",
    ]
    assert engine.apply(root, profile, skip_missing=True) is None


def left_out_then_settled(
    engine: Engine, root: Path, profile: Path, run: Run, before: dict[str, bytes]
) -> None:
    """The run records the missing module and the boot-time file it trimmed as left out (what
    `tune check` calls not applied rather than drift); a second apply changes nothing; the
    rollback restores the tree exactly."""
    (planned,) = run.of_type(PlanRecord)
    assert planned.left_out == ("file:/etc/modules-load.d/tune.conf", "module:nvidia_peermem")
    assert engine.apply(root, profile, skip_missing=True) is None
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == before


def test_skip_missing_does_not_load_at_boot_what_it_skipped(engine: Engine, tmp_path: Path) -> None:
    # systemd-modules-load fails its unit on every boot for a module the kernel does not have.
    root = build(tmp_path / "h", SmallHost())
    write(root, "/lib/modules/6.14.8-2-pve/modules.dep", "kernel/drivers/net/dummy.ko.zst:\n")
    write(root, "/etc/modules-load.d/tune.conf", "# from an earlier run\nnvidia_peermem\n")
    profile = write_profile(
        tmp_path / "p.yaml", {"modules": {"dummy": "loaded", "nvidia_peermem": "loaded"}}
    )
    before = tree(root)
    run_id = engine.apply(root, profile, skip_missing=True)
    assert run_id is not None
    loads = (root / "etc/modules-load.d/tune.conf").read_text()
    assert loads.splitlines()[1:] == ["dummy"]
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None
    (journaled,) = (s for _, s in run.steps if s.id == "file:/etc/modules-load.d/tune.conf")
    assert journaled.do == (PutFile("/etc/modules-load.d/tune.conf", loads.encode()),)
    assert journaled.desired == tuple(loads.splitlines())  # what --since-apply compares with
    left_out_then_settled(engine, root, profile, run, before)


def test_skip_missing_takes_out_a_module_an_earlier_run_left_to_load_at_boot(
    engine: Engine, tmp_path: Path
) -> None:
    # The file holds what the profile wants (an earlier run, or the driver removed since), so
    # the plan has no change to it: the run must still take the missing module out.
    root = build(tmp_path / "h", SmallHost())
    write(root, "/lib/modules/6.14.8-2-pve/modules.dep", "kernel/drivers/net/dummy.ko.zst:\n")
    write(root, MODULES_LOAD, header("small") + "dummy\nnvidia_peermem\n")
    profile = write_profile(
        tmp_path / "p.yaml", {"modules": {"dummy": "loaded", "nvidia_peermem": "loaded"}}
    )
    before = tree(root)
    run_id = engine.apply(root, profile, skip_missing=True)
    assert run_id is not None
    assert (root / MODULES_LOAD.lstrip("/")).read_text() == header("small") + "dummy\n"
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None
    left_out_then_settled(engine, root, profile, run, before)


def test_skip_missing_leaves_out_the_parameters_and_options_of_a_module_it_skips(
    engine: Engine, tmp_path: Path
) -> None:
    root = build(tmp_path / "h", SmallHost())
    write(root, "/lib/modules/6.14.8-2-pve/modules.dep", "kernel/drivers/net/dummy.ko.zst:\n")
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "modules": {
                "dummy": {"value": "loaded", "params": {"numdummies": "2"}},
                "nvidia_peermem": {"value": "loaded", "params": {"peerdirect_support": "1"}},
            }
        },
    )
    work = engine.prepare(root, profile, skip_missing=True)
    assert [s.id for s in work.skipped] == [
        "module:nvidia_peermem",
        "module:nvidia_peermem:peerdirect_support",
    ]
    assert engine.apply(root, profile, skip_missing=True) is not None
    options = (root / "etc/modprobe.d/tune.conf").read_text()
    assert options.splitlines()[1:] == ["options dummy numdummies=2"]
    assert engine.apply(root, profile, skip_missing=True) is None


def test_skip_missing_still_rolls_back_a_module_that_is_there_but_fails_to_load(
    engine: Engine, tmp_path: Path
) -> None:
    # The module is there: its load failing is a fault to see, not a missing knob.
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    write(root, "/lib/modules/6.14.8-2-pve/modules.dep", "kernel/net/nvidia_peermem.ko:\n")
    write(
        root,
        f"{LOAD_FAILS}/nvidia_peermem",
        "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\n",
    )
    profile = write_profile(
        tmp_path / "p.yaml",
        {"sysctl": {"vm.swappiness": 10}, "modules": {"nvidia_peermem": "loaded"}},
    )
    before = tree(root)
    with pytest.raises(ApplyFailed, match="rolled back 2 writes"):
        engine.apply(root, profile, with_persistence=False, skip_missing=True)
    assert tree(root) == before


def test_a_missing_setpci_names_its_package(engine: Engine, tmp_path: Path) -> None:
    root = build(tmp_path / "h", SmallHost(gpus=[512]))
    write(root, LISTED, "modprobe\n")
    profile = write_profile(
        tmp_path / "p.yaml", {"pci": [{"select": {"vendor": 0x10DE}, "max_read_request": 4096}]}
    )
    assert refused(engine, root, profile) == [
        "setpci is not installed on this host (package pciutils); "
        "pci:0000:01:00.0:max_read_request needs it."
    ]


def test_journal_directory_not_writable_is_refused(
    engine: Engine, sysctls: tuple[Path, Path]
) -> None:
    root, profile = sysctls
    (root / "var/lib/tune").mkdir(parents=True)
    (root / "var/lib/tune").chmod(0o555)
    assert refused(engine, root, profile) == [
        "/var/lib/tune/runs is not writable, so tune cannot keep its journal there."
    ]


def test_a_restore_the_kernel_does_not_take_is_reported_and_the_rest_restored(
    engine: Engine, tmp_path: Path
) -> None:
    """The second write is refused (the run fails); the undo of the first is ignored by the
    kernel (the third write): that one change stays, and the run says which and why."""
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60", "fs.file-max": "9"}))
    write(root, REFUSES + "/proc/sys/fs/file-max", "22\n")
    profile = write_profile(
        tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10, "fs.file-max": 10}}
    )
    write(root, FAULT, "2 ignore\n")
    with pytest.raises(ApplyFailed) as failed:
        engine.apply(root, profile, with_persistence=False)
    (run_id,) = run_ids(SnapshotHost(root))
    assert str(failed.value) == (
        "apply failed (sysctl:fs.file-max is not supported on this host: /proc/sys/fs/file-max: "
        "the kernel refused '10' (Invalid argument); mark the entry `optional: true` to apply "
        "the rest without it.); rolling back 2 writes left 1 not restored: "
        "sysctl:vm.swappiness: restored '60' but it reads back '10' (run " + run_id + ")."
    )
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None and run.outcome == "rollback-failed"
    (root / FAULT.lstrip("/")).unlink()
    (done,) = engine.rollback(root)
    assert done.result.failures == [] and done.result.restored == 1
    assert (root / "proc/sys/vm/swappiness").read_text() == "60\n"


def test_nvidia_peermem_symbol_mismatch_is_explained_and_rolled_back(
    engine: Engine, tmp_path: Path
) -> None:
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    write(
        root,
        f"{LOAD_FAILS}/nvidia_peermem",
        "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\n"
        "nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client\n",
    )
    profile = write_profile(
        tmp_path / "p.yaml",
        {"sysctl": {"vm.swappiness": 10}, "modules": {"nvidia_peermem": "loaded"}},
    )
    before = tree(root)
    with pytest.raises(ApplyFailed) as failed:
        engine.apply(root, profile, with_persistence=False)
    message = str(failed.value)
    assert "modprobe nvidia_peermem failed because the NVIDIA driver and the RDMA stack" in message
    assert "rolled back 2 writes" in message
    assert failed.value.exit_code == 3
    assert tree(root) == before


def test_a_file_the_kernel_did_not_take_is_shown_as_python_shows_text(
    engine: Engine, tmp_path: Path
) -> None:
    """The write of tune's sysctl.d file is lost (the first write, reported done): the read-back
    line shows both texts, quotes and newlines escaped, whichever engine wrote it."""
    host = SmallHost(sysctls={"vm.swappiness": "60"})
    host.etc["etc/sysctl.d/90-tune.conf"] = "# it's an earlier run's\nvm.swappiness = 1\n"
    root = build(tmp_path / "h", host)
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    write(root, FAULT, "1 ignore\n")
    with pytest.raises(ApplyFailed) as failed:
        engine.apply(root, profile)
    assert (
        "/etc/sysctl.d/90-tune.conf reads back \"# it's an earlier run's\\nvm.swappiness = 1\\n\" "
        "(refused or clamped by the kernel)"
    ) in str(failed.value)


def test_a_long_text_the_kernel_did_not_take_is_shown_by_its_start_and_length(
    engine: Engine, tmp_path: Path
) -> None:
    """A file tune rewrites is read whole, megabytes perhaps: a message quotes its first 200
    characters and says how long it is, whichever engine wrote it (lib.sh's quoting took time
    quadratic in the text: a 200 KB container config kept the target busy for hours)."""
    host = SmallHost(sysctls={"vm.swappiness": "60"})
    earlier = "# " + "x" * 4_997 + "\n"
    host.etc["etc/sysctl.d/90-tune.conf"] = earlier
    root = build(tmp_path / "h", host)
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    write(root, FAULT, "1 ignore\n")
    with pytest.raises(ApplyFailed) as failed:
        engine.apply(root, profile)
    shown = repr(earlier[:200]) + "... (5000 characters)"
    assert f"/etc/sysctl.d/90-tune.conf reads back {shown} (refused" in str(failed.value)
    assert "x" * 201 not in str(failed.value)


def test_a_profile_yaml_that_cannot_be_written_leaves_no_pending_json(
    engine: Engine, tmp_path: Path
) -> None:
    """pending.json is written inside the run, before profile.yaml: when profile.yaml then
    cannot be written, the run rolls back, and the pending record of the run it rolled back goes
    with it, else `tune verify` would check (and roll back again) a boot nothing prepared."""
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    before = tree(root)
    pending = PutFile(PENDING, b'{"run_id": "x"}', 0o600)
    write(root, FAULT, "2 fail\n")  # the third write: the step's, pending.json's, profile.yaml's
    with pytest.raises(ApplyFailed, match="rolled back 1 write"):
        engine.apply(root, profile, with_persistence=False, after=(pending,))
    (root / FAULT.lstrip("/")).unlink()
    assert not (root / PENDING.lstrip("/")).exists()
    assert tree(root) == before


def test_a_journals_directory_outside_the_snapshot_is_never_removed(
    engine: Engine, tmp_path: Path
) -> None:
    """A `mkdir` record whose path is not absolute and normal (a damaged or planted journal)
    names no directory of the host: a rollback removes it in neither engine, even empty."""
    root = build(tmp_path / "h", SmallHost(sysctls={"vm.swappiness": "60"}))
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    run_id = engine.apply(root, profile)
    assert run_id is not None
    journal = root / f"var/lib/tune/runs/{run_id}.jsonl"
    text = journal.read_text()
    assert '"type":"mkdir"' in text and '"/etc/sysctl.d"' in text
    journal.write_text(text.replace('"/etc/sysctl.d"', '"/../outside"'))
    (tmp_path / "outside").mkdir()
    engine.rollback(root)
    assert (tmp_path / "outside").is_dir()


def test_the_next_run_right_after_an_apply_finds_its_lock_free(
    engine: Engine, sysctls: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, profile = sysctls
    # A loaded host: the detached sh apply script exits, letting go of the lock, two seconds
    # after its `end` record. The apply returns only once it has.
    linger = """trap '[ "$1" != apply ] || sleep 2' EXIT\n"""
    monkeypatch.setattr(sh_script, "LIBRARY", sh_script.LIBRARY + linger)
    run_id = engine.apply(root, profile)
    held = root / LOCK.lstrip("/")
    if held.exists():  # the Python engine's lock went with its process
        with open(held) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError while held
    [done] = engine.rollback(root)
    assert done.run_id == run_id and not done.result.failures
    assert runtime_changes(root, profile) != []
