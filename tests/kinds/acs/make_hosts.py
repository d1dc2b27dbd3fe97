"""Writes the `host/` trees of the acs cases from a real machine's config space: pciutils'
dump `tests/corpus/pciutils/tree-asus-p6t6.gz` (an X58 board: a GeForce 210 behind root port
00:07.0, a SAS controller behind root port 00:03.0 and an NF200 switch; both root ports have
ACS), laid out as sysfs does: each function under /sys/devices/pci0000:00/ in its place below
its bridges, linked from /sys/bus/pci/devices/; the `persist: cmdline` cases add a running
kernel release and its boot configuration. Run from the repository root:
`python tests/kinds/acs/make_hosts.py`; the cases' profiles and expectations are not touched.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from test_pciutils_corpus import CORPUS, functions  # noqa: E402

from reconciler.facts import pcie  # noqa: E402

# Each function of the dump the cases use, with the bridges above it.
TREE = {
    "0000:00:03.0": (),
    "0000:02:00.0": ("0000:00:03.0",),
    "0000:03:00.0": ("0000:00:03.0", "0000:02:00.0"),
    "0000:04:00.0": ("0000:00:03.0", "0000:02:00.0", "0000:03:00.0"),
    "0000:00:07.0": (),
    "0000:06:00.0": ("0000:00:07.0",),
    "0000:06:00.1": ("0000:00:07.0",),
}
# What Linux sets on a port with ACS when the IOMMU is on (pci_std_enable_acs: Source
# Validation, Request and Completion Redirect, Upstream Forwarding, as the port has them).
KERNEL_ENABLED = 0x001D


def with_control(config: bytes, control: int) -> bytes:
    acs = pcie.acs(config)
    assert acs is not None
    at = acs.offset + pcie.ACS_CONTROL
    return config[:at] + control.to_bytes(2, "little") + config[at + 2 :]


def write_host(root: Path, configs: dict[str, bytes]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    for address, above in TREE.items():
        config = configs[address]
        place = root / "sys/devices/pci0000:00" / "/".join((*above, address))
        place.mkdir(parents=True)
        (place / "vendor").write_text(f"0x{pcie.u16(config, 0):04x}\n")
        (place / "device").write_text(f"0x{pcie.u16(config, 2):04x}\n")
        (place / "class").write_text(f"0x{pcie.u32(config, 8) >> 8:06x}\n")
        (place / "config").write_bytes(config)
        bus = root / "sys/bus/pci/devices"
        bus.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(place, bus), bus / address)


def link(root: Path, path: str, address: str) -> None:
    """A sysfs link at `path` to the function `address` (a driver's or an IOMMU group's)."""
    target = os.path.realpath(root / "sys/bus/pci/devices" / address)
    at = root / path.lstrip("/")
    at.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, at.parent), at)


def boot(root: Path, release: str, files: dict[str, str]) -> None:
    """The running kernel `release` and the boot configuration's `files` (path: text)."""
    for path, text in {"/proc/sys/kernel/osrelease": f"{release}\n", **files}.items():
        at = root / path.lstrip("/")
        at.parent.mkdir(parents=True, exist_ok=True)
        at.write_text(text)


GRUB = """GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="quiet pci=realloc"
GRUB_CMDLINE_LINUX=""
"""


def main() -> None:
    text = gzip.decompress((CORPUS / "tree-asus-p6t6.gz").read_bytes()).decode()
    real = {f"0000:{a}" if len(a) == 7 else a: c for a, c in functions(text).items()}
    enabled = dict(real)
    for port in ("0000:00:03.0", "0000:00:07.0"):
        enabled[port] = with_control(real[port], KERNEL_ENABLED)
    write_host(HERE / "redirect-on-above-gpu-and-sas" / "host", enabled)
    write_host(HERE / "redirect-already-off" / "host", real)
    write_host(HERE / "selector-matching-nothing" / "host", real)
    vfio = HERE / "vfio-passthrough-refused" / "host"
    write_host(vfio, enabled)
    link(vfio, "/sys/bus/pci/drivers/vfio-pci/0000:04:00.0", "0000:04:00.0")
    for group, address in enumerate(TREE, start=10):
        link(vfio, f"/sys/kernel/iommu_groups/{group}/devices/{address}", address)
    short = dict(enabled)
    short["0000:00:07.0"] = enabled["0000:00:07.0"][: pcie.CONVENTIONAL_BYTES]
    write_host(HERE / "no-extended-config-space" / "host", short)
    # Kernel 6.10 (no config_acs yet) on GRUB with a pci= word already there: merged into it.
    before = HERE / "cmdline-disable-acs-redir-before-6.11-joins-pci-on-grub" / "host"
    write_host(before, enabled)
    boot(
        before,
        "6.10.14-1-amd64",
        {
            "/etc/default/grub": GRUB,
            "/proc/cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.10.14-1-amd64 root=/dev/sda1 ro "
            "quiet pci=realloc\n",
        },
    )
    # Kernel 6.11 on systemd-boot's /etc/kernel/cmdline with no pci= word: config_acs.
    since = HERE / "cmdline-config-acs-from-6.11-on-kernel-cmdline" / "host"
    write_host(since, enabled)
    boot(
        since,
        "6.11.0-9-generic",
        {
            "/etc/kernel/cmdline": "root=/dev/sda1 quiet\n",
            "/proc/cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.11.0-9-generic root=/dev/sda1 quiet\n",
        },
    )


if __name__ == "__main__":
    main()
