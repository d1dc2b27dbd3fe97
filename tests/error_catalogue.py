"""The catalogue of error messages on docs/troubleshooting.md, read from the code: every
`raise SomeError("...")` of a tune error class (and every profile `Diagnostic(...)`) whose message
is written out in the call, grouped by the exit code it ends in. `…` stands for what varies.

    python tests/error_catalogue.py --write    # rewrite the page's catalogue after a change

`tests/test_docs.py` fails while the page and the code disagree."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
PAGE = PROJECT / "docs" / "troubleshooting.md"
BEGIN = "<!-- catalogue: begin (python tests/error_catalogue.py --write) -->"
END = "<!-- catalogue: end -->"


@dataclass(frozen=True, order=True)
class Message:
    code: int
    error: str
    text: str
    where: str


def error_classes() -> dict[str, type[Exception]]:
    """Every subclass of TuneError in the package, by name."""
    sys.path.insert(0, str(PROJECT))
    import reconciler
    from reconciler.core.errors import TuneError

    for module in pkgutil.walk_packages(reconciler.__path__, "reconciler."):
        if module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)
    found: dict[str, type[Exception]] = {}
    todo: list[type[Exception]] = [TuneError]
    while todo:
        cls = todo.pop()
        found[cls.__name__] = cls
        todo += cls.__subclasses__()
    return found


def text_of(node: ast.expr) -> str | None:
    """A message as the operator reads it, `…` for each interpolated part; None when the
    message is not written out in the call."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value if isinstance(part, ast.Constant) else "…" for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = text_of(node.left), text_of(node.right)
        return None if left is None or right is None else left + right
    return None


def messages() -> list[Message]:
    classes = error_classes()
    found: set[Message] = set()
    for path in sorted((PROJECT / "reconciler").rglob("*.py")):
        where = path.relative_to(PROJECT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            name = node.func.id
            if name == "Diagnostic" and len(node.args) >= 4:
                name, argument = "ProfileError", node.args[3]
            elif name in classes and node.args:
                argument = node.args[0]
            else:
                continue
            text = text_of(argument)
            if text is None or not text.strip("… "):
                continue
            code = int(getattr(classes[name], "exit_code", 1))
            found.add(Message(code, name, " ".join(text.split()), where))
    return sorted(found)


def code_span(text: str) -> str:
    ticks = "`"
    while ticks in text:
        ticks += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def catalogue() -> str:
    from reconciler.core.errors import EXIT_CODES

    classes = error_classes()
    lines: list[str] = [BEGIN, ""]
    code = error = None
    for message in messages():
        if message.code != code:
            code, error = message.code, None
            lines += [f"## Exit {code}: {EXIT_CODES[code]}", ""]
        if message.error != error:
            error = message.error
            own = inspect.cleandoc(classes[error].__doc__ or "")
            lines += [f"### {error}", ""] + ([" ".join(own.split()), ""] if own else [])
        if lines[-1].startswith(f"- {code_span(message.text)} ("):
            lines[-1] = lines[-1][:-1] + f", {message.where})"
        else:
            lines.append(f"- {code_span(message.text)} ({message.where})")
    lines += ["", END]
    return "\n".join(line for line in _blank_runs(lines)) + "\n"


def _blank_runs(lines: list[str]) -> list[str]:
    """A blank line before each heading after a list item, and never two in a row."""
    out: list[str] = []
    for line in lines:
        if line.startswith("#") and out and out[-1] != "":
            out.append("")
        if line == "" and out and out[-1] == "":
            continue
        out.append(line)
    return out


def on_page(text: str) -> str:
    return text[text.index(BEGIN) : text.index(END) + len(END)] + "\n"


def main() -> int:
    page = PAGE.read_text()
    fresh = catalogue()
    if "--write" in sys.argv[1:]:
        start, end = page.index(BEGIN), page.index(END) + len(END) + 1
        PAGE.write_text(page[:start] + fresh + page[end:])
        return 0
    return 0 if on_page(page) == fresh else 1


if __name__ == "__main__":
    raise SystemExit(main())
