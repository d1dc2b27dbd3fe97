"""Defaults from a config file and the environment, as `ansible.cfg` and `ANSIBLE_*` give
Ansible's: the inventory, forks, the ssh_config and sudo. The command line wins over
`TUNE_*`, which wins over `~/.config/tune/config.toml`, which wins over
`/etc/tune/config.toml`.

The configured inventory is used when `--limit` is given without `-i`: a bare `tune check`
(from cron, on the host itself) must keep meaning this machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ..errors import ExitCode, UsageError
from ..hosts.bounded import read_bounded
from .exits import exits

SYSTEM = Path("/etc/tune/config.toml")
ENV_PREFIX = "TUNE_"
MAX_CONFIG_BYTES = 64 << 10
TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


def user_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "tune" / "config.toml"


def _path(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a path")
    return os.path.expanduser(value)


def _forks(value: Any) -> int:
    number = int(value)  # a TOML integer, or the text of TUNE_FORKS
    if isinstance(value, bool) or not 1 <= number <= 1000:
        raise ValueError("expected a number from 1 to 1000")
    return number


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE | FALSE:
        return text in TRUE
    raise ValueError("expected true or false")


KEYS: dict[str, Callable[[Any], Any]] = {
    "inventory": _path,
    "forks": _forks,
    "ssh_config": _path,
    "sudo": _flag,
}
DEFAULTS: dict[str, Any] = {"inventory": None, "forks": 20, "ssh_config": None, "sudo": False}


@dataclass(frozen=True)
class Setting:
    key: str
    value: Any
    source: str  # a file, an environment variable, or "default"


def settings() -> dict[str, Setting]:
    """Every key with its value and where it came from."""
    found = {key: Setting(key, value, "default") for key, value in DEFAULTS.items()}
    for path in (SYSTEM, user_file()):
        for key, value in _read(path).items():
            found[key] = Setting(key, value, str(path))
    for key, convert in KEYS.items():
        name = ENV_PREFIX + key.upper()
        raw = os.environ.get(name)
        if raw:
            try:
                found[key] = Setting(key, convert(raw), name)
            except ValueError as exc:
                raise UsageError(f"{name}={raw!r}: {exc}.") from None
    return found


def _read(path: Path) -> dict[str, Any]:
    import tomllib

    try:
        text = read_bounded(path, MAX_CONFIG_BYTES, "a config file").decode()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the config file ({exc}).") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc}).") from exc
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in KEYS:
            known = ", ".join(KEYS)
            raise UsageError(f"{path}: unknown setting {key!r} (tune reads {known}).")
        try:
            values[key] = KEYS[key](value)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{path}: {key} = {value!r}: {exc}.") from None
    return values


def default_map(commands: Iterable[str]) -> dict[str, dict[str, Any]]:
    """click's `default_map`: what each of `commands` fills in where an option is not given
    (a command without such an option ignores it). The inventory is not among them: it
    applies only with --limit (`configured_inventory`)."""
    values = {
        key: s.value
        for key, s in settings().items()
        if s.source != "default" and key != "inventory"
    }
    return {name: dict(values) for name in commands}


def configured_inventory() -> str | None:
    value = settings()["inventory"].value
    return None if value is None else str(value)


@exits(ExitCode.IN_SYNC, ExitCode.USAGE)
@click.command("config")
def config_cmd() -> int:
    """Show the defaults tune takes from TUNE_* variables and its config files, and where each
    comes from. Files: ~/.config/tune/config.toml, /etc/tune/config.toml (keys: inventory,
    forks, ssh_config, sudo)."""
    for setting in settings().values():
        value = setting.value
        shown = (
            "-" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        )
        click.echo(f"{setting.key:<10}  {shown:<30}  {setting.source}")
    return ExitCode.IN_SYNC
