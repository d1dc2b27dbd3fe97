"""The reboot phase over SSH against real sshd: `tune apply --reboot-phase [--reboot] -H`,
`tune verify -H` and `tune rollback -H`.

The lab's hosts are snapshots under TUNE_ROOT: boot tools are journaled there (as on a local
snapshot), and the target's "reboot" is emulated by the sh library: a new boot id, /proc/cmdline
from tune's one-time GRUB entry, and files staged under `.next-boot/` (a moved major) in place.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import BLACKWELL, UNTUNED, booted_by_systemd_boot, copy_host, run_tune, write
from small_host import SmallHost, build, tree, write_profile
from ssh_fixture import SshLab, StartLab, minimal_host, sshd_available
from test_reboot_phase import block_pending, reboot

from reconciler.apply.journal import read_run, run_ids
from reconciler.apply.tryonce import entry_cmdline
from reconciler.facts import cmdline as fmt
from reconciler.hosts.directory import SnapshotHost

pytestmark = pytest.mark.skipif(
    not sshd_available(), reason="needs root and openssh-server (.ci/run installs it)"
)

# Measured: `tune apply --reboot-phase --arm -H` and `tune verify -H` after the boot (its
# promotion included); status.json adds none to either. Verify was 9 until the promotion read
# tune's state's ownership and the run's journal in one round trip, apply 4 until its
# observation came in the journal check's batch (issue 36).
ARMED_TRIPS, VERIFY_TRIPS = 3, 8

BOOT_FILES = ("etc/default/grub.d/90-tune.cfg", "etc/grub.d/42_tune_try", "etc/pve/lxc/101.conf")


@pytest.fixture(scope="module")
def saved_default(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The untuned example cut down to what the Blackwell profile reads, with GRUB_DEFAULT=saved."""
    root = minimal_host(UNTUNED, BLACKWELL, tmp_path_factory.mktemp("t") / "untuned")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0", "GRUB_DEFAULT=saved"))
    return root


def tune(lab: SshLab, *args: str | Path) -> tuple[int, str, str]:
    result = run_tune(*args, "--ssh-config", lab.config, "--no-probes")
    return result.code, result.out, result.err


def tune_plain(lab: SshLab, *args: str | Path) -> tuple[int, str, str]:
    result = run_tune(*args, "--ssh-config", lab.config)
    return result.code, result.out, result.err


def boot_files(root: Path) -> dict[str, bytes | None]:
    files = tree(root)
    return {path: files.get(path) for path in BOOT_FILES}


@pytest.mark.slow
def test_reboot_over_ssh_boots_once_verifies_and_promotes(
    tmp_path: Path, start_lab: StartLab, saved_default: Path
) -> None:
    root = copy_host(saved_default, tmp_path / "h1")
    before = boot_files(root)
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "apply", BLACKWELL, "--reboot", "-y", "-H", "h1")
    assert (code, err) == (0, ""), out + err
    assert "Reboot: try-once: grub-reboot boots the new command line once" in out
    assert "ok  /proc/cmdline has amd_pstate=active" in out
    assert "ok  /etc/pve/lxc/101.conf allows the NVIDIA majors [195, 509, 510]" in out
    assert "The new boot configuration is now the default." in out
    assert (root / "proc/cmdline").read_text() == (
        "BOOT_IMAGE=/vmlinuz quiet amd_pstate=active processor.max_cstate=1\n"
    )
    assert (root / fmt.DROPIN.lstrip("/")).exists()
    assert not (root / fmt.TRY_SCRIPT.lstrip("/")).exists()
    assert not (root / "var/lib/tune/pending.json").exists()
    # Apply and promotion are one run; its boot tools were journaled on the snapshot.
    host = SnapshotHost(root)
    (run_id,) = run_ids(host)
    run = read_run(host, run_id)
    assert run is not None and run.outcome == "applied"
    deferred = [r["argv"] for r in (r.to_json() for r in run.records) if r["type"] == "deferred"]
    assert deferred[:2] == [["update-grub"], ["grub-reboot", "tune-try"]]
    assert [s.target for _, s in run.steps if s.kind == "cmdline"] == [
        "try-once",
        "try-once-removed",
        "amd_pstate",
        "processor.max_cstate",
    ]
    # Round trips: bounded by the phases, not by the knobs (two check tune's state first).
    assert lab.exec_requests()["h1"] <= 16

    code, out, err = tune_plain(lab, "rollback", "--yes", "-H", "h1")
    assert (code, err) == (0, ""), out
    assert boot_files(root) == before


