"""Which machines to reach, as plain data: `-H` host strings here, Ansible inventories in
`inventory/`.

Nothing here connects or imports an SSH library; `ssh.py` turns a `Target` into a connection and
resolves `~/.ssh/config` aliases the way `ssh` does (the inventory's `ansible_host` is what is
looked up there, as Ansible's ssh connection does).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ..core.errors import UsageError


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


@dataclass(frozen=True)
class Identity:
    """Which machine a target reaches: the address, port and user its ssh_config resolves it
    to, and the host key it presented (a SHA256 fingerprint; None before it is connected). A
    rollout pins it, so that a resume never reaches another machine under the same name."""

    address: str
    port: int
    user: str
    host_key: str | None = None

    def changes(self, now: Identity) -> list[str]:
        """What differs in `now` ("its address was A, now B"); the host key only where both
        know one."""
        said = [
            f"its {what} was {before}, now {after}"
            for what, before, after in (
                ("address", self.address, now.address),
                ("port", self.port, now.port),
                ("user", self.user, now.user),
            )
            if before != after
        ]
        if self.host_key and now.host_key and self.host_key != now.host_key:
            said.append(f"its host key was {self.host_key}, now {now.host_key}")
        return said


_HOST_SPEC = re.compile(
    r"(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]\s]+\]|[^@:\s\[\]]+)(?::(?P<port>\d+))?"
)


def parse_host(spec: str) -> Target:
    """`[user@]host[:port]`; an IPv6 address in brackets (`[fd00::1]:2222`)."""
    match = _HOST_SPEC.fullmatch(spec.strip())
    if match is None:
        raise UsageError(f"-H '{spec}': expected [USER@]HOST[:PORT].")
    port = int(match["port"]) if match["port"] else None
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"-H '{spec}': port {port} is out of range.")
    host, user = match["host"].strip("[]"), match["user"]
    why = host_problem(host) or (None if user is None else user_problem(user))
    if why is not None:
        raise UsageError(f"-H '{spec}': {why}.")
    return Target(spec.strip(), host, user, port)


# What OpenSSH's ssh (9.6 on; misc.c `valid_hostname`, `valid_ruser`) refuses in a host name and
# a user name it is given: ssh_config's `Match exec` runs a command through the shell with the
# host name in place of `%h` (paramiko does as ssh does), and a name that starts with `-` reads
# as an option to whatever takes it as an argument next (a hook's `ssh $TUNE_HOST`).
_HOST_METACHARACTERS = frozenset("'`\"$\\;&<>|(){},")
_USER_METACHARACTERS = frozenset("'`\";&<>|(){}")


def _control(char: str) -> bool:
    # Controls, and what acts on a terminal or reorders a line though it prints nothing (bidi
    # overrides, line separators): OpenSSH's iscntrl, widened to the Unicode text Python holds.
    return not char.isprintable() and char != " "


def host_problem(host: str) -> str | None:
    """Why `host` cannot be a host name tune connects to (or hands a hook), None if it can.
    Past OpenSSH's rules, a host holds no `user@` and no `:port`: fabric would read them out of
    it and log in as that user, or at that port, whatever the user and port say."""
    if not host:
        return "the host name is empty"
    if host.startswith("-"):
        return f"the host name '{host}' starts with '-'"
    bad = next((c for c in host if c in _HOST_METACHARACTERS or c.isspace() or _control(c)), None)
    if bad is not None:
        return f"the host name '{host}' holds '{bad}', which OpenSSH refuses in a host name"
    if "@" in host:
        return f"the host name '{host}' holds a user (USER@HOST): give the user apart"
    if ":" in host and not _ipv6(host):
        return f"the host name '{host}' holds a port (HOST:PORT): give the port apart"
    return None


def user_problem(user: str) -> str | None:
    """Why `user` cannot be a user name to log in as, None if it can (OpenSSH's rules)."""
    if not user:
        return "the user name is empty"
    if user.startswith("-"):
        return f"the user name '{user}' starts with '-'"
    bad = next((c for c in user if c in _USER_METACHARACTERS or _control(c)), None)
    if bad is not None:
        return f"the user name '{user}' holds '{bad}', which OpenSSH refuses in a user name"
    if re.search(r"\s-", user):
        return f"the user name '{user}' holds a word that starts with '-'"
    if user.endswith("\\"):
        return f"the user name '{user}' ends with a backslash"
    return None


def _ipv6(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
    except ValueError:
        return False
