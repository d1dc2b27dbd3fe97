"""Messages that scale: on the example host (128 CPUs, 64 IRQs of one NIC, 8 GPUs: 358 runtime
knobs), every verdict and error that lists knobs folds them as the plan does, counts them,
names the first few, and leaves the whole list to `--format json`: no line over LINE
characters, whatever the host's size."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import UNTUNED, copy_host, run_tune, write
from shared_run import SharedRun
from test_reboot_phase import reboot

from reconciler.core.few import LINE


def short_lines(*texts: str) -> None:
    for text in texts:
        for line in text.splitlines():
            assert len(line) <= LINE, f"{len(line)} characters: {line[:120]}..."


def runtime_back_to_untuned(root: Path) -> None:
    """The boot did not bring the runtime part back (its boot-time files did not hold): every
    kernel value as it was before any apply, the new command line and boot id kept."""
    for name in ("proc/sys", "sys", "proc/irq", "proc/modules"):
        source, target = UNTUNED / name, root / name
        if source.is_dir():
            keep = {"proc/sys/kernel/random/boot_id"}
            for path in source.rglob("*"):
                relative = str(path.relative_to(UNTUNED))
                if path.is_file() and relative not in keep:
                    shutil.copyfile(path, root / relative)
        elif source.exists():
            shutil.copyfile(source, target)


def test_verify_of_a_runtime_part_that_drifted_keeps_the_boot_and_says_it_in_few_lines(
    both_phases_applied: SharedRun, scratch: Path
) -> None:
    """Runtime knobs a run applied that no longer hold after the boot are drift, as `tune
    check` says (exit 2), never a reason to roll back a boot that brought what it was asked."""
    assert both_phases_applied.result.code == 0
    root = both_phases_applied.copy(scratch / "host")
    reboot(root)
    runtime_back_to_untuned(root)
    result = run_tune("verify", "--root", root)
    assert result.code == 2, result.out + result.err
    assert "ok  /proc/cmdline has amd_pstate=active" in result.out
    assert "Drift: 18 entries (350 knobs) of the runtime phase that a run applied" in result.out
    assert "  DRIFT cpu idle:C2 on 128 CPUs (cpu0-127): enabled (want disabled)" in result.out
    assert "Not applied" not in result.out
    short_lines(result.out, result.err)
    assert len(result.out.splitlines()) < 12
    assert not (root / "var/lib/tune/pending.json").exists()
    assert "amd_pstate=active" in (root / "etc/default/grub.d/90-tune.cfg").read_text()
    checked = run_tune("check", "--root", root, "--quiet")
    assert checked.code == 2  # the same verdict as check's


MANY = "name: many\ncmdline:\n  set:\n" + "".join(f"    tune_test_{n}: '{n}'\n" for n in range(40))


def test_a_boot_that_lost_forty_parameters_is_said_in_two_short_lines(scratch: Path) -> None:
    root = copy_host(UNTUNED, scratch / "host")
    profile = write(scratch, "many.yaml", MANY)
    applied = run_tune("apply", profile, "--reboot-phase", "--root", root, "-y")
    assert applied.code == 0, applied.err
    short_lines(applied.out, applied.err)
    write(root, "/proc/sys/kernel/random/boot_id", "00000000-0000-4000-8000-00000000000f\n")
    text = run_tune("verify", "--root", copy_host(root, scratch / "text"))
    assert text.code == 3
    short_lines(text.out, text.err)
    assert len(text.err.splitlines()) == 2
    assert text.err.startswith(
        "after the boot, 40 things did not hold: /proc/cmdline has nothing, not tune_test_0=0; "
    )
    assert "; and 37 more." in text.err
    data = run_tune("verify", "--root", root, "--format", "json")
    assert data.code == 3
    document = json.loads(data.out)
    assert document["status"] == "rolled-back"
    assert len(document["failed"]) == 40  # the whole list, each parameter


def test_a_reboot_phase_alone_on_a_big_host_says_what_is_not_applied_in_few_lines(
    reboot_phase_applied: SharedRun, scratch: Path
) -> None:
    root = reboot_phase_applied.copy(scratch / "host")
    reboot(root)
    result = run_tune("verify", "--root", root)
    assert result.code == 0, result.err
    short_lines(result.out, result.err)
    assert len(result.out.splitlines()) < 12
    data = run_tune(
        "verify", "--root", reboot_phase_applied.copy(scratch / "json"), "--format", "json"
    )
    assert data.code == 10  # not rebooted: the json copy was not rebooted
    reboot(scratch / "json")
    document = json.loads(run_tune("verify", "--root", scratch / "json", "--format", "json").out)
    assert (len(document["not_applied"]), document["drift"]) == (358, [])


def test_check_after_a_killed_first_apply_is_one_short_line(scratch: Path) -> None:
    from applied_state import write_run

    root = copy_host(UNTUNED, scratch / "host")
    write_run(root, run_id="20250602T000000Z-cccccc", outcome=None)
    result = run_tune("check", "--quiet", "--root", root)
    assert result.code == 5
    assert len(result.err.splitlines()) == 1
    short_lines(result.out, result.err)