@pytest.mark.slow
def test_a_boot_that_moves_a_major_is_rolled_back_over_ssh(
    tmp_path: Path, start_lab: StartLab, saved_default: Path
) -> None:
    root = copy_host(saved_default, tmp_path / "h1")
    before = boot_files(root)
    devices = (root / "proc/devices").read_text()
    write(root, ".next-boot/proc/devices", devices.replace("509 nvidia-uvm", "508 nvidia-uvm"))
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "apply", BLACKWELL, "--reboot", "-y", "-H", "h1")
    assert code == 3, out
    assert "nvidia-uvm is 508" in err
    assert "to the boot configuration are rolled back" in err
    assert boot_files(root) == before
    assert not (root / "var/lib/tune/pending.json").exists()
    host = SnapshotHost(root)
    run = read_run(host, run_ids(host)[0])
    assert run is not None and run.outcome == "boot-rolled-back"


@pytest.mark.slow
def test_reboot_phase_over_ssh_then_verify_after_a_manual_reboot(
    tmp_path: Path, start_lab: StartLab, saved_default: Path
) -> None:
    remote = copy_host(saved_default, tmp_path / "remote")
    local = copy_host(saved_default, tmp_path / "local")
    lab = start_lab({"h1": remote})
    code, out, err = tune(lab, "apply", BLACKWELL, "-y", "-H", "h1")
    assert (code, err) == (0, ""), out
    assert "then run `tune verify -H h1`" in out
    # The same files, pending record and journal records as a local snapshot apply.
    result = run_tune("apply", BLACKWELL, "-y", "--root", local, "--no-probes")
    assert result.code == 0, result.err
    mine, theirs = tree(remote), tree(local)
    for path in (*BOOT_FILES, "var/lib/tune/profile.yaml"):
        assert mine.get(path) == theirs.get(path), path
    pending = json.loads((remote / "var/lib/tune/pending.json").read_text())
    assert pending["expected"]["cmdline"] == {"processor.max_cstate": "1", "amd_pstate": "active"}
    assert pending["promote"] == []

    code, _, err = tune_plain(lab, "verify", "-H", "h1")
    assert code == 10 and "has not rebooted since run" in err
    reboot(remote)
    code, out, err = tune_plain(lab, "verify", "-H", "h1")
    assert (code, err) == (0, ""), out
    assert "ok  /proc/cmdline has processor.max_cstate=1" in out
    assert not (remote / "var/lib/tune/pending.json").exists()


