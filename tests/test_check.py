"""`tune check` on copies of the tuned example host with drift injected: what cron and
monitoring see (exit codes, quiet lines, JSON), the stored profile and the run journal."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from applied_state import FINISHED, RUN_ID, journal, write_applied, write_run
from conftest import BLACKWELL, profile, run_tune, write

from reconciler.core.errors import ExitCode
from reconciler.drift.first_seen import RECORD as FIRST_SEEN
from reconciler.facts import pcie
from reconciler.steps.status import STATUS

# The clock of every check here: the first sighting of a drift is when a check first saw it.
NOW = datetime(2025, 6, 2, 6, 30, tzinfo=UTC)
SINCE = " since 2025-06-02T06:30:00Z"
CPUS = "/sys/devices/system/cpu"
LXC = "/etc/pve/lxc/101.conf"


@pytest.fixture(autouse=True)
def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", NOW.timestamp)


def check(root: Path, *args: str | Path, profile_path: Path | None = BLACKWELL):
    before = tree_digest(root)
    result = run_tune("check", *([profile_path] if profile_path else []), "--root", root, *args)
    assert tree_digest(root) == before, "tune check writes nothing but its own two records"
    return result


def tree_digest(root: Path) -> str:
    """Every file of the host but check's own records: first sightings and status.json."""
    digest = hashlib.sha256()
    records = {root / FIRST_SEEN.lstrip("/"), root / STATUS.lstrip("/")}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path not in records:
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def edit(root: Path, path: str, old: str, new: str) -> None:
    target = root / path.lstrip("/")
    text = target.read_text()
    assert old in text, f"{old!r} not in {path}"
    target.write_text(text.replace(old, new))


# One drift per knob kind: how to inject it into the tuned host, and the quiet line it gives.
def sysctl_drift(root: Path) -> None:
    write(root, "/proc/sys/kernel/numa_balancing", "1\n")


def sysfs_drift(root: Path) -> None:
    write(root, "/sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n")


def governor_drift(root: Path) -> None:
    write(root, f"{CPUS}/cpu5/cpufreq/scaling_governor", "schedutil\n")


def idle_drift(root: Path) -> None:
    # C2 is back on cpu7 (booted without processor.max_cstate=1) and enabled.
    write(root, f"{CPUS}/cpu7/cpuidle/state2/name", "C2\n")
    write(root, f"{CPUS}/cpu7/cpuidle/state2/disable", "0\n")


def module_drift(root: Path) -> None:
    edit(root, "/proc/modules", "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n", "")


def pci_drift(root: Path) -> None:
    config = root / "sys/bus/pci/devices/0000:41:00.0/config"
    config.write_bytes(pcie.with_max_read_request(config.read_bytes(), 512))


def cmdline_drift(root: Path) -> None:
    # Someone dropped amd_pstate from GRUB: the running kernel has it, the next boot will not.
    edit(root, "/etc/default/grub.d/90-tune.cfg", " amd_pstate=active", "")


def memlock_drift(root: Path) -> None:
    edit(root, LXC, "lxc.prlimit.memlock: unlimited", "lxc.prlimit.memlock: 65536")


def devices_drift(root: Path) -> None:
    edit(root, LXC, "lxc.cgroup2.devices.allow: c 511:* rwm\nlxc.prlimit", "lxc.prlimit")


DRIFTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "sysctl": (sysctl_drift, "DRIFT sysctl kernel.numa_balancing: 1 (want 0)"),
    "sysfs": (
        sysfs_drift,
        "DRIFT sysfs /sys/kernel/mm/transparent_hugepage/enabled: always (want madvise)",
    ),
    "cpu-governor": (governor_drift, "DRIFT cpu cpu5:governor: schedutil (want performance)"),
    "cpu-idle": (idle_drift, "DRIFT cpu cpu7:idle:C2: enabled (want disabled)"),
    # C2 exposed again means the boot-time file must disable it too: that is drift as well.
    "cpu-idle-persisted": (
        idle_drift,
        "DRIFT file /etc/tmpfiles.d/tune.conf: 3 lines (want 4 lines)",
    ),
    "module": (module_drift, "DRIFT module nvidia_peermem: absent (want loaded)"),
    "pci": (pci_drift, "DRIFT pci 0000:41:00.0:max_read_request: 512 (want 4096)"),
    "cmdline": (cmdline_drift, "DRIFT cmdline amd_pstate: (absent) (want active)"),
    "lxc-memlock": (memlock_drift, "DRIFT lxc 101:lxc.prlimit.memlock: 65536 (want unlimited)"),
    "lxc-devices": (
        devices_drift,
        "DRIFT lxc 101:lxc.cgroup2.devices.allow: [c 195:* rwm, c 508:* rwm] "
        "(want [c 195:* rwm, c 508:* rwm, c 511:* rwm])",
    ),
}


