"""The command line's remote hosts: `-H`, `-i/--inventory` and the SSH options.

Commands that work across hosts (plan, check, apply, audit) take every option through
`remote_options`; commands that work on one host (snapshot, report, history, rollback, verify)
take `one_host_options`: a single -H and the SSH options, no --inventory, --limit or --forks,
so that --help offers only what works. The SSH module, and with it fabric and paramiko, is
imported only when a command really goes remote.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..core.errors import UsageError
from ..hosts.base import Host
from ..hosts.directory import open_host
from ..hosts.fleet import DEFAULT_FORKS
from .config import configured, configured_inventory
from .output import Output

if TYPE_CHECKING:
    from ..hosts.targets import Target

T = TypeVar("T")


@dataclass(frozen=True)
class RemoteOptions:
    hosts: tuple[str, ...] = ()
    inventory: str | None = None
    limit: str | None = None
    # None: not on the command line; then tune's config (`config.configured`), read only
    # where the value is used, so a bad `forks` cannot fail a command on this machine.
    forks: int | None = None
    sudo: bool | None = None
    ssh_config: str | None = None
    accept_new_host_keys: bool = False
    connect_timeout: float = 10.0
    command_timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.limit is not None and self.inventory is None:
            raise UsageError(
                "--limit selects hosts of an inventory; give -i, or set inventory in "
                "~/.config/tune/config.toml (see `tune config`)."
            )

    def fleet_forks(self) -> int:
        """Hosts to work on at once: --forks, or the configured forks."""
        return int(self.forks if self.forks is not None else configured("forks"))

    def resolved(self) -> RemoteOptions:
        """These options with every configured value read in (a rollout journals them)."""
        return dataclasses.replace(
            self,
            forks=self.fleet_forks(),
            sudo=self._ssh("sudo", self.sudo),
            ssh_config=self._ssh("ssh_config", self.ssh_config),
        )

    @staticmethod
    def _ssh(key: str, given: Any) -> Any:
        return given if given is not None else configured(key)

    @property
    def wanted(self) -> bool:
        return bool(self.hosts) or self.inventory is not None

    @property
    def is_fleet(self) -> bool:
        """An inventory, or more than one -H: output per host plus a summary."""
        return self.inventory is not None or len(self.hosts) > 1

    def targets(self) -> list[Target]:
        from ..hosts.inventory import inventory_targets
        from ..hosts.targets import parse_host

        found = [parse_host(h) for h in self.hosts]
        if self.inventory is not None:
            found += inventory_targets(self.inventory, self.limit)
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
                ssh_config=self._ssh("ssh_config", self.ssh_config),
                sudo=bool(self._ssh("sudo", self.sudo)),
                accept_new_host_keys=self.accept_new_host_keys,
                connect_timeout=self.connect_timeout,
                command_timeout=self.command_timeout,
            )
        )
        return [setup.host(t) for t in targets]


_HOST_HELP = "Read this host over SSH{}; ~/.ssh/config aliases work."
_FLEET_OPTIONS = [
    click.option(
        "-H",
        "--host",
        "hosts",
        multiple=True,
        metavar="[USER@]HOST[:PORT]",
        help=_HOST_HELP.format(" (repeatable)"),
    ),
    click.option(
        "-i",
        "--inventory",
        type=click.Path(exists=True, allow_dash=True),
        help="Ansible inventory of hosts to reach over SSH: an INI or YAML file or a directory "
        "of them (group_vars/ and host_vars/ beside it are read), or the JSON of "
        "`ansible-inventory --list` (a .json file, or - for standard input).",
    ),
    click.option(
        "--limit",
        metavar="PATTERN",
        help="Only these inventory hosts, as Ansible's --limit: a:b, a:&b, a:!b, *, ~regex, "
        "group[0], @file.",
    ),
    click.option(
        "--forks",
        type=click.IntRange(1, 1000),
        help=f"Hosts to work on at once (default: forks in tune's config, else {DEFAULT_FORKS}).",
    ),
]
# Repeatable only to refuse a second -H by name: click would otherwise keep the last one.
_ONE_HOST_OPTION = click.option(
    "-H", "--host", "host", multiple=True, metavar="[USER@]HOST[:PORT]", help=_HOST_HELP.format("")
)
_SSH_OPTIONS = [
    # default None: absent from the command line, the configured `sudo` decides.
    click.option(
        "--sudo",
        is_flag=True,
        default=None,
        help="Read as root through passwordless sudo (default: sudo in tune's config).",
    ),
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
_SSH_FIELDS = ["sudo", "ssh_config", "accept_new_host_keys", "connect_timeout", "command_timeout"]
_FLEET_FIELDS = ["hosts", "inventory", "limit", "forks"]


def _decorated(
    command: Callable[..., int],
    options: list[Any],
    remote: Callable[[dict[str, Any]], RemoteOptions],
) -> Callable[..., int]:
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        return command(*args, remote=remote(kwargs), **kwargs)

    decorated: Callable[..., int] = wrapper
    for option in reversed(options):
        decorated = option(decorated)
    return decorated


def _settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {name: kwargs.pop(name) for name in _SSH_FIELDS}


def remote_options(command: Callable[..., int]) -> Callable[..., int]:
    """Add the options of a command that works across hosts; it receives them as `remote`."""

    def remote(kwargs: dict[str, Any]) -> RemoteOptions:
        fleet = {name: kwargs.pop(name) for name in _FLEET_FIELDS}
        if fleet["limit"] is not None and fleet["inventory"] is None:
            fleet["inventory"] = configured_inventory()
        return RemoteOptions(**fleet, **_settings(kwargs))

    return _decorated(command, [*_FLEET_OPTIONS, *_SSH_OPTIONS], remote)


def one_host_options(command: Callable[..., int]) -> Callable[..., int]:
    """Add the options of a command that works on one host: one -H and the SSH options."""

    def remote(kwargs: dict[str, Any]) -> RemoteOptions:
        hosts = kwargs.pop("host")
        if len(hosts) > 1:
            name = click.get_current_context().command_path
            raise UsageError(f"{name} works on one host; give a single -H.")
        return RemoteOptions(hosts=hosts, **_settings(kwargs))

    return _decorated(command, [_ONE_HOST_OPTION, *_SSH_OPTIONS], remote)


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