@pytest.mark.slow
def test_arm_over_ssh_a_reboot_by_someone_else_then_verify_promotes(
    tmp_path: Path, start_lab: StartLab, saved_default: Path
) -> None:
    root = copy_host(saved_default, tmp_path / "h1")
    boot_id = (root / "proc/sys/kernel/random/boot_id").read_text()
    lab = start_lab({"h1": root})
    # As an engine runs it: the live settings now, the boot configuration armed for its reboot
    # (verify holds the runtime part too).
    code, out, err = tune(lab, "apply", BLACKWELL, "--runtime-only", "-y", "-H", "h1")
    assert (code, err) == (0, ""), out
    before = lab.exec_requests()["h1"]
    code, out, err = tune(lab, "apply", BLACKWELL, "--reboot-phase", "--arm", "-y", "-H", "h1")
    assert (code, err) == (0, ""), out
    armed = lab.exec_requests()["h1"] - before
    assert "Armed " in out and "`tune verify -H h1`" in out
    pending = json.loads((root / "var/lib/tune/pending.json").read_text())
    assert (pending["armed"], pending["try_once"]) == (True, "grub-reboot")
    status = json.loads((root / "var/lib/tune/status.json").read_text())
    assert (status["armed"], status["updated_by"]) == (True, "apply")
    assert (root / "proc/sys/kernel/random/boot_id").read_text() == boot_id  # not rebooted
    assert not (root / fmt.DROPIN.lstrip("/")).exists()

    code, _, err = tune_plain(lab, "verify", "-H", "h1")
    assert code == 10 and "has not rebooted since run" in err
    status = json.loads((root / "var/lib/tune/status.json").read_text())
    assert status["last_verification"]["verdict"] == "not-rebooted"

    # Someone else reboots it: GRUB boots the try entry, once.
    line = entry_cmdline((root / fmt.TRY_SCRIPT.lstrip("/")).read_bytes())
    write(root, fmt.PROC_CMDLINE, f"BOOT_IMAGE=/vmlinuz {line}\n")
    write(root, "/proc/sys/kernel/random/boot_id", "00000000-0000-4000-8000-000000000002\n")
    before = lab.exec_requests()["h1"]
    code, out, err = tune_plain(lab, "verify", "-H", "h1")
    assert (code, err) == (0, ""), out + err
    verified = lab.exec_requests()["h1"] - before
    assert "The new boot configuration is now the default." in out
    assert (root / fmt.DROPIN.lstrip("/")).exists()
    assert not (root / fmt.TRY_SCRIPT.lstrip("/")).exists()
    assert not (root / "var/lib/tune/pending.json").exists()
    code, out, err = tune_plain(lab, "status", "-H", "h1", "--format", "json")
    assert (code, err) == (0, ""), out
    status = json.loads(out)
    assert status["last_verification"]["verdict"] == "held"
    assert status["last_verification"]["boot_id"] == "00000000-0000-4000-8000-000000000002"
    assert (status["reboot_pending"], status["armed"]) == (False, False)
    # Round trips: the status rides in the run's script and in pending.json's removal.
    assert (armed, verified) == (ARMED_TRIPS, VERIFY_TRIPS), (armed, verified)


def test_reboot_without_a_one_time_boot_says_so_and_still_reboots(
    tmp_path: Path, start_lab: StartLab, saved_default: Path
) -> None:
    root = copy_host(saved_default, tmp_path / "h1")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=saved", "GRUB_DEFAULT=0"))
    lab = start_lab({"h1": root})
    code, out, err = tune(
        lab, "apply", BLACKWELL, "--reboot", "--reboot-timeout", "5", "-y",
        "-H", "h1",
    )  # fmt: skip
    # No try entry, so the emulated boot keeps the running line: verification fails, exit 3.
    assert "Reboot: not try-once: GRUB_DEFAULT is '0', not 'saved'" in out
    assert code == 3 and "/proc/cmdline has nothing, not processor.max_cstate=1" in err


# Prints the running processor.max_cstate (9 when the kernel was booted without it), read on
# the target: the lab runs probes there with TUNE_ROOT naming the host's snapshot.
CSTATE = [
    "sh",
    "-c",
    'c=$(grep -o "processor.max_cstate=[0-9]*" "$TUNE_ROOT/proc/cmdline");'
    ' c=${c#*=}; echo "cstate: ${c:-9}"',
]


