"""Which tool rebuilds the host's initramfs, told as the boot tool is (`facts.cmdline`): by what
the host has installed, not by assumption.

A module that loads early (nvidia, where the initramfs holds it) reads the initramfs's copy of
modprobe.d, so options written to /etc/modprobe.d reach it only once the initramfs is rebuilt:
`update-initramfs -u` (initramfs-tools: Debian, Ubuntu, Proxmox VE; Ubuntu's dracut packaging
keeps the same command), otherwise `dracut -f` (RHEL and its rebuilds, Fedora, SUSE).
"""

from __future__ import annotations

from ..core.files import Files, Request

UPDATE_INITRAMFS = ("/usr/sbin/update-initramfs", "/sbin/update-initramfs")
DRACUT = ("/usr/bin/dracut", "/usr/sbin/dracut", "/sbin/dracut")
TOOLS = (
    (UPDATE_INITRAMFS, ("update-initramfs", "-u")),
    (DRACUT, ("dracut", "-f")),
)
LOOKED_FOR = ", ".join(path for paths, _ in TOOLS for path in paths)


def request() -> Request:
    # Listed, never read: the programs are all that is asked about.
    return Request.of(nodes=tuple(path for paths, _ in TOOLS for path in paths))


def rebuild(files: Files) -> tuple[str, ...] | None:
    """The command that rebuilds the initramfs of the kernel the host boots next; None when
    the host has neither tool (no initramfs, or one this tune does not know)."""
    for paths, argv in TOOLS:
        if any(files.node_paths(path) for path in paths):
            return argv
    return None
