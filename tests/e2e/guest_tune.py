"""tune installed in the guest as `pip install tune-gpu-host` in a virtual environment puts it,
with no network in the guest: the controller's pip installs this checkout and its dependencies
into a directory (`pip install --target`), which reaches the guest's virtual environment as one
tar stream over the test's SSH connection.

The dependencies with compiled parts (pydantic-core, cryptography) are built for one Python
minor version: the controller's must be the guest's (3.11 on Debian 12), or the guest's tune
would not import. A manylinux wheel needs the guest's glibc to be at least its own (2.36 in the
guest).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

from .vm import Vm, VmError

PROJECT = Path(__file__).resolve().parents[2]
VENV = "/opt/tune"
TUNE = f"{VENV}/bin/tune"


def python_minor(vm: Vm) -> str:
    return vm.run(
        "python3", "-c", "import sys; print(*sys.version_info[:2], sep='.')"
    ).stdout.strip()


def pip_install(target: Path, project: Path = PROJECT) -> Path:
    """This checkout (or `project`, another tree of tune's) and its dependencies, installed
    under `target` by the controller's pip."""
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run(
        [*argv, "--target", str(target), str(project)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise VmError(f"pip could not install tune for the guest: {done.stderr.strip()[-2000:]}")
    return target


def venv_archive(target: Path, minor: str, venv: str = VENV) -> bytes:
    """A gzipped tar of `target` laid out as a virtual environment at `venv`: the packages in its
    site-packages, and pip's `tune` script with the venv's interpreter in its first line
    (target/bin's scripts name the controller's)."""
    script = (target / "bin" / "tune").read_text().split("\n", 1)[1]
    launcher = f"#!{venv}/bin/python3\n{script}".encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for entry in sorted(target.iterdir()):
            if entry.name != "bin":
                tar.add(entry, arcname=f"lib/python{minor}/site-packages/{entry.name}")
        info = tarfile.TarInfo("bin/tune")
        info.size, info.mode = len(launcher), 0o755
        tar.addfile(info, io.BytesIO(launcher))
    return buffer.getvalue()


def install(vm: Vm, workdir: Path, project: Path = PROJECT, venv: str = VENV) -> str:
    """Install tune (this checkout, or `project`) in the guest at `venv`; returns the path of
    its `tune`."""
    minor = python_minor(vm)
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    if minor != ours:
        raise VmError(
            f"the guest's python3 is {minor}, the controller's {ours}: tune's "
            "compiled dependencies would not import there"
        )
    archive = venv_archive(pip_install(workdir / "site-packages", project), minor, venv)
    # --without-pip: Debian's venv needs python3-venv only for ensurepip.
    vm.sh(
        f"python3 -m venv --without-pip {venv} && tar -xzf - -C {venv}",
        stdin=archive,
        binary=True,
        timeout=300,
    )
    return f"{venv}/bin/tune"


def uninstall(vm: Vm, venv: str = VENV) -> None:
    vm.run("rm", "-rf", venv)
