"""Defaults from a config file and the environment, as `ansible.cfg` and `ANSIBLE_*` give
Ansible's: the inventory, forks, the ssh_config and sudo. The command line wins over
`TUNE_*`, which wins over `~/.config/tune/config.toml`, which wins over
`/etc/tune/config.toml`.

Each setting is read where it is used, and only when the command line does not give it:
`forks` over a fleet, `ssh_config` and `sudo` when a host is reached over SSH, the inventory
when `--limit` is given without `-i` (a bare `tune check` from cron, on the host itself, must
keep meaning this machine). A bad value fails only the commands that use it, in one sentence
naming the setting and where it came from; an unknown key is a warning.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ..core.bounded import read_bounded
from ..core.errors import ExitCode, UsageError, reason
from ..core.printable import printable
from ..hosts.trust import Owned, UntrustedState, above, problem
from ..render import documents
from .exits import exits
from .helptext import examples
from .output import Output, output_options

SYSTEM = Path("/etc/tune/config.toml")
ENV_PREFIX = "TUNE_"
MAX_CONFIG_BYTES = 64 << 10
TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})
DEFAULT = "default"


def user_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "tune" / "config.toml"


def _path(value: Any) -> str:
    if not isinstance(value, str) or not value or "\0" in value:
        raise ValueError("expected a path")
    return os.path.expanduser(value)


def _forks(value: Any) -> int:
    # A TOML integer, or the text of TUNE_FORKS; a TOML boolean is an int to Python.
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9]{1,9}\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise ValueError("expected a number from 1 to 1000")
    return value


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str | int) else ""
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


class Settings:
    """tune's defaults from its config files and TUNE_*, read when a command first needs one
    and checked where used: a bad `forks` fails the commands that take --forks, and only
    when the command line does not give it (a pull timer's `tune apply` keeps working). Each
    file is read once; an unknown key in it is a warning on stderr, once."""

    def __init__(self, warn: Callable[[str], None] | None = None) -> None:
        self._warn = warn or (lambda text: click.echo(printable(text), err=True))
        self._files: dict[Path, dict[str, Any]] = {}

    def get(self, key: str) -> Setting:
        """`key`'s value and where it comes from; UsageError in one sentence that names the
        setting and its source when that value is not one tune takes."""
        name = ENV_PREFIX + key.upper()
        raw = os.environ.get(name)
        if raw:
            try:
                return Setting(key, KEYS[key](raw), name)
            except ValueError as exc:
                raise UsageError(f"{name}={printable(raw)}: {exc}.") from None
        for path in (user_file(), SYSTEM):
            values = self._file(path)
            if key in values:
                try:
                    return Setting(key, KEYS[key](values[key]), str(path))
                except ValueError as exc:
                    raise UsageError(f"{path}: {key} = {_shown(values[key])}: {exc}.") from None
        return Setting(key, DEFAULTS[key], DEFAULT)

    def all(self) -> list[Setting]:
        return [self.get(key) for key in KEYS]

    def _file(self, path: Path) -> dict[str, Any]:
        if path not in self._files:
            self._files[path] = self._read(path)
        return self._files[path]

    def _read(self, path: Path) -> dict[str, Any]:
        import tomllib

        text = trusted_text(path)
        if text is None:
            return {}
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{path}: not valid TOML ({exc}).") from None
        for key in data.keys() - KEYS.keys():
            known = ", ".join(KEYS)
            self._warn(f"tune: {path}: unknown setting {key} ignored (tune reads {known}).")
        return {key: value for key, value in data.items() if key in KEYS}


def _shown(value: Any) -> str:
    """A TOML value as TOML writes it (strings quoted as TOML's basic strings are)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return printable(json.dumps(value, ensure_ascii=False))
    if isinstance(value, int | float):
        return str(value)
    return "an array" if isinstance(value, list) else "a table"


def trusted_text(path: Path) -> str | None:
    """The text of the config file at `path`, None when there is none. tune runs as root, and
    `sudo -E` keeps HOME and XDG_CONFIG_HOME: a config file names the ssh_config whose
    ProxyCommand and `Match exec` run as the caller, so one that another user wrote, or could
    swap (a directory above it that they own or can write), is refused as tune's state is
    (`trust.above`: a sticky /tmp further up swaps nothing)."""
    try:
        resolved = path.resolve(strict=True)
    except FileNotFoundError:
        return None
    except (OSError, RuntimeError) as exc:  # RuntimeError: a loop of links, before 3.13
        said = reason(exc) if isinstance(exc, OSError) else "a loop of symbolic links"
        raise UsageError(f"{path}: cannot read the config file ({said}).") from None
    caller = os.geteuid()

    def refuse(where: Path, why: str) -> UntrustedState:
        named = "" if where == resolved else f"{where}: "
        return UntrustedState(
            f"refusing to read the config file {path}: {named}{why}; tune reads only a config "
            "file that root or you wrote, in directories nobody else can change."
        )

    for directory in resolved.parents:
        try:
            info = os.lstat(directory)
            owned = Owned.of(info) if directory == resolved.parent else above(info)
            why = problem(owned, caller, directory=True)
        except OSError as exc:
            raise UsageError(f"{path}: cannot read the config file ({reason(exc)}).") from None
        if why is not None:
            raise refuse(directory, why)

    def judge(info: os.stat_result) -> None:
        why = problem(Owned.of(info), caller, directory=False)
        if why is not None:
            raise refuse(resolved, why)

    try:
        raw = read_bounded(resolved, MAX_CONFIG_BYTES, "a config file", follow=False, judge=judge)
        return raw.decode()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the config file ({reason(exc)}).") from None


def current() -> Settings:
    """The settings of the command running now (files read once a run), or fresh ones."""
    context = click.get_current_context(silent=True)
    if context is None:
        return Settings()
    meta = context.find_root().meta
    found = meta.get(_META)
    if not isinstance(found, Settings):
        found = meta[_META] = Settings()
    return found


_META = "tune.settings"


def configured(key: str) -> Any:
    """The value of setting `key` for an option the command line did not give, read (and
    checked) where it is used: `--forks` only over a fleet, the SSH settings only when a host
    is reached over SSH, the inventory only with --limit."""
    return current().get(key).value


def configured_inventory() -> str | None:
    value = configured("inventory")
    return None if value is None else str(value)


@examples(
    (
        "Each setting, its value and where it came from",
        "tune config",
    ),
)
@exits(ExitCode.IN_SYNC, ExitCode.HOST_ERROR, ExitCode.USAGE)
@click.command("config")
@output_options("text", "json")
def config_cmd(out: Output) -> int:
    """Show the defaults tune takes from TUNE_* variables and its config files, and where each
    comes from. Files: ~/.config/tune/config.toml, /etc/tune/config.toml (keys: inventory,
    forks, ssh_config, sudo)."""
    found = current().all()
    if out.json:
        rows = [{"key": s.key, "value": s.value, "source": s.source} for s in found]
        out.document(documents.versioned("config", {"settings": rows}))
        return ExitCode.IN_SYNC
    for setting in found:
        value = setting.value
        shown = (
            "-" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        )
        out.echo(f"{setting.key:<10}  {shown:<30}  {setting.source}")
    return ExitCode.IN_SYNC
