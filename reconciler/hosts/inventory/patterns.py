"""`--limit` as Ansible reads it: `a,b` or `a:b` (union), `&g` (and), `!g` (not), shell
wildcards, `~regex`, `group[0]` and `group[1:3]` subscripts, and `@file` (one pattern a line).

A pattern that names no host and no group is an error: Ansible only warns, and a typo there
would quietly leave a host out of the run.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

from ...core.bounded import MAX_INVENTORY_BYTES, read_bounded
from ...core.errors import InventoryError, reason
from .model import UNGROUPED, Inventory

_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+):([0-9]*))\]$")
_COLON_PARTS = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
_IPV6 = re.compile(r"[0-9a-fA-F:.]*:[0-9a-fA-F:.]*:[0-9a-fA-F:.]*")


def select(inventory: Inventory, limit: str | None) -> list[str]:
    """The inventory's hosts that `limit` selects, in inventory order."""
    if limit is None:
        return list(inventory.hosts)
    chosen = set(evaluate(inventory, limit_patterns(limit)))
    return [h for h in inventory.hosts if h in chosen]


def limit_patterns(limit: str) -> list[str]:
    found: list[str] = []
    for item in split_patterns(limit):
        if item.startswith("@"):
            found.extend(_patterns_file(item[1:]))
        else:
            found.append(item)
    return [p for p in found if p]


def split_patterns(text: str) -> list[str]:
    """Commas separate patterns; failing those, colons do, except inside `[...]` and in a single
    address (`host:22`, an IPv6 address), as Ansible's `split_host_pattern`."""
    if "," in text:
        parts = text.split(",")
    elif _one_address(text.strip()):
        parts = [text]
    else:
        parts = _COLON_PARTS.findall(text)
    return [p.strip() for p in parts if p.strip()]


def _one_address(text: str) -> bool:
    outside = re.sub(r"\[[^\]]*\]", "", text)
    if ":" not in outside:
        return True
    if _IPV6.fullmatch(text):
        return True
    head, _, port = text.rpartition(":")
    return port.isdigit() and ":" not in re.sub(r"\[[^\]]*\]", "", head)


def _patterns_file(path: str) -> list[str]:
    try:
        text = read_bounded(path, MAX_INVENTORY_BYTES, "a --limit file").decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(f"--limit @{path}: cannot read the file ({reason(exc)}).") from exc
    return [line.strip() for line in text.splitlines()]


def evaluate(inventory: Inventory, patterns: Sequence[str]) -> list[str]:
    """Plain patterns first (their union), then each `&` narrows and each `!` removes; only `&`
    and `!` start from every host."""
    plain = [p for p in patterns if p[0] not in "&!"] or ["all"]
    ordered = plain + [p for p in patterns if p[0] == "&"] + [p for p in patterns if p[0] == "!"]
    hosts: list[str] = []
    for pattern in ordered:
        if pattern in inventory.hosts:
            hosts.append(pattern)
            continue
        found = _match_one(inventory, pattern)
        if pattern[0] == "!":
            hosts = [h for h in hosts if h not in set(found)]
        elif pattern[0] == "&":
            hosts = [h for h in hosts if h in set(found)]
        else:
            hosts.extend(found)
    return list(dict.fromkeys(hosts))


def _match_one(inventory: Inventory, pattern: str) -> list[str]:
    bare = pattern[1:] if pattern[0] in "&!" else pattern
    expression, subscript = _split_subscript(bare)
    hosts = _matches(inventory, expression)
    if not hosts:
        raise InventoryError(f"--limit {pattern!r} matches no host or group of {inventory.source}.")
    if subscript is None:
        return hosts
    start, end = subscript
    if not -len(hosts) <= start < len(hosts):
        raise InventoryError(
            f"--limit {pattern!r}: {expression} has {len(hosts)} hosts, no host [{start}]."
        )
    if end is None:
        return [hosts[start]]
    return hosts[start : (len(hosts) - 1 if end == -1 else end) + 1]


def _split_subscript(pattern: str) -> tuple[str, tuple[int, int | None] | None]:
    """`gpu[0]`, `gpu[-1]`, `gpu[1:3]` (inclusive), `gpu[2:]`; a regex keeps its brackets."""
    match = _SUBSCRIPT.match(pattern)
    if pattern.startswith("~") or match is None:
        return pattern, None
    name, index, start, end = match.groups()
    if index is not None:
        return name, (int(index), None)
    return name, (int(start), int(end) if end else -1)


def _matches(inventory: Inventory, expression: str) -> list[str]:
    """Every host of the groups `expression` names; hosts by name too where it is a regex, a
    wildcard, or names no group (as Ansible's `_enumerate_matches`)."""
    groups = _match_list([*dict.fromkeys([*inventory.groups, "all", UNGROUPED])], expression)
    found = [h for g in groups for h in inventory.members(g)]
    wildcard = expression[0] == "~" or any(c in expression for c in ".?*[")
    if not groups or wildcard:
        found += _match_list(list(inventory.hosts), expression)
    return list(dict.fromkeys(found))


def _match_list(names: list[str], expression: str) -> list[str]:
    try:
        if expression[0] == "~":
            compiled = re.compile(expression[1:])
        else:
            compiled = re.compile(fnmatch.translate(expression))
    except re.error as exc:
        raise InventoryError(f"--limit {expression!r}: not a valid pattern ({exc}).") from exc
    return [name for name in names if compiled.match(name)]
