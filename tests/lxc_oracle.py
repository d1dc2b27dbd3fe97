"""LXC itself as the judge of a plain LXC config: `lxc-info -P DIR -n NAME` loads
DIR/NAME/config with LXC's own parser (confile.c `parse_line`) and fails on a line LXC cannot
read; it starts nothing and needs no service. Its lock goes under XDG_RUNTIME_DIR for a user
other than root, so the tests point that at a scratch directory. Debian's `lxc` package has it,
and CI installs it (`.ci/run`): only a machine without it skips."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

LXC_INFO = shutil.which("lxc-info")


def lxc_refuses(config: str | bytes, scratch: Path) -> str | None:
    """None when LXC loads `config`; else what LXC logged at ERROR level."""
    if LXC_INFO is None:
        pytest.skip("lxc-info is not installed (Debian's lxc package; CI installs it)")
    lxcpath = scratch / "lxcpath"
    (lxcpath / "oracle").mkdir(parents=True, exist_ok=True)
    data = config.encode() if isinstance(config, str) else config
    (lxcpath / "oracle" / "config").write_bytes(data)
    log = scratch / "lxc.log"
    log.unlink(missing_ok=True)
    runtime = scratch / "runtime"
    runtime.mkdir(exist_ok=True)
    done = subprocess.run(
        [LXC_INFO, "-P", str(lxcpath), "-n", "oracle", "-l", "ERROR", "-o", str(log)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        check=False,
    )
    if done.returncode == 0:
        return None
    said = log.read_text() if log.exists() else ""
    return (said + done.stderr).strip() or f"lxc-info exit status {done.returncode}"


def lxc_value(config: str, key: str, scratch: Path) -> str | None:
    """What LXC holds for `key` once it has loaded `config`, printed by LXC itself
    (`lxc-info -c KEY`, confile.c's getter: `get_config_prlimit` prints a limit as `unlimited`,
    a number, or `soft:hard` where the halves differ); "" when nothing sets it, None when LXC
    refuses the config."""
    if LXC_INFO is None:
        pytest.skip("lxc-info is not installed (Debian's lxc package; CI installs it)")
    lxcpath = scratch / "lxcpath"
    (lxcpath / "oracle").mkdir(parents=True, exist_ok=True)
    (lxcpath / "oracle" / "config").write_text(config)
    runtime = scratch / "runtime"
    runtime.mkdir(exist_ok=True)
    done = subprocess.run(
        [LXC_INFO, "-P", str(lxcpath), "-n", "oracle", "-c", key],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        check=False,
    )
    prefix = f"{key} ="
    lines = [line for line in done.stdout.splitlines() if line.startswith(prefix)]
    return lines[-1][len(prefix) :].strip() if done.returncode == 0 and lines else None
