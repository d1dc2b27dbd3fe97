"""A fleet never runtime-tuned gets a reboot rollout (`tune apply --reboot --reboot-phase`):
each host's boot is judged by what the run configured for the boot, never by the runtime knobs
no run applied. In the SSH lab (a real sshd on 127.0.0.1, the hosts' reboots emulated)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import BLACKWELL, UNTUNED, copy_host, run_tune, write
from ssh_fixture import StartLab, minimal_host, sshd_available

from reconciler.apply.journal import read_run, run_ids
from reconciler.hosts.directory import SnapshotHost
from reconciler.rollout import journal

lab_only = pytest.mark.skipif(
    not sshd_available(), reason="needs root and openssh-server (.ci/run installs it)"
)
FAST = ("--reboot-poll", "0.1", "--reboot-timeout", "120", "--no-probes", "-y")
NEW_CMDLINE = "BOOT_IMAGE=/vmlinuz quiet amd_pstate=active processor.max_cstate=1\n"
HOOK = '#!/bin/sh\nprintf "%s %s\\n" "$1" "$TUNE_HOST" >>"$LOG"\n'


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The untuned example cut down to what the Blackwell profile reads (runtime knobs on 128
    CPUs and 64 IRQs, none of them ever applied), GRUB_DEFAULT=saved (a try-once boot)."""
    root = minimal_host(UNTUNED, BLACKWELL, tmp_path_factory.mktemp("t") / "untuned")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0", "GRUB_DEFAULT=saved"))
    return root


def reboot_rollout(
    tmp_path: Path, template: Path, start_lab: StartLab, broken: str | None
) -> tuple[dict[str, Path], list[str], object]:
    roots = {f"h{n}": copy_host(template, tmp_path / f"h{n}") for n in range(1, 5)}
    for root in roots.values():
        (root / ".tune-emulate").mkdir()
    if broken is not None:
        # Its next boot comes up without the new parameters (the boot loader ignored them).
        write(roots[broken], ".next-boot/proc/cmdline", "BOOT_IMAGE=/vmlinuz quiet\n")
    log = tmp_path / "hooks.log"
    hook = write(tmp_path, "hook.sh", HOOK)
    lab = start_lab(roots)
    hosts = [arg for name in roots for arg in ("-H", name)]
    result = run_tune(
        "apply", BLACKWELL, "--reboot", "--reboot-phase", "--ssh-config", lab.config, *FAST,
        *hosts, "--canary", "h1", "--serial", "2", "--max-fail", "1",
        "--after-verify", f"env LOG={log} sh {hook} after",
    )  # fmt: skip
    hooked = log.read_text().splitlines() if log.exists() else []
    return roots, hooked, result


def runtime_untouched(root: Path, template: Path) -> None:
    """The runtime phase was never applied, and the rollout did not apply it either."""
    for knob in ("proc/sys/vm/swappiness", "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"):
        assert (root / knob).read_bytes() == (template / knob).read_bytes(), knob


@pytest.mark.slow
@lab_only
def test_a_fleet_never_runtime_tuned_gets_a_reboot_rollout_and_every_host_is_verified(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots, hooked, result = reboot_rollout(tmp_path, template, start_lab, None)
    assert result.code == 0, result.out + result.err  # type: ignore[attr-defined]
    saved = journal.load(None)
    assert saved.waves == [["h1"], ["h2", "h3"], ["h4"]]  # the canary, then waves of 2
    assert {n: (e.state, e.configuration, e.why) for n, e in saved.hosts.items()} == {
        name: (journal.DONE, "new", None) for name in roots
    }
    # Each drained node's undrain hook ran, the canary's first.
    assert hooked[0] == "after h1" and sorted(hooked) == [f"after {n}" for n in sorted(roots)]
    for root in roots.values():
        assert (root / "proc/cmdline").read_text() == NEW_CMDLINE
        assert not (root / "var/lib/tune/pending.json").exists()
        host = SnapshotHost(root)
        (run_id,) = run_ids(host)
        run = read_run(host, run_id)
        assert run is not None and run.outcome == "applied"
        runtime_untouched(root, template)
        # The verdict after the boot is what an engine reads (`tune status`), as verify says it.
        status = json.loads((root / "var/lib/tune/status.json").read_text())
        boot_id = (root / "proc/sys/kernel/random/boot_id").read_text().strip()
        assert status["last_verification"]["verdict"] == "held"
        assert status["last_verification"]["run_id"] == run_id
        assert (status["boot_id"], status["reboot_pending"]) == (boot_id, False)
        assert status["profile"] == "blackwell-8x" and status["last_run"] == run_id
    # tune check afterwards agrees: the runtime phase is not applied, nothing drifted.
    checked = run_tune("check", "--root", roots["h2"], "--format", "json")
    report = json.loads(checked.out)
    assert (checked.code, report["drift"]) == (0, [])
    assert len(report["not_applied"]) > 128


@pytest.mark.slow
@lab_only
def test_one_broken_host_alone_is_rolled_back_and_said_in_one_line(
    tmp_path: Path, start_lab: StartLab, template: Path
) -> None:
    roots, hooked, result = reboot_rollout(tmp_path, template, start_lab, "h3")
    out = result.out + result.err  # type: ignore[attr-defined]
    assert result.code == 1, out  # type: ignore[attr-defined]  # a host failed, as fleets say
    saved = journal.load(None)
    states = {n: (e.state, e.configuration) for n, e in saved.hosts.items()}
    assert states.pop("h3") == (journal.ROLLED_BACK, "prior")
    assert set(states.values()) == {(journal.DONE, "new")}
    why = saved.hosts["h3"].why or ""
    assert why.startswith("after the boot, 2 things did not hold: /proc/cmdline has nothing")
    assert "processor.max_cstate" in why and "\n" not in why and len(why) <= 300
    assert "swappiness" not in why and "cpu0" not in why  # runtime knobs are not the boot's
    assert sorted(hooked) == ["after h1", "after h2", "after h4"]
    assert not (roots["h3"] / "etc/default/grub.d/90-tune.cfg").exists()
    status = json.loads((roots["h3"] / "var/lib/tune/status.json").read_text())
    assert (status["last_verification"]["verdict"], status["in_sync"]) == ("failed", None)
    assert "3 applied, 1 rolled back, 0 failed, 0 not started" in out
    assert "on the prior configuration: h3" in out
    h3_lines = [line for line in out.splitlines() if "h3" in line and "did not hold" in line]
    assert h3_lines and all(len(line) <= 400 for line in h3_lines)
    assert all(len(line) <= 400 for line in out.splitlines())
