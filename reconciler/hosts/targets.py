"""Which machines to reach, as plain data: `-H` host strings here, Ansible inventories in
`inventory/`.

Nothing here connects or imports an SSH library; `ssh.py` turns a `Target` into a connection and
resolves `~/.ssh/config` aliases the way `ssh` does (the inventory's `ansible_host` is what is
looked up there, as Ansible's ssh connection does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError


@dataclass(frozen=True)
class Target:
    """A machine to reach over SSH. Unset fields come from `~/.ssh/config`, then ssh's
    defaults (the local user name, port 22)."""

    name: str  # as the operator wrote it: the inventory name or the -H string
    host: str  # what ssh connects to: an address, a DNS name or an ssh_config alias
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    sudo: bool | None = None  # the inventory's ansible_become; None: as the command line says


_HOST_SPEC = re.compile(
    r"(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]\s]+\]|[^@:\s\[\]]+)(?::(?P<port>\d+))?"
)


def parse_host(spec: str) -> Target:
    """`[user@]host[:port]`; an IPv6 address in brackets (`[fd00::1]:2222`)."""
    match = _HOST_SPEC.fullmatch(spec.strip())
    if match is None:
        raise UsageError(f"-H {spec!r}: expected [USER@]HOST[:PORT].")
    port = int(match["port"]) if match["port"] else None
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"-H {spec!r}: port {port} is out of range.")
    return Target(spec.strip(), match["host"].strip("[]"), match["user"], port)
