"""The package's shape: no import cycles, and no name that means two things."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "reconciler"


def module_of(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name, package = module_of(path)
        found[name] = (path, package)
    return found


def _under_type_checking(tree: ast.Module) -> set[int]:
    """Line numbers of imports only type checkers follow."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                for sub in ast.walk(inner):
                    if hasattr(sub, "lineno"):
                        lines.add(sub.lineno)
    return lines


def imports() -> dict[str, set[str]]:
    """Every module's imports of the package's modules, lazy ones included (a cycle through a
    function-level import is still two modules that need each other)."""
    known = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, (path, package) in known.items():
        tree = ast.parse(path.read_text())
        skip = _under_type_checking(tree)
        base = name.split(".") if package else name.split(".")[:-1]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.lineno in skip:
                continue
            if node.level:
                target = ".".join([*base[: len(base) - node.level + 1], node.module or ""])
            else:
                target = node.module or ""
            target = target.rstrip(".")
            if not target.startswith("reconciler"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                graph[name].add(sub if sub in known else target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan). A package's
    `__init__` importing its own modules is not counted as a cycle with them."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def edges(v: str) -> set[str]:
        return {w for w in graph.get(v, set()) if not v.startswith(w + ".")}

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    assert cycles(imports()) == []


def test_the_cycle_finder_finds_one() -> None:
    graph = {
        "reconciler.a": {"reconciler.b"},
        "reconciler.b": {"reconciler.c"},
        "reconciler.c": {"reconciler.a"},
    }
    assert cycles(graph) == [["reconciler.a", "reconciler.b", "reconciler.c"]]


def test_no_class_name_means_two_things() -> None:
    """Two classes of one name in two modules read as one thing to whoever meets both."""
    where: dict[str, list[str]] = defaultdict(list)
    for name, (path, _package) in modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(name)
    twice = {name: found for name, found in where.items() if len(found) > 1}
    assert twice == {}


# What reads facts of a host without being a knob kind: it takes them from `reconciler.facts`,
# never from a kind's module, so a kind can change without changing what the audit sees.
FACT_CONSUMERS = ("reconciler.audit", "reconciler.drift", "reconciler.kinds.checks")
# What every kind shares (the entry types, `Kind`) is not one kind's facts.
KIND_BASE = ("reconciler.kinds", "reconciler.kinds.base")


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_facts_are_read_from_the_facts_layer_not_from_a_kind() -> None:
    misplaced = {
        f"{module} imports {target}"
        for module, targets in imports().items()
        if _within(module, FACT_CONSUMERS)
        for target in targets
        if _within(target, ("reconciler.kinds",)) and target not in KIND_BASE
    }
    assert sorted(misplaced) == []


def test_facts_never_import_a_kind() -> None:
    upward = {
        f"{module} imports {target}"
        for module, targets in imports().items()
        if _within(module, ("reconciler.facts",))
        for target in targets
        if _within(target, ("reconciler.kinds",))
    }
    assert sorted(upward) == []
