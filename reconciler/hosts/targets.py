"""Which machines to reach: `-H` host strings and Ansible inventories, as plain data.

Nothing here connects or imports an SSH library; `ssh.py` turns a `Target` into a connection and
resolves `~/.ssh/config` aliases the way `ssh` does (the inventory's `ansible_host` is what is
looked up there, as Ansible's ssh connection does).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import string
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InventoryError, UsageError
from .bounded import MAX_INVENTORY_BYTES, read_bounded


@dataclass(frozen=True)
class Target:
    """A machine to reach over SSH. Unset fields come from `~/.ssh/config`, then ssh's
    defaults (the local user name, port 22)."""

    name: str  # as the operator wrote it: the inventory name or the -H string
    host: str  # what ssh connects to: an address, a DNS name or an ssh_config alias
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None


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


# --- Ansible inventories -------------------------------------------------------------------

HOST_VARS = {
    "host": ("ansible_host", "ansible_ssh_host"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "identity_file": ("ansible_ssh_private_key_file", "ansible_private_key_file"),
}


@dataclass
class _Group:
    name: str
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class Inventory:
    """Hosts in file order, their own variables, and the groups that hold them."""

    source: str
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, _Group] = field(default_factory=dict)

    def group(self, name: str) -> _Group:
        return self.groups.setdefault(name, _Group(name))

    def add_host(self, group: str, name: str, variables: dict[str, Any]) -> None:
        self.hosts.setdefault(name, {}).update(variables)
        members = self.group(group).hosts
        if name not in members:
            members.append(name)

    def members(self, group: str, seen: frozenset[str] = frozenset()) -> list[str]:
        """Every host in `group` and its child groups (`all` holds every host)."""
        if group == "all":
            return list(self.hosts)
        found = self.groups.get(group)
        if found is None or group in seen:
            return []
        names = list(found.hosts)
        for child in found.children:
            names.extend(self.members(child, seen | {group}))
        return list(dict.fromkeys(names))

    def depths(self) -> dict[str, int]:
        """How deep each group sits below `all`: deeper groups' variables win."""
        depth: dict[str, int] = {}

        def visit(name: str, level: int, path: frozenset[str]) -> None:
            if name in path or depth.get(name, -1) >= level:
                return
            depth[name] = level
            for child in self.groups.get(name, _Group(name)).children:
                visit(child, level + 1, path | {name})

        for name in self.groups:
            visit(name, 1 if name != "all" else 0, frozenset())
        depth["all"] = 0
        return depth

    def variables(self, host: str) -> dict[str, Any]:
        """Ansible's precedence: `all`, then parent groups before their children, then the
        host's own variables."""
        depth = self.depths()
        holding = [g for g in self.groups if host in self.members(g)]
        merged: dict[str, Any] = dict(self.groups["all"].vars) if "all" in self.groups else {}
        for name in sorted(holding, key=lambda g: (depth.get(g, 1), g)):
            if name != "all":
                merged.update(self.groups[name].vars)
        merged.update(self.hosts[host])
        return merged

    def target(self, host: str) -> Target:
        variables = self.variables(host)

        def pick(field_name: str) -> Any:
            for key in HOST_VARS[field_name]:
                if variables.get(key) not in (None, ""):
                    return variables[key]
            return None

        port = pick("port")
        try:
            port = None if port is None else int(port)
        except ValueError:
            raise InventoryError(
                f"{self.source}: {host}: ansible_port {port!r} is not a number."
            ) from None
        user, key = pick("user"), pick("identity_file")
        return Target(
            name=host,
            host=str(pick("host") or host),
            user=None if user is None else str(user),
            port=port,
            identity_file=None if key is None else str(key),
        )

    def select(self, limit: str | None) -> list[Target]:
        names = list(self.hosts) if limit is None else self._limited(limit)
        if not names:
            what = f" matching --limit {limit!r}" if limit is not None else ""
            raise InventoryError(f"{self.source}: no hosts{what}.")
        return [self.target(n) for n in names]

    def _limited(self, limit: str) -> list[str]:
        """Ansible's host patterns: `a,b` or `a:b` union, `&g` intersection, `!g` exclusion;
        each a host or group name, with shell wildcards."""
        items = [i for i in re.split(r"[,:]", limit) if i.strip()]
        plain = [i for i in items if i[0] not in "!&"]
        chosen = self._matching(plain) if plain else list(self.hosts)
        for item in items:
            if item[0] == "&":
                keep = set(self._matching([item[1:]]))
                chosen = [h for h in chosen if h in keep]
            elif item[0] == "!":
                drop = set(self._matching([item[1:]]))
                chosen = [h for h in chosen if h not in drop]
        return chosen

    def _matching(self, patterns: Iterable[str]) -> list[str]:
        found: list[str] = []
        for pattern in patterns:
            pattern = pattern.strip()
            groups = [g for g in [*self.groups, "all"] if fnmatch.fnmatchcase(g, pattern)]
            hosts = [h for h in self.hosts if fnmatch.fnmatchcase(h, pattern)]
            for group in groups:
                hosts.extend(self.members(group))
            found.extend(hosts)
        order = {h: n for n, h in enumerate(self.hosts)}
        return sorted(dict.fromkeys(found), key=order.__getitem__)


