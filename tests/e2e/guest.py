"""What the guest's own tools say, and copies of its files: the ground truth e2e tests compare
tune with."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

from reconciler.core.files import Request

from .vm import Vm

# Patterns come from tune's own request for a test profile; they reach the guest's shell
# unquoted so that it expands the globs, hence this check.
SAFE_PATTERN = re.compile(r"/[A-Za-z0-9_./*?:\[\]-]+")
# The PCI functions QEMU emulates for the tests: NVMe and e1000e, each on a PCIe root port.
QEMU_NVME = "1b36:0010"
E1000E = "8086:10d3"


def copy_files(vm: Vm, request: Request, root: Path) -> Path:
    """Copy every guest file `request` names into `root`, laid out like the guest's `/`.

    `tar` of /proc and /sys directly does not work: procfs files report size 0 (tar stores
    them empty) and sysfs files 4096 (tar pads them with zeros). `cat` reads what the kernel
    returns, so the guest copies each file with `cat` first and tars the copies.
    """
    patterns = sorted(request.patterns | request.edited | request.whole)
    for pattern in patterns:
        assert SAFE_PATTERN.fullmatch(pattern), pattern
    script = (
        "d=$(mktemp -d) && for f in " + " ".join(patterns) + "; do "
        '[ -f "$f" ] || continue; mkdir -p "$d${f%/*}"; '
        'cat "$f" > "$d$f" 2>/dev/null || rm -f "$d$f"; '
        'done && tar -C "$d" -cf - . && rm -rf "$d"'
    )
    archive = vm.sh(script, binary=True).stdout
    assert isinstance(archive, bytes)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


def sysctl(vm: Vm, key: str) -> str:
    """`sysctl -n KEY` with whitespace collapsed as tune compares it."""
    return " ".join(vm.run("sysctl", "-n", key).stdout.split())


def loaded_modules(vm: Vm) -> set[str]:
    lines = vm.run("lsmod").stdout.splitlines()[1:]  # the first line is the header
    return {line.split()[0] for line in lines if line.strip()}


def pci_functions(vm: Vm, vendor_device: str) -> list[str]:
    """Full addresses (0000:01:00.0) of the functions with this vendor:device id."""
    out = vm.run("lspci", "-D", "-n", "-d", vendor_device).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def max_read_request(vm: Vm, address: str) -> int:
    """MaxReadReq as `lspci -vvv` prints it in the Device Control (DevCtl) lines."""
    out = vm.run("lspci", "-vvv", "-s", address).stdout
    found = re.findall(r"MaxReadReq (\d+) bytes", out)
    assert len(found) == 1, out
    return int(found[0])


def device_control(vm: Vm, address: str) -> int:
    """The 16-bit PCI Express Device Control register, as `setpci` reads it."""
    return int(vm.run("setpci", "-s", address, "CAP_EXP+8.w").stdout.strip(), 16)


def cmdline_parameters(text: str) -> dict[str, str | None]:
    """Name -> value (None for a bare flag) of a command line without quotes."""
    params: dict[str, str | None] = {}
    for word in text.split():
        name, sep, value = word.partition("=")
        params[name] = value if sep else None
    return params


def running_cmdline(vm: Vm) -> dict[str, str | None]:
    return cmdline_parameters(vm.run("cat", "/proc/cmdline").stdout)


def configured_cmdline(vm: Vm) -> dict[str, str | None]:
    """What update-grub would pass next boot, evaluated by the guest's own shell the way
    grub-mkconfig does (/etc/default/grub, then /etc/default/grub.d/*.cfg)."""
    script = (
        ". /etc/default/grub; for f in /etc/default/grub.d/*.cfg; do "
        '[ -e "$f" ] && . "$f"; done; echo "$GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT"'
    )
    return cmdline_parameters(vm.sh(script).stdout)


def write_file(vm: Vm, path: str, content: str, mode: str = "644") -> None:
    vm.sh(f"cat > {path} && chmod {mode} {path}", stdin=content)
