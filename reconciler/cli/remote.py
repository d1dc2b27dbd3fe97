"""The command line's remote hosts: `-H`, `--inventory` and the SSH options.

Every command that reads hosts (plan and snapshot; check and apply later) takes the same options
through `remote_options`. The SSH module, and with it fabric and paramiko, is imported only
when a command really goes remote.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import UsageError
from ..hosts.base import Host
from ..hosts.directory import open_host
from ..hosts.fleet import DEFAULT_FORKS
from .output import Output

if TYPE_CHECKING:
    from ..hosts.targets import Target

T = TypeVar("T")


@dataclass(frozen=True)
class RemoteOptions:
    hosts: tuple[str, ...] = ()
    inventory: str | None = None
    limit: str | None = None
    forks: int = DEFAULT_FORKS
    sudo: bool = False
    ssh_config: str | None = None
    accept_new_host_keys: bool = False
    connect_timeout: float = 10.0
    command_timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.limit is not None and self.inventory is None:
            raise UsageError("--limit selects hosts of an --inventory; none was given.")

    @property
    def wanted(self) -> bool:
        return bool(self.hosts) or self.inventory is not None

    @property
    def is_fleet(self) -> bool:
        """An inventory, or more than one -H: output per host plus a summary."""
        return self.inventory is not None or len(self.hosts) > 1

    def targets(self) -> list[Target]:
        from ..hosts.targets import load_inventory, parse_host

        found = [parse_host(h) for h in self.hosts]
        if self.inventory is not None:
            found += load_inventory(self.inventory).select(self.limit)
        names = [t.name for t in found]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise UsageError(f"host {twice[0]} is given twice.")
        return found

    def open(self) -> list[Host]:
        """Hosts for every target; nothing connects until a host is first read."""
        targets = self.targets()
        # fabric and paramiko load only for remote runs
        from ..hosts.ssh import SshSettings, SshSetup

        setup = SshSetup(
            SshSettings(
                ssh_config=self.ssh_config,
                sudo=self.sudo,
                accept_new_host_keys=self.accept_new_host_keys,
                connect_timeout=self.connect_timeout,
                command_timeout=self.command_timeout,
            )
        )
        return [setup.host(t) for t in targets]


_OPTIONS = [
    click.option(
        "-H",
        "--host",
        "hosts",
        multiple=True,
        metavar="[USER@]HOST[:PORT]",
        help="Read this host over SSH (repeatable); ~/.ssh/config aliases work.",
    ),
    click.option(
        "--inventory",
        type=click.Path(exists=True, dir_okay=False),
        help="Ansible inventory (INI or YAML) of hosts to read over SSH.",
    ),
    click.option("--limit", metavar="PATTERN", help="Only these inventory hosts or groups."),
    click.option(
        "--forks",
        type=click.IntRange(1, 1000),
        default=DEFAULT_FORKS,
        show_default=True,
        help="Hosts to work on at once.",
    ),
    click.option("--sudo", is_flag=True, help="Read as root through passwordless sudo."),
    click.option(
        "--ssh-config",
        type=click.Path(exists=True, dir_okay=False),
        help="Use this ssh_config instead of ~/.ssh/config (like ssh -F).",
    ),
    click.option(
        "--accept-new-host-keys",
        is_flag=True,
        help="Trust and record keys of hosts not yet in known_hosts (never changed keys).",
    ),
    click.option(
        "--connect-timeout",
        type=click.FloatRange(min=0.1),
        default=10.0,
        show_default=True,
        help="Seconds to connect and authenticate.",
    ),
    click.option(
        "--command-timeout",
        type=click.FloatRange(min=0.1),
        default=60.0,
        show_default=True,
        help="Seconds for a host to answer.",
    ),
]
_FIELDS = [f.name for f in fields(RemoteOptions)]


def remote_options(command: Callable[..., int]) -> Callable[..., int]:
    """Add the remote-host options to a click command; it receives them as `remote`."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        remote = RemoteOptions(**{name: kwargs.pop(name) for name in _FIELDS})
        return command(*args, remote=remote, **kwargs)

    decorated: Callable[..., int] = wrapper
    for option in reversed(_OPTIONS):
        decorated = option(decorated)
    return decorated


def progress_on_terminal(out: Output) -> Callable[[int, int], None] | None:
    """How many hosts are done, on standard error: on a terminal only, never with JSON."""
    waiting = out.progress()
    if not waiting.enabled:
        return None

    def show(done: int, total: int) -> None:
        waiting(f"{done}/{total} hosts")
        if done == total:
            waiting.clear()

    return show


def no_root(root: str | None) -> None:
    if root is not None:
        raise UsageError("--root reads a snapshot; it cannot be combined with -H or --inventory.")


def on_one_host(root: str | None, remote: RemoteOptions, work: Callable[[Host], T]) -> T:
    """`work` on the one host the options name: a -H host, a snapshot, or this machine."""
    if remote.wanted:
        no_root(root)
    host = remote.open()[0] if remote.wanted else open_host(root)
    try:
        return work(host)
    finally:
        host.close()
