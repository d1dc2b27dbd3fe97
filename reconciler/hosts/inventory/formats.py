"""The inventory sources Ansible reads from files, parsed into an `Inventory`: INI, YAML, and
the JSON that `ansible-inventory --list` prints (the way to reach dynamic inventories, plugins
and vaults: Ansible resolves them, tune reads the result)."""

from __future__ import annotations

import json
import re
import shlex
import string
from collections.abc import Iterator
from typing import Any

from ...core.errors import InventoryError
from .model import UNGROUPED, Inventory
from .values import Unknowable, text_value

YAML_KEYS = frozenset({"hosts", "vars", "children"})


def parse_ini(inventory: Inventory, text: str, source: str) -> None:
    section, kind = UNGROUPED, "hosts"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        where = f"{source}:{number}"
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
            inventory.group(section).vars[key.strip()] = _ini_value(value.strip(), where)
        elif kind == "children":
            inventory.add_child(section, words[0])
        else:
            variables: dict[str, Any] = {}
            for word in words[1:]:
                key, sep, value = word.partition("=")
                if not sep:
                    raise InventoryError(
                        f"{where}: expected key=value after the host, got {word!r}."
                    )
                variables[key] = _ini_value(value, where)
            add_hosts(inventory, section, words[0], variables, where)


def _ini_value(value: str, where: str) -> str | Unknowable:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return text_value(value, where)


def parse_yaml(inventory: Inventory, data: Any, source: str) -> None:
    if data is None:
        return
    if not isinstance(data, dict):
        raise InventoryError(f"{source}: expected groups at the top level.")
    if "plugin" in data:
        raise InventoryError(
            f"{source}: configures the inventory plugin {data['plugin']!r}, which tune does not "
            f"run; give tune what `ansible-inventory -i {source} --list > hosts.json` prints."
        )
    for name, body in data.items():
        _yaml_group(inventory, str(name), body, source)


def _yaml_group(inventory: Inventory, name: str, body: Any, source: str) -> None:
    group = inventory.group(name)
    if body is None:
        return
    if not isinstance(body, dict):
        raise InventoryError(f"{source}: group {name!r} must be a mapping.")
    unknown = set(body) - YAML_KEYS
    if unknown:
        raise InventoryError(
            f"{source}: group {name!r} has unknown keys {', '.join(sorted(map(str, unknown)))}."
        )
    for key in YAML_KEYS:
        if not isinstance(body.get(key) or {}, dict):
            raise InventoryError(f"{source}: {key} of group {name!r} must be a mapping.")
    for host, variables in (body.get("hosts") or {}).items():
        if variables is not None and not isinstance(variables, dict):
            raise InventoryError(f"{source}: host {host!r} variables must be a mapping.")
        add_hosts(inventory, name, str(host), dict(variables or {}), source)
    group.vars.update(body.get("vars") or {})
    for child, child_body in (body.get("children") or {}).items():
        inventory.add_child(name, str(child))
        _yaml_group(inventory, str(child), child_body, source)


def parse_listing(inventory: Inventory, text: str, source: str) -> None:
    """`ansible-inventory --list`: groups with `hosts` and `children` lists (and `vars` from
    inventory scripts), every host's merged variables in `_meta.hostvars`. A vaulted value
    is printed as {"__ansible_vault": ...}."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        said = f"{source}: not the JSON of `ansible-inventory --list` ({exc})."
        raise InventoryError(said) from exc
    except ValueError:  # Python builds no integer of more than 4,300 digits from text
        said = f"{source}: a number of thousands of digits, more than tune reads."
        raise InventoryError(said) from None
    except RecursionError:
        raise InventoryError(f"{source}: JSON nested too deep for tune to read.") from None
    if not isinstance(data, dict):
        raise InventoryError(f"{source}: expected the object `ansible-inventory --list` prints.")
    meta = data.get("_meta") or {}
    hostvars = meta.get("hostvars") if isinstance(meta, dict) else None
    if not isinstance(hostvars, dict):
        raise InventoryError(f"{source}: no _meta.hostvars: expected `ansible-inventory --list`.")
    for name, body in data.items():
        if name == "_meta":
            continue
        if not isinstance(body, dict):
            raise InventoryError(f"{source}: group {name!r} must be an object.")
        for host in _string_list(body.get("hosts"), source, f"hosts of group {name!r}"):
            inventory.add_host(name, host, {})
        for child in _string_list(body.get("children"), source, f"children of group {name!r}"):
            inventory.add_child(name, child)
        variables = body.get("vars") or {}
        if not isinstance(variables, dict):
            raise InventoryError(f"{source}: vars of group {name!r} must be an object.")
        inventory.group(name).vars.update(_vaulted(variables, source))
    for host, variables in hostvars.items():
        if not isinstance(variables, dict):
            raise InventoryError(f"{source}: _meta.hostvars of {host!r} must be an object.")
        inventory.hosts.setdefault(host, {}).update(_vaulted(variables, source))
    # Hosts in the order Ansible walks the groups from `all`, not the JSON's order of keys.
    walked = [h for name in _walk(inventory, "all") for h in inventory.groups[name].hosts]
    order = {host: n for n, host in enumerate(dict.fromkeys(walked))}
    inventory.hosts = dict(
        sorted(inventory.hosts.items(), key=lambda h: order.get(h[0], len(order)))
    )


def _walk(inventory: Inventory, name: str, seen: set[str] | None = None) -> list[str]:
    seen = set() if seen is None else seen
    if name in seen or name not in inventory.groups:
        return []
    seen.add(name)
    return [name] + [
        g for child in inventory.groups[name].children for g in _walk(inventory, child, seen)
    ]


def _string_list(value: Any, source: str, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InventoryError(f"{source}: {what} must be a list of names.")
    return value


def _vaulted(variables: dict[str, Any], source: str) -> dict[str, Any]:
    def one(value: Any) -> Any:
        if isinstance(value, dict) and "__ansible_vault" in value:
            return Unknowable(source, "encrypted with Ansible Vault")
        if isinstance(value, str):
            return text_value(value, source)
        return value

    return {key: one(value) for key, value in variables.items()}


def add_hosts(
    inventory: Inventory, group: str, pattern: str, variables: dict[str, Any], where: str
) -> None:
    """One host line: a name or range, with an optional `:port` as Ansible's `host:port`."""
    name, port = _split_port(pattern)
    if port is not None:
        variables = {"ansible_port": port, **variables}
    for expanded in expand_range(name, where):
        inventory.add_host(group, expanded, variables)


def _split_port(pattern: str) -> tuple[str, int | None]:
    """`host:2222`, `[fd00::1]:2222`; a bare IPv6 address or a `[1:3]` range has no port."""
    bracketed = sum(part.count(":") for part in re.findall(r"\[[^\]]*\]", pattern))
    if pattern.count(":") - bracketed != 1:
        return pattern, None
    name, _, port = pattern.rpartition(":")
    if not port.isdigit():
        return pattern, None
    if name.startswith("[") and name.endswith("]") and ":" in name:
        name = name[1:-1]  # an IPv6 address in brackets
    return name, int(port)


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
