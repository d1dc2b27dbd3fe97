"""tune under a real Slurm 22.05 (Debian's slurmctld, slurmd and munge, on loopback): the health
check drains and resumes only what tune drained, the reboot program arms and asks for the reboot,
and a job with `-C tune_<profile>` reboots its node through the features helper.

The reboot program arms with tune's own `tune apply PROFILE --reboot-phase --arm`: the host's
GRUB boots the new line once (GRUB_DEFAULT=saved, grub-reboot); `tune verify` makes it the
default."""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import BLACKWELL, TUNED, copy_host, write
from slurm_cluster import NODE, Cluster, cluster

from reconciler.apply.pending import PENDING
from reconciler.engines.slurm import DRAIN_RECORD, REBOOT_RECORD
from reconciler.facts.cmdline import TRY_SCRIPT
from reconciler.hosts.emulate import REBOOT_ASKED
from reconciler.profile.load import load_profile
from reconciler.profile.source import shown
from reconciler.steps.state import LOCK

pytestmark = pytest.mark.slow

NUMA = "/proc/sys/kernel/numa_balancing"
COMPLETE = "new tuning : reboot issued : reboot complete"  # slurmctld's, after `reboot_by_slurm`


def pin(root: Path, profile: Path = BLACKWELL) -> None:
    digest = shown(load_profile(profile).digest)
    write(root, "/etc/tune/pull.env", f"PROFILE_URL={profile}\nPROFILE_DIGEST={digest}\n")


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = copy_host(TUNED, tmp_path / "host")
    grub = root / "etc/default/grub"  # one-time boots need GRUB's saved default (grub-reboot)
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0\n", "GRUB_DEFAULT=saved\n"))
    assert "GRUB_DEFAULT=saved\n" in grub.read_text()
    pin(root)
    return root


@pytest.fixture
def slurm(host: Path) -> Iterator[Cluster]:
    with cluster(host) as c:
        yield c


def record(root: Path, path: str) -> dict[str, str] | None:
    file = root / path.lstrip("/")
    return json.loads(file.read_text()) if file.exists() else None


def test_drift_drains_with_a_tune_reason_and_resumes_once_fixed(slurm: Cluster, host: Path) -> None:
    slurm.wait_for("idle")
    assert slurm.health_check().returncode == 0
    assert slurm.node() == ("idle", "")

    write(host, NUMA, "1\n")
    started = time.monotonic()
    done = slurm.health_check()
    took = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    state, reason = slurm.node()
    assert state == "drained"
    assert reason.startswith("tune: drift (exit 2)"), reason
    assert "kernel.numa_balancing" in reason
    assert record(host, DRAIN_RECORD)["reason"] == reason  # type: ignore[index]
    assert took < 30, f"a health check took {took:.1f} s"

    write(host, NUMA, "0\n")
    assert slurm.health_check().returncode == 0
    # Resumed: slurmctld pings the node first (idle*, not responding, for an instant).
    assert slurm.wait_for("idle", timeout=20) == ("idle", "")
    assert record(host, DRAIN_RECORD) is None


def test_a_node_an_administrator_drained_is_never_resumed(slurm: Cluster, host: Path) -> None:
    slurm.wait_for("idle")
    slurm.scontrol("update", f"nodename={NODE}", "state=drain", "reason=tune: disk swap by ops")
    assert slurm.health_check().returncode == 0  # healthy, but not tune's drain
    assert slurm.node() == ("drained", "tune: disk swap by ops")

    # Unhealthy too: the administrator's reason stays, nothing is recorded as tune's.
    write(host, NUMA, "1\n")
    assert slurm.health_check().returncode == 2
    assert slurm.node() == ("drained", "tune: disk swap by ops")
    assert record(host, DRAIN_RECORD) is None


def test_an_administrator_who_redrains_a_node_tune_drained_keeps_it(
    slurm: Cluster, host: Path
) -> None:
    slurm.wait_for("idle")
    write(host, NUMA, "1\n")
    assert slurm.health_check().returncode == 2
    slurm.scontrol("update", f"nodename={NODE}", "state=drain", "reason=RMA ticket 42")
    write(host, NUMA, "0\n")
    assert slurm.health_check().returncode == 0
    assert slurm.node() == ("drained", "RMA ticket 42")