def probed_boot(tmp_path: Path, better: str) -> tuple[Path, Path]:
    """A GRUB host (GRUB_DEFAULT=saved) and a profile adding processor.max_cstate=1, with a
    probe whose reading changes at the boot that brings it."""
    root = build(
        tmp_path / "h1",
        SmallHost(
            etc={
                "etc/default/grub": 'GRUB_DEFAULT=saved\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n',
                "proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n",
            }
        ),
    )
    probe = {"run": CSTATE, "metric": r"cstate: ([0-9]+)", "better": better}
    profile = write_profile(
        tmp_path / "p.yaml",
        {
            "cmdline": {"set": {"processor.max_cstate": 1}},
            "probes": {"cstate": {**probe, "gate": {"regress_max": "5%"}}},
        },
    )
    return root, profile


def after_boot_readings(root: Path) -> list[float]:
    host = SnapshotHost(root)
    run = read_run(host, run_ids(host)[0])
    assert run is not None
    return [
        result["median"]
        for r in (r.to_json() for r in run.records)
        if r["type"] == "probes" and r.get("when") == "after-boot"
        for result in r["results"]
    ]


def test_reboot_over_ssh_measures_the_probes_after_the_boot(
    tmp_path: Path, start_lab: StartLab
) -> None:
    root, profile = probed_boot(tmp_path, better="lower")
    lab = start_lab({"h1": root})
    code, out, err = tune_plain(lab, "apply", profile, "--reboot", "-y", "-H", "h1")
    assert (code, err) == (0, ""), out + err
    assert "The new boot configuration is now the default." in out
    assert after_boot_readings(root) == [1.0]
    host = SnapshotHost(root)
    run = read_run(host, run_ids(host)[0])
    assert run is not None and run.outcome == "applied"


def test_a_gate_failing_after_the_boot_over_ssh_rolls_the_boot_back(
    tmp_path: Path, start_lab: StartLab
) -> None:
    root, profile = probed_boot(tmp_path, better="higher")
    before = tree(root)
    lab = start_lab({"h1": root})
    code, out, err = tune_plain(lab, "apply", profile, "--reboot", "-y", "-H", "h1")
    assert code == 3, out + err
    assert "probe gate failed: cstate: 9 -> 1" in err
    assert after_boot_readings(root) == [1.0]
    after = tree(root)
    for path in ("etc/default/grub", "etc/grub.d/42_tune_try", "etc/default/grub.d/90-tune.cfg"):
        assert after.get(path) == before.get(path), path
    assert not (root / "var/lib/tune/pending.json").exists()


@pytest.mark.slow
def test_rollback_over_ssh_of_the_pending_run_clears_it_so_verify_has_nothing(
    tmp_path: Path, start_lab: StartLab, saved_default: Path
) -> None:
    root = copy_host(saved_default, tmp_path / "h1")
    before = boot_files(root)
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "apply", BLACKWELL, "-y", "-H", "h1")
    assert (code, err) == (0, ""), out
    assert (root / "var/lib/tune/pending.json").exists()
    code, out, err = tune_plain(lab, "rollback", "--yes", "-H", "h1")
    assert (code, err) == (0, ""), out
    assert boot_files(root) == before
    assert not (root / "var/lib/tune/pending.json").exists()
    code, out, err = tune_plain(lab, "verify", "-H", "h1")
    assert (code, err) == (
        0,
        "",
    ) and "Nothing to verify on ssh h1: no reboot-phase apply pending" in out


@pytest.mark.slow
def test_rollback_over_ssh_of_an_older_run_keeps_the_pending_one(
    tmp_path: Path, start_lab: StartLab, saved_default: Path
) -> None:
    root = copy_host(saved_default, tmp_path / "h1")
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "apply", BLACKWELL, "--runtime-only", "-y", "-H", "h1")
    assert code == 0, out + err
    code, out, err = tune(lab, "apply", BLACKWELL, "--reboot-phase", "-y", "-H", "h1")
    assert (code, err) == (0, ""), out
    pending = (root / "var/lib/tune/pending.json").read_bytes()
    first = run_ids(SnapshotHost(root))[0]
    code, out, err = tune_plain(lab, "rollback", "--yes", first, "-H", "h1")
    assert (code, err) == (0, ""), out
    assert (root / "var/lib/tune/pending.json").read_bytes() == pending


