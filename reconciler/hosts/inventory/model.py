"""An Ansible inventory as data: hosts in file order, groups, and the variables of each layer,
merged with Ansible's precedence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A group's place among its equals when their variables merge; not a variable itself.
PRIORITY = "ansible_group_priority"
# Where a host in no group but `all` is, as Ansible files it (group_vars/ungrouped.yml applies).
UNGROUPED = "ungrouped"


@dataclass
class InventoryGroup:
    name: str
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class Inventory:
    """`hosts` and `groups` hold the inventory sources' own variables; `group_files` and
    `host_files` those of `group_vars/` and `host_vars/` beside them."""

    source: str
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, InventoryGroup] = field(default_factory=dict)
    group_files: dict[str, dict[str, Any]] = field(default_factory=dict)
    host_files: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Which groups hold each host: worked out once, when the sources are all read.
    _held: dict[str, list[str]] | None = field(default=None, repr=False)

    def group(self, name: str) -> InventoryGroup:
        return self.groups.setdefault(name, InventoryGroup(name))

    def add_host(self, group: str, name: str, variables: dict[str, Any]) -> None:
        self._held = None
        self.hosts.setdefault(name, {}).update(variables)
        members = self.group(group).hosts
        if name not in members:
            members.append(name)

    def add_child(self, parent: str, child: str) -> None:
        self._held = None
        children = self.group(parent).children
        if child not in children:
            children.append(child)
        self.group(child)

    def members(self, group: str) -> list[str]:
        """Every host in `group` and its child groups, in inventory order (`all` holds every
        host; `ungrouped` those in no other group, whatever a source listed there)."""
        if group == "all":
            return list(self.hosts)
        if group == UNGROUPED:
            return [h for h in self.hosts if not self._groups_of(h)]
        found = self.groups.get(group)
        if found is None:
            return []
        names: list[str] = []
        pending, seen = [found], {group}
        while pending:
            current = pending.pop(0)
            names.extend(current.hosts)
            for child in current.children:
                if child not in seen and child in self.groups:
                    seen.add(child)
                    pending.append(self.groups[child])
        # A group's own hosts, then its children's: the order Ansible's `group[0]` counts in.
        return list(dict.fromkeys(names))

    def groups_of(self, host: str) -> list[str]:
        """The groups holding `host`, directly or through a child group, `all` left out."""
        return self._groups_of(host) or [UNGROUPED]

    def _groups_of(self, host: str) -> list[str]:
        if self._held is None:
            held: dict[str, list[str]] = {}
            for name in self.groups:
                if name not in ("all", UNGROUPED):
                    for member in self.members(name):
                        held.setdefault(member, []).append(name)
            self._held = held
        return self._held.get(host, [])

    def depths(self) -> dict[str, int]:
        """How deep each group sits below `all` (its longest path): deeper groups' variables
        win, as Ansible sorts them."""
        depth: dict[str, int] = {}

        def visit(name: str, level: int, path: frozenset[str]) -> None:
            if name in path or depth.get(name, -1) >= level:
                return
            depth[name] = level
            for child in self.groups.get(name, InventoryGroup(name)).children:
                visit(child, level + 1, path | {name})

        for name in self.groups:
            visit(name, 1 if name != "all" else 0, frozenset())
        depth["all"] = 0
        return depth

    def variables(self, host: str) -> dict[str, Any]:
        """Ansible's precedence, lowest first: the sources' `all` vars, their other groups'
        vars (parents before children, then `ansible_group_priority`, then name), then
        `group_vars/all`, `group_vars/<group>` in the same order, the host's own variables in
        the sources, and last `host_vars/<host>`."""
        depth = self.depths()

        def order(name: str) -> tuple[int, int, str]:
            group = self.groups.get(name)
            priority = 1 if group is None else group.vars.get(PRIORITY, 1)
            try:
                return depth.get(name, 1), int(priority), name
            except (TypeError, ValueError):
                return depth.get(name, 1), 1, name

        holding = sorted(self.groups_of(host), key=order)
        merged: dict[str, Any] = {}
        for name in ["all", *holding]:
            if name in self.groups:
                merged.update(self.groups[name].vars)
        merged.pop(PRIORITY, None)
        merged.update(self.group_files.get("all", {}))
        for name in holding:
            merged.update(self.group_files.get(name, {}))
        merged.update(self.hosts[host])
        merged.update(self.host_files.get(host, {}))
        return merged
