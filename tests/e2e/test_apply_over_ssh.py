"""`tune apply --runtime-only`, `tune check`, `tune history` and `tune rollback` on a real kernel,
all through `tune -H tune-e2e` over SSH (issue 9, points 3, 5, 6 and 7). Point 2, runtime values
that hold across a reboot, shares its reboot with point 4 in test_reboot_phase.py.

Each test leaves the guest as it found it: a run that applied is rolled back with
`tune rollback -H` (which also deletes tune's boot-time files and the stored profile).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import guest
from .over_ssh import STATE, apply, history, nvme_select, plan_json, tune, write_profile
from .vm import Vm

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.usefixtures("clean_state")
def test_apply_max_read_request_mismatch_rolls_back_the_whole_run(vm: Vm, tmp_path: Path) -> None:
    """QEMU's NVMe keeps its MaxReadReq: the read-back after setpci differs, every change of the
    run is rolled back, exit 3, and the plan afterwards equals the plan before; the masked
    write leaves the other Device Control bits as they were."""
    (nvme,) = guest.pci_functions(vm, guest.QEMU_NVME)
    profile = write_profile(
        tmp_path,
        f"""\
name: e2e-mrrs
sysctl:
  vm.swappiness: 11
  vm.dirty_ratio: 7
modules:
  dummy: loaded
pci:
  - select: {nvme_select()}
    max_read_request: 4096
""",
    )
    before = plan_json(vm, profile)
    control_before = guest.device_control(vm, nvme)
    lspci_before = vm.run("lspci", "-vvv", "-s", nvme).stdout
    assert {c["id"] for c in before["changes"]} >= {
        "sysctl:vm.swappiness",
        "sysctl:vm.dirty_ratio",
        "module:dummy",
        f"pci:{nvme}:max_read_request",
    }

    result = apply(vm, profile)

    assert result.code == 3, result.out + result.err
    assert f"pci:{nvme}:max_read_request" in result.err
    assert "reads back" in result.err and "rolled back" in result.err
    after = plan_json(vm, profile)
    assert after == before
    assert guest.device_control(vm, nvme) == control_before
    assert vm.run("lspci", "-vvv", "-s", nvme).stdout == lspci_before
    (run,) = history(vm)
    assert run["outcome"] == "rolled-back"
    assert vm.run("test", "-e", f"{STATE}/profile.yaml", check=False).returncode == 1


@pytest.mark.usefixtures("clean_state")
def test_check_is_clean_after_apply_and_reports_drift(vm: Vm, tmp_path: Path) -> None:
    """`tune check`: 0 right after apply; 2 once a `sysctl -w` changed a knob behind tune's
    back, naming that knob; against the profile the apply stored as well."""
    profile = write_profile(
        tmp_path, "name: e2e-check\nsysctl:\n  vm.swappiness: 12\n  vm.dirty_ratio: 8\n"
    )
    applied = apply(vm, profile)
    assert applied.code == 0, applied.err
    try:
        clean = tune(vm, "check", profile)
        assert clean.code == 0, clean.out + clean.err
        assert tune(vm, "check").code == 0  # the stored profile

        vm.run("sysctl", "-w", "vm.swappiness=33")

        drift = tune(vm, "check", profile, "--quiet")
        assert drift.code == 2, drift.out + drift.err
        assert "vm.swappiness" in drift.out and "vm.dirty_ratio" not in drift.out
        assert tune(vm, "check").code == 2
    finally:
        assert tune(vm, "rollback", "--yes").code == 0


# Integer sysctls of the neighbour tables of `lo` and of new interfaces: writing them disturbs
# nothing, and none is derived from another (unlike base_reachable_time and its _ms twin).
NEIGH_KEYS = (
    "app_solicit",
    "mcast_solicit",
    "mcast_resolicit",
    "ucast_solicit",
    "delay_first_probe_time",
    "gc_stale_time",
    "proxy_qlen",
)


def many_knobs(vm: Vm) -> dict[str, str]:
    """Thirty-odd sysctls and a value for each that differs from the guest's."""
    keys = [
        f"net.{family}.neigh.{device}.{name}"
        for family in ("ipv4", "ipv6")
        for device in ("default", "lo")
        for name in NEIGH_KEYS
    ]
    out = vm.sh("sysctl -n " + " ".join(keys)).stdout.split()
    return {key: str(int(value) + 1) for key, value in zip(keys, out, strict=True)}


def wait_for_a_step(vm: Vm, journal_dir: str) -> None:
    """Until a run journal in `journal_dir` records its first step (the writes have begun)."""
    vm.sh(
        f'until grep -qs \'"type":"step"\' {journal_dir}/*.jsonl; do sleep 0.1; done',
        timeout=300,
    )