def test_tuned_host_is_in_sync_and_quiet_prints_nothing(tuned: Path) -> None:
    quiet = check(tuned, "--quiet")
    assert (quiet.code, quiet.out, quiet.err) == (0, "", "")
    loud = check(tuned)
    assert loud.code == 0
    assert (
        loud.out.splitlines()[-1]
        == "In sync: 29 entries (241 knobs); 11 of 11 checks pass; 0 pending reboot."
    )
    assert "DRIFT" not in loud.out


@pytest.mark.parametrize("kind", DRIFTS)
def test_drift_of_each_kind_alone(tuned: Path, kind: str) -> None:
    inject, line = DRIFTS[kind]
    inject(tuned)
    result = check(tuned, "--quiet")
    assert result.code == 2
    same_injection = [ln + SINCE for inj, ln in DRIFTS.values() if inj is inject]
    assert result.out.splitlines() == same_injection
    assert line + SINCE in same_injection
    assert result.err == ""


def test_drift_of_every_kind_at_once(tuned: Path) -> None:
    for inject in dict.fromkeys(inj for inj, _ in DRIFTS.values()):
        inject(tuned)
    result = check(tuned, "--quiet")
    assert result.code == 2
    lines = result.out.splitlines()
    assert sorted(lines) == sorted(line + SINCE for _, line in DRIFTS.values())
    as_json = json.loads(check(tuned, "--format", "json").out)
    assert as_json["status"] == "drift"
    assert {d["kind"] for d in as_json["drift"]} == {
        "file",
        "sysctl",
        "sysfs",
        "cpu",
        "module",
        "pci",
        "cmdline",
        "lxc",
    }


def test_quiet_lines_say_since_the_first_sighting_not_the_last_apply(tuned: Path) -> None:
    write_applied(tuned)
    sysctl_drift(tuned)
    result = check(tuned, "--quiet")
    assert result.out == f"DRIFT sysctl kernel.numa_balancing: 1 (want 0){SINCE}\n"


def test_text_report_folds_cpus_and_names_the_last_apply(tuned: Path) -> None:
    write_applied(tuned)
    for cpu in range(4):
        write(tuned, f"{CPUS}/cpu{cpu}/cpufreq/scaling_governor", "schedutil\n")
    result = check(tuned)
    assert result.code == 2
    assert f"Last apply: {FINISHED} (run {RUN_ID}, phase all)" in result.out
    assert f"DRIFT cpu governor on 4 CPUs (cpu0-3): schedutil (want performance){SINCE}" in (
        result.out
    )
    assert result.out.splitlines()[-1] == (
        "Drift: 1 of 29 entries (4 of 241 knobs); 11 of 11 checks pass; 0 pending reboot."
    )


def test_failed_audit_check_is_reported_and_drift_only_when_strict(tuned: Path) -> None:
    # tune cannot upgrade a kernel: paging for it every five minutes helps nobody.
    write(tuned, "/proc/sys/kernel/osrelease", "6.8.12-9-pve\n")
    quiet = check(tuned, "--quiet")
    assert (quiet.code, quiet.out) == (0, "")
    loud = check(tuned)
    assert loud.code == 0
    assert f"FAIL check kernel: 6.8.12-9-pve (want >=6.14){SINCE}\n" in loud.out
    assert json.loads(check(tuned, "--format", "json").out)["status"] == "failing-checks"
    strict = check(tuned, "--quiet", "--strict")
    assert strict.code == 2
    assert strict.out == f"FAIL check kernel: 6.8.12-9-pve (want >=6.14){SINCE}\n"


