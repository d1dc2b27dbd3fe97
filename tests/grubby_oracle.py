"""The real grubby as a test oracle: Fedora's `grubby-bls` (tests/corpus/grubby, installed as
/usr/sbin/grubby on Fedora and RHEL 8+), run with bash on a test root.

The script hard-codes its paths (/etc/os-release, /etc/machine-id, /etc/default/grub,
/etc/kernel/cmdline, /boot/loader/entries, /boot/grub2/grubenv, `mountpoint -q /boot`), so it
runs as a copy in which those strings, and nothing else, are prefixed with the test's root:
it never reads or writes this machine's /etc or /boot. `patched` shows the copy. Its
`grub2-editenv` is GRUB's own (`grub-editenv`, Debian's grub-common), under Fedora's name on a
PATH of the test's; the working directory is an empty one of the test's."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus" / "grubby"
SCRIPT = CORPUS / "grubby-bls"
BASH = shutil.which("bash")
EDITENV = shutil.which("grub2-editenv") or shutil.which("grub-editenv")
MISSING = (
    "needs bash and grub-editenv (Debian's grub-common; .ci/run installs it)"
    if BASH is None or EDITENV is None
    else None
)
# The only strings rewritten in the copy.
FIXED = ("/etc/", "/boot/", "mountpoint -q /boot")


def patched(root: Path) -> str:
    """The script with its fixed paths under `root`."""
    text = SCRIPT.read_text()
    mark = "\0ROOT\0"
    for fixed in FIXED:
        text = text.replace(fixed, fixed.replace("/", mark + "/", 1))
    assert "/etc/" not in text.replace(mark + "/etc/", ""), "a path under /etc left unpatched"
    return text.replace(mark, str(root))


def grubby(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real grubby with `args` on the host under `root`."""
    assert MISSING is None, MISSING
    assert BASH is not None and EDITENV is not None
    work = root.parent / f".{root.name}-grubby"
    (work / "bin").mkdir(parents=True, exist_ok=True)
    (work / "cwd").mkdir(exist_ok=True)
    link = work / "bin" / "grub2-editenv"
    if not link.exists():
        link.symlink_to(EDITENV)
    script = work / "grubby"
    script.write_text(patched(root))
    env = {"PATH": f"{work / 'bin'}:/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(work)}
    return subprocess.run(
        [BASH, str(script), *args],
        cwd=work / "cwd",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root`, by its path on the host."""
    return {
        "/" + str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def write(root: Path, path: str, data: str | bytes) -> None:
    local = root / path.lstrip("/")
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(data.encode() if isinstance(data, str) else data)
    os.utime(local, (0, 0))