def load_inventory(path: str | Path) -> Inventory:
    """An Ansible inventory file, INI or YAML (told apart by content, as Ansible does)."""
    source = str(path)
    try:
        text = read_bounded(path, MAX_INVENTORY_BYTES, "an inventory").decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(f"{source}: cannot read the inventory ({exc}).") from exc
    inventory = Inventory(source)
    stripped = [line.strip() for line in text.splitlines()]
    looks_ini = any(line.startswith("[") for line in stripped if line and line[0] not in "#;")
    if looks_ini or not text.strip():
        _parse_ini(inventory, text)
    else:
        _parse_yaml(inventory, text)
    return inventory


def _parse_ini(inventory: Inventory, text: str) -> None:
    section, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        where = f"{inventory.source}:{number}"
        if line.startswith("["):
            if not line.endswith("]"):
                raise InventoryError(f"{where}: unclosed section header {line!r}.")
            section, _, kind = line[1:-1].partition(":")
            kind = kind or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise InventoryError(f"{where}: unknown section kind {kind!r}.")
            inventory.group(section)
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise InventoryError(f"{where}: {exc}.") from exc
        if not words:
            continue
        if kind == "vars":
            key, sep, value = line.partition("=")
            if not sep:
                raise InventoryError(f"{where}: expected key=value in [{section}:vars].")
            inventory.group(section).vars[key.strip()] = _ini_value(value.strip())
        elif kind == "children":
            inventory.group(section).children.append(words[0])
            inventory.group(words[0])
        else:
            variables = {}
            for word in words[1:]:
                key, sep, value = word.partition("=")
                if not sep:
                    raise InventoryError(
                        f"{where}: expected key=value after the host, got {word!r}."
                    )
                variables[key] = _ini_value(value)
            for name in expand_range(words[0], where):
                inventory.add_host(section, name, variables)


def _ini_value(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _parse_yaml(inventory: Inventory, text: str) -> None:
    # Only YAML inventories pay for the YAML parser: `tune plan -H` over a fleet does not.
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe").load(text)
    except YAMLError as exc:
        raise InventoryError(f"{inventory.source}: not valid YAML ({exc}).") from exc
    if not isinstance(data, dict):
        raise InventoryError(f"{inventory.source}: expected groups at the top level.")
    for name, body in data.items():
        _yaml_group(inventory, str(name), body)


def _yaml_group(inventory: Inventory, name: str, body: Any) -> None:
    group = inventory.group(name)
    if body is None:
        return
    if not isinstance(body, dict):
        raise InventoryError(f"{inventory.source}: group {name!r} must be a mapping.")
    unknown = set(body) - {"hosts", "vars", "children"}
    if unknown:
        raise InventoryError(
            f"{inventory.source}: group {name!r} has unknown keys {', '.join(sorted(unknown))}."
        )
    for key in ("hosts", "vars", "children"):
        if not isinstance(body.get(key) or {}, dict):
            raise InventoryError(f"{inventory.source}: {key} of group {name!r} must be a mapping.")
    for host, variables in (body.get("hosts") or {}).items():
        if variables is not None and not isinstance(variables, dict):
            raise InventoryError(f"{inventory.source}: host {host!r} variables must be a mapping.")
        for expanded in expand_range(str(host), inventory.source):
            inventory.add_host(name, expanded, dict(variables or {}))
    group.vars.update(body.get("vars") or {})
    for child, child_body in (body.get("children") or {}).items():
        if str(child) not in group.children:
            group.children.append(str(child))
        _yaml_group(inventory, str(child), child_body)


_RANGE = re.compile(r"\[([0-9a-z]+):([0-9a-z]+)(?::(\d+))?\]")


def expand_range(name: str, where: str) -> Iterator[str]:
    """Ansible's host ranges: `gpu[01:16]` (zero padding kept), `node[a:c]`, `x[0:10:2]`."""
    match = _RANGE.search(name)
    if match is None:
        yield name
        return
    first, last, step = match[1], match[2], int(match[3] or 1)
    head, tail = name[: match.start()], name[match.end() :]
    if first.isdigit() and last.isdigit():
        width = len(first) if first.startswith("0") else 0
        values = [str(n).zfill(width) for n in range(int(first), int(last) + 1, step)]
    elif len(first) == len(last) == 1 and first.isalpha() and last.isalpha():
        letters = string.ascii_lowercase
        values = list(letters[letters.index(first) : letters.index(last) + 1 : step])
    else:
        raise InventoryError(f"{where}: cannot expand the host range in {name!r}.")
    for value in values:
        yield from expand_range(head + value + tail, where)
