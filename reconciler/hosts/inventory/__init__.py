"""Ansible inventories, read as Ansible reads them, into the `Target`s tune connects to."""

from __future__ import annotations

from pathlib import Path

from ...core.errors import InventoryError
from ..targets import Target
from .connection import to_target
from .load import load_inventory
from .model import Inventory
from .patterns import select

__all__ = ["Inventory", "inventory_targets", "load_inventory"]


def inventory_targets(path: str | Path, limit: str | None = None) -> list[Target]:
    """The hosts of the inventory at `path` that `limit` selects, with their connections."""
    inventory = load_inventory(path)
    names = select(inventory, limit)
    if not names:
        what = f" matching --limit {limit!r}" if limit is not None else ""
        raise InventoryError(f"{inventory.source}: no hosts{what}.")
    return [to_target(n, inventory.variables(n), inventory.source) for n in names]
