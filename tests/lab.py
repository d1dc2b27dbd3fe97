"""tune's test lab library: `lab.sh` rendered with the lists it shares with the Python emulation
(`reconciler.hosts.emulate`), written once to a file of this machine that a lab host names in
`TUNE_LAB` beside `TUNE_ROOT` (its snapshot). `apply/lib.sh` sources it there; tune never sends
it, so no script for a production host carries any of it (tests/test_lab_library.py)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import grubby_oracle

from reconciler.apply.engines import ShellEngine
from reconciler.apply.journal import new_run_id, read_run
from reconciler.apply.pending import PENDING, PendingBoot
from reconciler.apply.work import prepare
from reconciler.core.quoting import quoted
from reconciler.facts import nvidia_smi, systemd
from reconciler.hosts import emulate, recorded
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import LoadedProfile


def _strerror() -> str:
    """`strerror`: this C library's text for the errnos a snapshot's `refuses` marker may hold
    (`emulate.REFUSES`), as the emulation in Python words them."""
    cases = "".join(f"    {code}) echo {quoted(os.strerror(code))} ;;\n" for code in emulate.ERRNOS)
    return (
        f'strerror() {{\n    case "$1" in\n{cases}    *) echo "Unknown error $1" ;;\n    esac\n}}\n'
    )


TEXT = (
    f"EMU_COMMANDS={quoted(' '.join(emulate.COMMANDS))}\n"
    f"EMU_CONTAINER_DEV={quoted(' '.join(emulate.CONTAINER_DEV))}\n"
    f"LXC_KEYS={quoted(emulate.LXC_KEY_WORDS)}\n"
    f"EMU_UNIT_DIRS={quoted(' '.join(systemd.UNIT_DIRS))}\n"
    f"NVSMI_RECORD={quoted(recorded.where(nvidia_smi.QUERY))}\n"
    f"NVSMI_CLOCK_RECORD={quoted(recorded.where(nvidia_smi.CLOCKS_QUERY))}\n"
    f"GRUBBY_BLS={quoted(str(grubby_oracle.SCRIPT))}\n"
    f"GRUBBY_EDITENV={quoted(grubby_oracle.EDITENV or '')}\n"
    + _strerror()
    + (Path(__file__).parent / "lab.sh").read_text()
)

# Function names only the lab defines: a script that holds one carries emulation.
MARKERS = (
    "emu_modprobe",
    "emu_setpci",
    "emu_nvidia_smi",
    "emu_grubby",
    "emu_container",
    "emu_systemctl",
    "emu_reboot",
    "emu_boot",
    "emu_has",
    "strerror() {",
    "KTEXT=",
    "EMU_COMMANDS",
    ".tune-emulate",
)


def _written() -> Path:
    """The lab library in a file named by its digest: written whole (a rename) by the first
    test process that needs it, the same bytes for every other."""
    digest = hashlib.sha256(TEXT.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"tune-lab-{digest}.sh"
    if not path.exists() or path.read_text() != TEXT:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tune-lab-")
        with os.fdopen(fd, "w") as out:
            out.write(TEXT)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return path


LIBRARY = _written()


def lab_env(root: Path | str) -> dict[str, str]:
    """What a lab host's shell has in its environment: its snapshot and the lab library."""
    return {"TUNE_ROOT": str(root), "TUNE_LAB": str(LIBRARY)}


def every_write(engine: ShellEngine, loaded: LoadedProfile, root: Path, sent: list[str]) -> None:
    """Every command that writes a host through sh, one after the other, on the lab snapshot
    `root` that `engine` writes: the checks, the apply with its start and polls, the promotion,
    the stored profile, a command, the rollback, pending.json, the reboot. `sent` is where the
    caller's recorder put each script; none of them may carry the lab's emulation."""
    work = prepare(engine.host, loaded, runtime_only=True, preflight_here=False)
    assert work.steps
    assert engine.unloadable(("nvidia", "no_such_module")).keys() <= {"no_such_module"}
    engine.wait_for_lock()
    run_id = new_run_id()
    done = engine.apply(work, loaded, phase="runtime", run_id=run_id)
    assert done.run_id == run_id and done.writes == len(work.steps)
    engine.promote(run_id, work.steps[:1])
    engine.store_profile(loaded, None)
    assert engine.run_command(["modprobe", "--dry-run", "nvidia"]).returncode == 0
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None and run.outcome == "applied"
    assert engine.rollback(run).result.restored > 0
    engine.clear_pending()
    engine.reboot(PendingBoot(run_id, None, {}, {}))
    assert (root / PENDING.lstrip("/")).exists(), "the reboot's mark, then the lab's boot"
    assert len(sent) >= 8
    assert any("run_argv() {" in s for s in sent), "the library went with them"
    carried = {m for s in sent for m in MARKERS if m in s}
    assert carried == set(), f"emulation sent to a host: {sorted(carried)}"