def test_pending_reboot_is_reported_not_drift(tuned: Path) -> None:
    # tune configured amd_pstate=active in GRUB, but the host has not rebooted since.
    edit(tuned, "/proc/cmdline", " amd_pstate=active", "")
    quiet = check(tuned, "--quiet")
    assert (quiet.code, quiet.out) == (0, "")
    loud = check(tuned)
    assert loud.code == 0
    assert (
        "PENDING cmdline amd_pstate: running (absent), next boot active (reboot to apply)"
        in loud.out
    )
    assert "1 pending reboot" in loud.out.splitlines()[-1]
    pending = json.loads(check(tuned, "--format", "json").out)["pending"]
    assert [p["id"] for p in pending] == ["cmdline:amd_pstate"]


def move_majors(root: Path) -> None:
    """A kernel upgrade: the dynamic NVIDIA majors come up elsewhere."""
    edit(
        root,
        "/proc/devices",
        "508 nvidia-caps\n511 nvidia-uvm\n",
        "507 nvidia-caps\n510 nvidia-uvm\n",
    )


def test_majors_moved_after_kernel_upgrade(tuned: Path) -> None:
    write_applied(tuned)
    move_majors(tuned)
    result = check(tuned, "--since-apply")
    assert result.code == 2
    assert (
        "DRIFT lxc 101:lxc.cgroup2.devices.allow: [c 195:* rwm, c 508:* rwm, c 511:* rwm] "
        f"(want [c 195:* rwm, c 507:* rwm, c 510:* rwm]){SINCE}\n"
    ) in result.out
    assert "nvidia-uvm is now major 510; /etc/pve/lxc/101.conf does not allow it." in result.out
    # Nobody touched the config: it is still what tune wrote; the host moved under it.
    assert "changed after apply" not in result.out.replace("0 changed after apply", "")
    drift = json.loads(check(tuned, "--since-apply", "--format", "json").out)["drift"]
    assert [(d["id"], d["since_apply"]) for d in drift] == [
        ("lxc:101:lxc.cgroup2.devices.allow", "as-applied")
    ]


def test_since_apply_names_knobs_changed_after_tune_wrote_them(tuned: Path) -> None:
    write_applied(tuned)
    sysctl_drift(tuned)
    result = check(tuned, "--since-apply", "--quiet")
    assert result.code == 2
    assert result.out == (
        f"DRIFT sysctl kernel.numa_balancing: 1 (want 0){SINCE}; "
        "changed after apply (tune wrote 0)\n"
    )
    report = json.loads(check(tuned, "--since-apply", "--format", "json").out)
    assert report["changed_after_apply"] == [
        {
            "id": "sysctl:kernel.numa_balancing",
            "kind": "sysctl",
            "target": "kernel.numa_balancing",
            "current": "1",
            "written": "0",
            "shown": {"current": "1", "written": "0"},
            "first_seen": SINCE.removeprefix(" since "),
        }
    ]
    assert report["drift"][0]["since_apply"] == "changed-after-apply"
    assert report["last_apply"] == {
        "run_id": RUN_ID,
        "profile": "blackwell-8x",
        "phase": "all",
        "finished": FINISHED,
        "steps": 240,
    }


def test_since_apply_is_drift_even_where_the_profile_now_agrees(
    tuned: Path, tmp_path: Path
) -> None:
    # Someone set numa_balancing back to 1 and edited the profile to match, without applying.
    write_applied(tuned)
    sysctl_drift(tuned)
    edited = profile(
        tmp_path,
        BLACKWELL.read_text().replace("extends: base-gpu-inference.yaml", "")
        + "sysctl:\n  kernel.numa_balancing: 1\n",
    )
    # tune's boot-time files would differ too (the edited profile was never applied): not the
    # point here, so leave them out.
    assert check(tuned, "--quiet", "--no-persist", profile_path=edited).code == 0
    result = check(tuned, "--quiet", "--since-apply", "--no-persist", profile_path=edited)
    assert result.code == 2
    assert result.out == f"CHANGED sysctl kernel.numa_balancing: 1 (tune wrote 0){SINCE}\n"