def test_nothing_is_drained_while_a_tune_run_holds_the_lock(slurm: Cluster, host: Path) -> None:
    slurm.wait_for("idle")
    write(host, NUMA, "1\n")
    lock = host / LOCK.lstrip("/")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = slurm.health_check()
        assert done.returncode == 0
        assert "holds" in done.stdout
        assert slurm.node() == ("idle", "")
    assert slurm.health_check().returncode == 2  # the run has ended: now it counts
    assert slurm.node()[0] == "drained"


def reboot_by_slurm(slurm: Cluster, host: Path, nextstate: str) -> None:
    """`scontrol reboot` as an operator asks it; slurmd runs tune's RebootProgram, which must
    return at once having asked systemd (here the snapshot's emulated systemctl)."""
    asked = host / REBOOT_ASKED.lstrip("/")
    slurm.scontrol("reboot", f"nextstate={nextstate}", "reason=new tuning", NODE)
    deadline = time.monotonic() + 30
    while not asked.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert asked.read_text() == "systemctl --no-block reboot\n", slurm.logs()
    assert record(host, REBOOT_RECORD)["reason"] == "new tuning : reboot issued"  # type: ignore[index]


def test_a_good_reboot_with_nextstate_down_returns_to_idle_after_the_health_check(
    slurm: Cluster, host: Path
) -> None:
    slurm.wait_for("idle")
    reboot_by_slurm(slurm, host, "DOWN")
    slurm.fake_reboot()
    # slurmd ran the health check as it started, before it registered: the node is down until
    # the next check (HealthCheckInterval later; run here at once) resumes it.
    assert slurm.wait_for_reason(COMPLETE) == ("down", COMPLETE)
    assert slurm.health_check().returncode == 0
    assert slurm.wait_for("idle") == ("idle", "")
    assert record(host, REBOOT_RECORD) is None


def test_a_reboot_that_timed_out_is_not_resumed(host: Path) -> None:
    with cluster(host, extra="ResumeTimeout=5") as slurm:
        slurm.wait_for("idle")
        reboot_by_slurm(slurm, host, "DOWN")
        slurm.stop("slurmd")
        state, reason = slurm.wait_for("down", timeout=60)
        deadline = time.monotonic() + 60
        while "timed out" not in reason and time.monotonic() < deadline:
            time.sleep(1)
            state, reason = slurm.node()
        assert reason.endswith("reboot timed out"), reason
        slurm.fake_reboot()
        time.sleep(2)
        assert slurm.health_check().returncode == 0
        state, reason = slurm.node()
        # Whatever slurmctld makes of the late registration, the reason is not the one of the
        # reboot tune ran: the node stays down for an operator.
        assert state.startswith("down"), (state, reason)
        assert reason.startswith("new tuning : reboot issued : reboot timed out"), reason


def boot_configuration_to_apply(host: Path) -> None:
    """amd_pstate gone from GRUB's file: the reboot phase has one change to make (pending.json)."""
    grub = host / "etc/default/grub.d/90-tune.cfg"
    grub.write_text(grub.read_text().replace(" amd_pstate=active", ""))


def booted_without_it(host: Path) -> None:
    """The new boot's kernel lacks the parameter: `tune verify` fails and rolls back (exit 3)."""
    cmdline = host / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().replace(" amd_pstate=active", ""))