def cut_ssh(vm: Vm, journal_dir: str) -> str:
    """Remove the port forward (no new connection gets in), then kill every SSH session but the
    one this runs in (the harness's): tune's connection dies from the guest's side. Returns the
    run journal's last line at that moment."""
    vm.monitor(f"hostfwd_remove n0 tcp:127.0.0.1:{vm.port}")
    script = f"""
keep=" $$ "; p=$$
while [ "$p" -gt 1 ]; do p=$(awk '{{print $4}}' /proc/$p/stat); keep="$keep$p "; done
for p in $(pgrep -f '^sshd: root'); do
    case "$keep" in *" $p "*) ;; *) kill -9 "$p" 2>/dev/null ;; esac
done
tail -n 1 {journal_dir}/*.jsonl
"""
    return vm.sh(script).stdout.strip()


@pytest.mark.usefixtures("clean_state")
def test_connection_cut_mid_apply_ends_fully_applied_or_fully_rolled_back(
    vm: Vm, tmp_path: Path
) -> None:
    """SSH cut while the apply runs: the guest finishes the run on its own (or rolls it back),
    never half, and `tune history` says which once SSH is back."""
    desired = many_knobs(vm)
    prior = {key: str(int(value) - 1) for key, value in desired.items()}
    lines = "".join(f"  {key}: {value}\n" for key, value in desired.items())
    profile = write_profile(tmp_path, f"name: e2e-cut\nsysctl:\n{lines}")
    argv = [sys.executable, "-m", "reconciler.cli", "apply", str(profile), "--runtime-only"]
    argv += ["--yes", "-H", "tune-e2e", "--ssh-config", str(vm.ssh_config)]
    tune_apply = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for_a_step(vm, f"{STATE}/runs")
        at_cut = cut_ssh(vm, f"{STATE}/runs")
        out, err = tune_apply.communicate(timeout=300)
    finally:
        if tune_apply.poll() is None:
            tune_apply.kill()
        vm.monitor(f"hostfwd_add n0 tcp:127.0.0.1:{vm.port}-:22")

    assert '"type":"end"' not in at_cut, "the run ended before the cut: nothing was proven"
    assert tune_apply.returncode != 0, out
    assert "tune history -H tune-e2e" in err, err
    deadline = time.monotonic() + 300
    while (runs := history(vm)) and runs[0]["outcome"] == "interrupted":
        assert time.monotonic() < deadline, runs
        time.sleep(2)
    (run,) = runs
    now = dict(zip(desired, vm.sh("sysctl -n " + " ".join(desired)).stdout.split(), strict=True))
    if run["outcome"] == "applied":
        assert now == desired
        assert tune(vm, "rollback", "--yes").code == 0
    else:
        assert run["outcome"] == "rolled-back", run
    final = dict(zip(desired, vm.sh("sysctl -n " + " ".join(desired)).stdout.split(), strict=True))
    assert final == prior


@pytest.mark.usefixtures("clean_state")
def test_knob_the_kernel_refuses_is_unsupported_and_optional_entries_still_apply(
    vm: Vm, tmp_path: Path
) -> None:
    """`kernel.nmi_watchdog` refuses every write with errno 524 under TCG: without
    `optional: true` the run rolls back (exit 3) saying so in one line; with it, the rest
    applies, the knob is journaled as skipped, and neither plan nor check counts it as drift."""
    if vm.accel.name != "tcg":
        pytest.skip(f"errno 524 is what TCG gives; this VM runs under {vm.accel.name}")
    wanted = "1" if guest.sysctl(vm, "kernel.nmi_watchdog") == "0" else "0"
    swappiness = guest.sysctl(vm, "vm.swappiness")
    required = write_profile(
        tmp_path,
        f"name: e2e-nmi\nsysctl:\n  vm.swappiness: 13\n  kernel.nmi_watchdog: {wanted}\n",
        "required.yaml",
    )
    optional = write_profile(
        tmp_path,
        "name: e2e-nmi\nsysctl:\n  vm.swappiness: 13\n"
        f"  kernel.nmi_watchdog: {{value: {wanted}, optional: true}}\n",
        "optional.yaml",
    )
    refusal = f"/proc/sys/kernel/nmi_watchdog: the kernel refused '{wanted}' (Unknown error 524)"

    failed = apply(vm, required)

    assert failed.code == 3, failed.out + failed.err
    assert f"sysctl:kernel.nmi_watchdog is not supported on this host: {refusal};" in failed.err
    assert guest.sysctl(vm, "vm.swappiness") == swappiness
    assert [run["outcome"] for run in history(vm)] == ["rolled-back"]

    done = apply(vm, optional)
    try:
        assert done.code == 0, done.out + done.err
        skipped = [line for line in done.out.splitlines() if "not supported" in line]
        assert skipped == [
            "sysctl:kernel.nmi_watchdog is not supported on this host, skipped (optional): "
            f"{refusal}."
        ]
        assert guest.sysctl(vm, "vm.swappiness") == "13"
        check = tune(vm, "check", optional)
        assert check.code == 0, check.out + check.err
        assert "not supported on this host" in check.out
        notes = plan_json(vm, optional)["notes"]
        assert any(refusal in n["message"] for n in notes), notes
    finally:
        assert tune(vm, "rollback", "--yes").code == 0
    assert guest.sysctl(vm, "vm.swappiness") == swappiness