def test_reboot_over_ssh_with_systemd_boot_boots_the_try_entry_once_and_promotes(
    tmp_path: Path, start_lab: StartLab, saved_default: Path
) -> None:
    root = copy_host(saved_default, tmp_path / "h1")
    (root / "etc/default/grub").unlink()
    release = (root / "proc/sys/kernel/osrelease").read_text().strip()
    write(root, "/etc/kernel/cmdline", "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet\n")
    write(root, "/etc/kernel/proxmox-boot-uuids", "ABCD-1234\n")
    booted_by_systemd_boot(root)
    write(root, "/boot/efi/loader/loader.conf", "timeout 3\n")
    default = f"boot/efi/loader/entries/proxmox-{release}.conf"
    write(
        root,
        default,
        f"title Proxmox VE\nlinux /EFI/proxmox/{release}/vmlinuz-{release}\n"
        "options root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet\n",
    )
    entry_before = (root / default).read_bytes()
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "apply", BLACKWELL, "--reboot", "-y", "-H", "h1")
    assert (code, err) == (0, ""), out
    assert "Reboot: try-once: bootctl set-oneshot boots the new command line once" in out
    assert "The new boot configuration is now the default." in out
    new_line = "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active processor.max_cstate=1"
    assert (root / "proc/cmdline").read_text() == new_line + "\n"
    assert (root / "etc/kernel/cmdline").read_text() == new_line + "\n"
    assert not (root / "boot/efi/loader/entries/tune-try.conf").exists()
    assert (root / default).read_bytes() == entry_before  # proxmox-boot-tool refresh rewrites it
    host = SnapshotHost(root)
    (run_id,) = run_ids(host)
    run = read_run(host, run_id)
    assert run is not None and run.outcome == "applied"
    deferred = [r["argv"] for r in (r.to_json() for r in run.records) if r["type"] == "deferred"]
    assert deferred[0] == ["bootctl", "set-oneshot", "tune-try.conf"]
    assert deferred[1:] == [["proxmox-boot-tool", "refresh"]] * (len(deferred) - 1)


def test_a_pending_record_that_cannot_be_written_rolls_the_run_back_over_ssh(
    tmp_path: Path, start_lab: StartLab, saved_default: Path
) -> None:
    """As on this machine: pending.json is written inside the run, before its end."""
    root = copy_host(saved_default, tmp_path / "h1")
    block_pending(root)
    before = tree(root)
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "apply", BLACKWELL, "--reboot-phase", "-y", "-H", "h1")
    assert code == 3, out + err
    assert "apply failed (/var/lib/tune/pending.json: cannot write" in err
    assert "rolled back" in err
    assert tree(root) == before
    assert not (root / "var/lib/tune/profile.yaml").exists()
    host = SnapshotHost(root)
    run = read_run(host, run_ids(host)[0])
    assert run is not None and run.outcome == "rolled-back"


def test_what_the_promotion_needs_is_checked_before_the_first_write_over_ssh(
    tmp_path: Path, start_lab: StartLab, saved_default: Path
) -> None:
    """The steps that make the command line the default after the boot are part of the run:
    their requirements are checked with the run's own, before anything is written (not
    found only after a reboot into a configuration that cannot be kept)."""
    root = copy_host(saved_default, tmp_path / "h1")
    dropins = root / "etc/default/grub.d"
    dropins.mkdir(exist_ok=True)
    dropins.chmod(0o555)
    before = tree(root)
    lab = start_lab({"h1": root})
    code, out, err = tune(lab, "apply", BLACKWELL, "--reboot", "-y", "-H", "h1")
    assert code == 1, out + err
    assert "cmdline:amd_pstate cannot be changed: /etc/default/grub.d is read-only" in err
    assert tree(root) == before
    assert run_ids(SnapshotHost(root)) == []