def test_since_apply_uses_the_newest_run_that_applied(tuned: Path) -> None:
    write_applied(tuned)
    sysctl_drift(tuned)
    # A later run rolled back, and a later one still was interrupted mid-record.
    write_run(
        tuned,
        run_id="20250602T080000Z-0000aa",
        outcome="rolled-back",
        finished="2025-06-02T08:00:09Z",
    )
    cut = journal(run_id="20250603T080000Z-0000bb", outcome=None)
    write(tuned, "/var/lib/tune/runs/20250603T080000Z-0000bb.jsonl", cut + '{"type": "wri')
    result = check(tuned, "--quiet", "--since-apply")
    assert result.out.startswith(f"DRIFT sysctl kernel.numa_balancing: 1 (want 0){SINCE};")


def test_a_journal_past_the_kernel_file_cap_is_read_whole(tuned: Path) -> None:
    steps = tuple(
        {
            "id": f"sysctl:x.y{n}",
            "kind": "sysctl",
            "target": f"x.y{n}",
            "current": "0",
            "desired": "1" * 200,
        }
        for n in range(400)
    )
    path = write_applied(tuned, steps=steps)
    assert path.stat().st_size > 1 << 16
    result = check(tuned, "--since-apply", "--format", "json")
    assert json.loads(result.out)["last_apply"]["steps"] == 400


def test_a_corrupt_journal_fails_since_apply_and_is_a_note_otherwise(tuned: Path) -> None:
    write_applied(tuned)
    write(tuned, "/var/lib/tune/runs/20250609T000000Z-ffffff.jsonl", "{not json\n{}\n")
    failed = check(tuned, "--since-apply")
    assert failed.code == ExitCode.JOURNAL
    assert failed.err == (
        "/var/lib/tune/runs/20250609T000000Z-ffffff.jsonl:1: not a JSON record "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); "
        "the journal is damaged from there on.\n"
        "No step is recorded before the damage: tune cannot roll back any change of this run.\n"
    )
    plain = check(tuned)
    assert plain.code == 0
    assert "Drift is shown without the time of the last apply." in plain.out


def test_without_profile_checks_against_the_stored_one(tuned: Path) -> None:
    write_applied(tuned)
    assert check(tuned, "--quiet", profile_path=None).code == 0
    sysctl_drift(tuned)
    result = check(tuned, "--quiet", profile_path=None)
    assert (result.code, result.out) == (
        2,
        f"DRIFT sysctl kernel.numa_balancing: 1 (want 0){SINCE}\n",
    )


def test_without_profile_and_nothing_applied_cannot_check(tuned: Path) -> None:
    result = check(tuned, profile_path=None)
    assert result.code == 1
    assert result.err == (
        f"snapshot {tuned}: no profile has been applied here (/var/lib/tune/profile.yaml does "
        "not exist); give PROFILE to check against.\n"
    )


def test_unreadable_stored_profile_cannot_check(tuned: Path) -> None:
    target = tuned / "var/lib/tune/profile.yaml"
    target.parent.mkdir(parents=True)
    target.symlink_to(tuned / "nowhere")  # exists as a name, fails to open, even for root
    result = check(tuned, profile_path=None)
    assert result.code == 1
    assert result.err.startswith("/var/lib/tune/profile.yaml: cannot read the applied profile (")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name: x\nsysctl:\n  kernel.numa_balancing: {value: 0, prio: P0}\n",
            "3:37: unknown key 'prio'; did you mean 'priority'?",
        ),
        (
            "name: x\nextends: base.yaml\n",
            "2:1: a stored profile is already resolved; extends is not allowed",
        ),
        ("name: x\nsysctl: [\n", "3:1: YAML syntax error"),
    ],
)
def test_invalid_stored_profile_points_at_the_host_file(
    tuned: Path, text: str, message: str
) -> None:
    write_applied(tuned, profile_text=text)
    result = check(tuned, profile_path=None)
    assert result.code == 65
    assert result.err.startswith(f"{tuned}/var/lib/tune/profile.yaml:{message}")


