"""Reading an inventory as `ansible -i` does: a file, a directory of them, or the JSON of
`ansible-inventory --list` (a `.json` file, or `-` for standard input), then `group_vars/` and
`host_vars/` beside it. What tune cannot read fully is an error naming the file, never skipped:
an executable inventory script (tune never runs it), an inventory plugin's configuration."""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from ...core.bounded import MAX_INVENTORY_BYTES
from ...core.errors import InventoryError
from .formats import parse_ini, parse_listing, parse_yaml
from .model import Inventory
from .values import load_yaml, read_text

STDIN = "-"
# Ansible's INVENTORY_IGNORE_EXTS and the names it always skips in an inventory directory.
IGNORED = re.compile(
    r"^\.|^host_vars$|^group_vars$|^vars_plugins$"
    r"|(\.pyc|\.pyo|\.swp|\.bak|~|\.rpm|\.md|\.txt|\.rst|\.orig|\.cfg|\.retry)$"
)
VARS_EXTENSIONS = ("", ".yml", ".yaml", ".json")


def load_inventory(path: str | Path) -> Inventory:
    source = str(path)
    inventory = Inventory(source)
    if source == STDIN:
        text = sys.stdin.read(MAX_INVENTORY_BYTES + 1)
        if len(text) > MAX_INVENTORY_BYTES:
            raise InventoryError(
                f"standard input: an inventory larger than {MAX_INVENTORY_BYTES >> 20} MiB."
            )
        parse_listing(inventory, text, "standard input")
        return inventory
    where = Path(path)
    if where.is_dir():
        _read_directory(inventory, where)
        base = where
    else:
        _read_file(inventory, where)
        base = where.parent
    if not where.name.endswith(".json"):
        # `ansible-inventory --list` has already merged them into _meta.hostvars.
        read_vars_directories(inventory, base)
    return inventory


def _read_directory(
    inventory: Inventory, directory: Path, seen: frozenset[str] = frozenset()
) -> None:
    real = os.path.realpath(directory)
    if real in seen:  # a link back up the tree would be read for ever
        raise InventoryError(f"{directory}: a link back to a directory of the inventory.")
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise InventoryError(f"{directory}: cannot list the inventory ({exc.strerror}).") from exc
    for name in names:
        if IGNORED.search(name):
            continue
        path = directory / name
        if path.is_dir():
            _read_directory(inventory, path, seen | {real})
        else:
            _read_file(inventory, path)


def _read_file(inventory: Inventory, path: Path) -> None:
    source = str(path)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise InventoryError(f"{source}: cannot read the inventory ({exc.strerror}).") from exc
    if stat.S_ISREG(mode) and mode & 0o111:
        raise InventoryError(
            f"{source}: is executable, an inventory script Ansible would run; tune never runs "
            f"it: give tune what `ansible-inventory -i {source} --list > hosts.json` prints."
        )
    text = read_text(path, "the inventory")
    if path.name.endswith(".json"):
        parse_listing(inventory, text, source)
        return
    significant = [line for line in text.splitlines() if line.strip()[:1] not in ("", "#", ";")]
    if any(line.lstrip().startswith("[") for line in significant):
        parse_ini(inventory, text, source)
        return
    # Ansible tries its YAML plugin, then INI: a file of host lines reads as one YAML string.
    try:
        data = load_yaml(text, source)
    except InventoryError:
        if any(_MAPPING_KEY.match(line) for line in significant):
            raise
        data = None
    if isinstance(data, dict):
        parse_yaml(inventory, data, source)
    else:
        parse_ini(inventory, text, source)


_MAPPING_KEY = re.compile(r"^\s*[^=\s][^=]*:(\s|$)")


def read_vars_directories(inventory: Inventory, base: Path) -> None:
    """`group_vars/<group>` and `host_vars/<host>` as Ansible's host_group_vars plugin finds
    them: the bare name, else `.yml`, `.yaml`, `.json` (the first that exists); a directory of
    that name is every file in it, sorted, subdirectories included, later files winning."""
    for subdir, names, into in (
        ("group_vars", ["all", "ungrouped", *inventory.groups], inventory.group_files),
        ("host_vars", list(inventory.hosts), inventory.host_files),
    ):
        directory = base / subdir
        if not directory.is_dir():
            continue
        for name in dict.fromkeys(names):
            merged: dict[str, Any] = {}
            for found in _vars_files(directory, name):
                merged.update(_vars_file(found))
            if merged:
                into[name] = merged


def _vars_files(directory: Path, name: str) -> list[Path]:
    if "/" in name or name in ("", ".", ".."):
        return []  # a host named like a path cannot have a file of its own there
    for extension in VARS_EXTENSIONS:
        path = directory / f"{name}{extension}"
        if path.is_dir():
            return _files_below(path)
        if path.exists():
            return [path]
    return []


def _files_below(directory: Path) -> list[Path]:
    found: list[Path] = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(".") or name.endswith("~"):
            continue
        path = directory / name
        extension = os.path.splitext(name)[1]
        if path.is_dir() and not extension:
            found.extend(_files_below(path))
        elif path.is_file() and extension in VARS_EXTENSIONS:
            found.append(path)
    return found


def _vars_file(path: Path) -> dict[str, Any]:
    data = load_yaml(read_text(path, "a variables file"), str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InventoryError(f"{path}: expected variables (a mapping), not {type(data).__name__}.")
    return {str(key): value for key, value in data.items()}