def test_a_good_armed_reboot_is_verified_and_resumed(slurm: Cluster, host: Path) -> None:
    slurm.wait_for("idle")
    boot_configuration_to_apply(host)
    reboot_by_slurm(slurm, host, "DOWN")
    assert (host / PENDING.lstrip("/")).exists()
    # Armed, not applied for good: the new line boots once, the default keeps the old one.
    try_once = host / TRY_SCRIPT.lstrip("/")
    assert "amd_pstate=active" in try_once.read_text()
    assert "amd_pstate" not in (host / "etc/default/grub.d/90-tune.cfg").read_text()
    slurm.fake_reboot()
    assert slurm.wait_for_reason(COMPLETE) == ("down", COMPLETE)
    assert "tune: verified" in (slurm.dir / "health-check.log").read_text()  # as slurmd started
    assert slurm.health_check().returncode == 0
    assert slurm.wait_for("idle") == ("idle", "")
    assert not (host / PENDING.lstrip("/")).exists()  # verified: promoted
    assert not try_once.exists()
    assert "amd_pstate=active" in (host / "etc/default/grub.d/90-tune.cfg").read_text()


def test_a_failed_verification_stays_down_with_its_reason(slurm: Cluster, host: Path) -> None:
    slurm.wait_for("idle")
    boot_configuration_to_apply(host)
    reboot_by_slurm(slurm, host, "DOWN")
    slurm.fake_reboot(booted_without_it)
    time.sleep(3)
    slurm.health_check()  # slurmd ran it as it started; once more changes nothing
    state, reason = slurm.node()
    assert state.startswith(("down", "drain")), (state, reason)
    assert reason.startswith("tune: verification failed (exit 3)"), reason
    # The rollback left the host as it was before: `tune check` passes, and still the node
    # waits for the next boot's verification.
    assert slurm.health_check().returncode == 0
    assert slurm.node() == (state, reason)


def test_the_trap_nextstate_resume_clears_the_drain_of_a_failed_verification(
    slurm: Cluster, host: Path
) -> None:
    """Reproduces the documented trap: with nextstate=RESUME, slurmd's registration clears the
    drain its own health check set at start, and a broken node takes jobs again."""
    slurm.wait_for("idle")
    boot_configuration_to_apply(host)
    reboot_by_slurm(slurm, host, "RESUME")
    slurm.fake_reboot(booted_without_it)
    time.sleep(3)
    state, reason = slurm.wait_for("idle", "drained", "down")
    record_ = record(host, DRAIN_RECORD)
    assert record_ is not None and record_["reason"].startswith("tune: verification failed")
    assert (state, reason) == ("idle", ""), "the trap no longer reproduces: update the docs"


def test_a_job_with_a_tune_feature_reboots_its_node_into_that_profile_and_runs(
    host: Path,
) -> None:
    """`sbatch -C tune_other`: slurmctld reboots the node for the feature, slurmd runs the
    helper (which arms that profile and keeps it) and the RebootProgram; after the boot the
    helper reports the feature active and the job runs."""
    profiles = host / "etc/tune/profiles"
    profiles.mkdir(parents=True)
    for name in ("base-gpu-inference.yaml", "blackwell-8x.yaml"):
        (profiles / name).write_bytes((BLACKWELL.parent / name).read_bytes())
    (profiles / "other.yaml").write_bytes(BLACKWELL.read_bytes())
    helpers = "".join(
        f"Feature=tune_{name} Helper={{dir}}/features\n" for name in ("blackwell_8x", "other")
    )
    with cluster(host, extra="NodeFeaturesPlugins=node_features/helpers", helpers=helpers) as c:
        c.wait_for("idle")
        shown_ = c.scontrol("show", "node", NODE)
        assert "ActiveFeatures=tune_blackwell_8x" in shown_, shown_
        out = c.dir / "job.out"
        job = c.run("sbatch", "-C", "tune_other", f"--output={out}", "--wrap", "echo ran")
        assert job.returncode == 0, job.stderr
        asked = host / REBOOT_ASKED.lstrip("/")
        deadline = time.monotonic() + 40
        while not asked.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert asked.exists(), c.logs()
        assert record(host, "/var/lib/tune/slurm-profile.json")["profile"] == str(  # type: ignore[index]
            profiles / "other.yaml"
        )
        c.fake_reboot()
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert out.exists() and out.read_text() == "ran\n", c.logs()
        assert "ActiveFeatures=tune_other" in c.scontrol("show", "node", NODE)
