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


# The packages of `reconciler`, bottom first: a module may import its own package and those
# below it, never one above. This is the house as the code draws it (docs/contributing/layout.md).
LAYERS = (
    "core",  # shared vocabulary: errors, Request/Files, paths, the plan model, schema, quoting
    "facts",  # the kernel's and tools' formats, parsed
    "steps",  # step data: steps and ops, journal records, persisted lines, state paths
    "hosts",  # the host interface: directory, archive, SSH; trust and the lock
    "kinds",  # knob kinds and their registry
    "profile",  # the profile: loading, bundled profiles, the cache
    "plan",  # observe and diff
    "probes",  # measurements before and after a phase
    "apply",  # the engines, the journal, the try-once decision, the pending record
    "boot",  # the reboot and its verification
    "drift",  # tune check
    "audit",  # tune audit's rules
    "flow",  # tune apply's flow over one host or many
    "rollout",  # waves over a fleet
    "report",  # a run's record read back
    "engines",  # tune as the on-host step of Slurm and Kubernetes: programs, files, exports
    "render",  # every renderer, metrics included
    "cli",  # every click command
)


def layer_of(module: str) -> int:
    """The layer index of a module: the root package (`reconciler`, its version) is below all."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    return LAYERS.index(parts[1])


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} imports {target} ({target.split('.')[1]} is above {module.split('.')[1]})"
        for module, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )


def _every_import() -> dict[str, set[str]]:
    """`imports()` with the imports only type checkers follow: a name a module needs for its
    annotations is still a name it needs from that layer."""
    known = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, (path, package) in known.items():
        base = name.split(".") if package else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    module = ".".join([*base[: len(base) - node.level + 1], module]).rstrip(".")
                targets = [module]
                targets += [
                    f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known
                ]
            else:
                continue
            graph[name].update(t for t in targets if t.split(".")[0] == "reconciler")
    return graph


def test_every_package_is_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYERS)
    assert {m for m in modules() if m.count(".") == 1 and m.split(".")[1] not in LAYERS} == set()


def test_no_import_runs_upward() -> None:
    assert upward(_every_import()) == []


def test_an_upward_import_is_named_with_its_file() -> None:
    graph = {"reconciler.kinds.sysctl": {"reconciler.apply.python_engine", "reconciler.core.files"}}
    assert upward(graph) == [
        "reconciler.kinds.sysctl imports reconciler.apply.python_engine (apply is above kinds)"
    ]


def test_click_commands_live_only_under_cli() -> None:
    """Renderers may style text with click; only `cli/` declares commands and options."""
    declaring = sorted(
        name
        for name, (path, _package) in modules().items()
        if not name.startswith("reconciler.cli")
        and any(
            f"click.{what}(" in path.read_text() or f"@{what}(" in path.read_text()
            for what in ("command", "group", "option", "argument")
        )
    )
    assert declaring == []
