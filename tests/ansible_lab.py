"""tune's Ansible modules against the SSH lab (tests/ssh_fixture.py): each lab host's `tune` is
this checkout's, run on the host's snapshot (`--root $TUNE_ROOT`, which the lab's sshd sets), and
its reboot is the snapshot's (`python -m ansible_lab`): what a reboot brings, without one."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def snapshot_reboot(root: Path) -> None:
    """The snapshot "reboots": a new boot id and /proc/cmdline from the configured command
    line, as tests/test_reboot_phase.py's `reboot` does; or, where `--arm` left a try-once
    boot (pending.json names one and /etc/grub.d's try script is there), that script's line,
    once, as GRUB boots grub-reboot's entry (the lab defers grub-reboot itself)."""
    import json

    from reconciler.apply.pending import PENDING
    from reconciler.apply.tryonce import entry_cmdline
    from reconciler.facts import cmdline as fmt
    from reconciler.hosts.directory import SnapshotHost

    boot = fmt.boot_config(SnapshotHost(root).fetch(fmt.request()))
    assert boot is not None and boot.cmdline is not None
    line = boot.cmdline
    pending, script = root / PENDING.lstrip("/"), root / fmt.TRY_SCRIPT.lstrip("/")
    if pending.exists() and json.loads(pending.read_text()).get("try_once") and script.exists():
        tried = entry_cmdline(script.read_bytes())
        assert tried is not None, f"{script} has no command line"
        line = tried
    (root / fmt.PROC_CMDLINE.lstrip("/")).write_text(f"BOOT_IMAGE=/vmlinuz {line}\n")
    (root / "proc/sys/kernel/random/boot_id").write_text(f"{uuid.uuid4()}\n")


def write_programs(bin_dir: Path) -> tuple[Path, Path]:
    """`tune` and `lab-reboot` for the lab hosts' PATH: (tune, lab-reboot)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    env = f"PYTHONPATH={PROJECT}:{TESTS}"
    tune = bin_dir / "tune"
    tune.write_text(
        "#!/bin/sh\n"
        "# A lab host's tune: this checkout's, on the host's snapshot.\n"
        f'{env} exec {sys.executable} -m reconciler.cli "$@" --root "${{TUNE_ROOT:?}}"\n'
    )
    reboot = bin_dir / "lab-reboot"
    reboot.write_text(f'#!/bin/sh\n{env} exec {sys.executable} -m ansible_lab "${{TUNE_ROOT:?}}"\n')
    for program in (tune, reboot):
        program.chmod(0o755)
    return tune, reboot


if __name__ == "__main__":
    if not os.environ.get("TUNE_ROOT"):
        sys.exit("ansible_lab: TUNE_ROOT names no snapshot; this would be a real reboot")
    snapshot_reboot(Path(sys.argv[1]))
