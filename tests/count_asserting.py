"""How many tests the suite has, and how many of its test functions assert something.

    python tests/count_asserting.py [CHECKOUT] [--list]

CHECKOUT (default: this one) is a tune checkout: run it on two commits to see that a change
to the suite lost no test and no assertion. It prints the number of test items pytest collects
(all, and outside the `slow` mark), the number of test functions, how many of those have an
`assert` or a `pytest.raises` in their own body, and how many of those they have in all;
`--list` names the others (tests that assert through a helper, or through a fixture's
teardown, such as tests/engines' `engine`).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def collected(checkout: Path, *args: str) -> int:
    """Test items as `pytest --collect-only` counts them (one per parameter set)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    pytest = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0"]
    out = subprocess.run(
        [*pytest, "-p", "no:cacheprovider", *args],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    # `-q` twice (pyproject's addopts has one) prints "path: count" per file; once, node ids.
    per_file = re.findall(r"^\S+\.py: (\d+)$", out, re.M)
    if per_file:
        return sum(int(n) for n in per_file)
    return sum(1 for line in out.splitlines() if "::" in line)


def asserts(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The `assert` statements and `pytest.raises` calls in the function's own body."""
    return sum(
        isinstance(node, ast.Assert)
        or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "raises"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "pytest"
        )
        for node in ast.walk(function)
    )


def test_functions(checkout: Path) -> dict[str, int]:
    """Every test function of the suite (`test_*` at module level or in a `Test*` class of a
    `test_*.py` file), by qualified name, and how many asserts its body has."""
    found: dict[str, int] = {}
    for path in sorted((checkout / "tests").rglob("test_*.py")):
        module = ast.parse(path.read_text(), str(path))
        scopes: list[tuple[str, list[ast.stmt]]] = [("", module.body)]
        scopes += [
            (node.name + ".", node.body)
            for node in module.body
            if isinstance(node, ast.ClassDef) and node.name.startswith("Test")
        ]
        for prefix, body in scopes:
            for node in body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    node.name.startswith("test_")
                ):
                    name = f"{path.relative_to(checkout).as_posix()}::{prefix}{node.name}"
                    found[name] = asserts(node)
    return found


def main(argv: list[str]) -> None:
    listing = "--list" in argv
    rest = [a for a in argv if a != "--list"]
    checkout = Path(rest[0]).resolve() if rest else HERE
    functions = test_functions(checkout)
    print(f"collected test items: {collected(checkout)}")
    print(f"collected test items outside slow: {collected(checkout, '-m', 'not slow')}")
    print(f"test functions: {len(functions)}")
    print(f"test functions that assert or expect a raise: {sum(map(bool, functions.values()))}")
    print(f"asserts and pytest.raises in test functions: {sum(functions.values())}")
    if listing:
        for name, asserting in functions.items():
            if not asserting:
                print(f"  no assert in its own body: {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