def test_exit_codes(tuned: Path, tmp_path: Path) -> None:
    assert check(tuned).code == 0
    sysctl_drift(tuned)
    assert check(tuned).code == 2
    assert run_tune("check", BLACKWELL, "--root", tmp_path / "missing").code == 1
    bad = profile(tmp_path, "name: x\nsysctl: {kernel.numa_balancing: {vlaue: 0}}\n")
    assert check(tuned, profile_path=bad).code == 65
    assert run_tune("check", BLACKWELL, "--format", "yaml").code == 64


def test_quiet_json_prints_nothing_in_sync(tuned: Path) -> None:
    assert check(tuned, "--quiet", "--format", "json").out == ""
    sysctl_drift(tuned)
    assert json.loads(check(tuned, "--quiet", "--format", "json").out)["status"] == "drift"


def test_check_reads_the_stored_profile_whole(tuned: Path) -> None:
    # A resolved profile past the 64 KiB cap on kernel files must not be cut mid-YAML.
    from applied_state import resolved_yaml

    write_applied(tuned, profile_text="# padding\n" * 8000 + resolved_yaml())
    assert os.path.getsize(tuned / "var/lib/tune/profile.yaml") > 1 << 16
    assert check(tuned, "--quiet", profile_path=None).code == 0


def test_fleet_table_counts_drift_not_what_was_never_applied(tuned: Path) -> None:
    from dataclasses import replace

    from reconciler.drift.check import run_check
    from reconciler.hosts.directory import SnapshotHost
    from reconciler.hosts.fleet import HostResult
    from reconciler.render.check import fleet

    sysctl_drift(tuned)
    drifted = run_check(SnapshotHost(tuned), str(BLACKWELL), since_apply=False)
    never = replace(drifted, unapplied=frozenset({"sysctl:kernel.numa_balancing"}))
    table = fleet(
        [HostResult("a", drifted, None), HostResult("b", never, None)],
        "text",
        quiet=False,
        color=False,
    ).splitlines()
    assert table[0].split()[:4] == ["HOST", "STATUS", "DRIFT", "NOT"]
    assert table[1].split()[:4] == ["a", "drift", "1", "0"]
    assert table[2].split()[:5] == ["b", "not", "applied", "0", "1"]
    assert "1 drifted, 0 with failed checks, 1 not applied" in table[4]
    assert "== Report A, for 1 host: a" in table and "== Report B, for 1 host: b" in table
    assert "DRIFT sysctl kernel.numa_balancing: 1 (want 0)" in table
    assert "NOT APPLIED sysctl kernel.numa_balancing: 1 (want 0; " in "\n".join(table)


@pytest.mark.parametrize("strict", [False, True])
def test_a_fleet_check_s_summary_says_what_its_exit_code_does(tuned: Path, strict: bool) -> None:
    """Hosts whose only news is a failed audit check: exit 0 unless --strict, and the summary
    says so (it once counted them "with changes" and exited 0)."""
    from dataclasses import replace

    from reconciler.core.changes import CheckResult
    from reconciler.drift.check import run_check
    from reconciler.hosts.directory import SnapshotHost
    from reconciler.hosts.fleet import HostResult, fleet_exit_code
    from reconciler.render.check import fleet

    write_applied(tuned)
    clean = run_check(SnapshotHost(tuned), str(BLACKWELL), since_apply=False, strict=strict)
    failing = CheckResult("kernel", False, "6.8.12", ">=6.14", "install a kernel >=6.14")
    report = replace(clean, plan=replace(clean.plan, checks=(failing,)))
    results = [HostResult(f"h{n}", report, None) for n in range(3)]
    code = fleet_exit_code(results, lambda r: not r.needs_attention)
    out = fleet(results, "text", quiet=False, color=False)
    summary = "3 hosts: 0 drifted, 3 with failed checks, 0 not applied, 0 in sync, 0 unreachable"
    assert summary in out
    assert "changes" not in out.split("\n\n")[1]
    if strict:
        assert code == ExitCode.CHANGES
        assert "or failed; 3 need attention." in out
    else:
        assert code == ExitCode.IN_SYNC
        assert "none needs attention (failed checks do only with --strict)." in out
    assert out.count("FAIL check kernel: 6.8.12 (want >=6.14)") == 1, "one report for 3 hosts"
    assert "== Report A, for 3 hosts: h0, h1, h2" in out
