"""The methods `dataclasses` generates for tune's classes, kept compiled between runs, as Python
keeps a module's bytecode in a .pyc file.

On Python before 3.13 each generated method (`__init__`, `__eq__`, `__hash__`, `__repr__`, a
frozen class's `__setattr__` and `__delattr__`) is compiled from source text when its class is
made: some 600 small compiles to start `tune plan`, about a third of what its imports cost. What
a compile makes depends only on that text and on the interpreter, so the code is kept by text,
one file per bytecode version (`importlib.util.MAGIC_NUMBER`, as .pyc files are told apart), in
tune's cache directory (the profile cache's: `$TUNE_CACHE_DIR`, else `$XDG_CACHE_HOME/tune`,
else `~/.cache/tune`; `TUNE_CACHE_DIR=` turns both off). The classes made are the same with or
without it; only their making is cheaper. The `tune` command installs it before its modules
make their classes (`reconciler/cli/__init__.py`).

The file holds code, so it is read only from a directory that belongs to this user and that
nobody else can write to (as the profile cache's pickles are), and only once that directory
exists: this module never makes the cache directory itself. A file that is missing, damaged or
not trusted is compiled anew, never an error.
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import importlib.util
import marshal
import os
from pathlib import Path
from types import CodeType
from typing import Any

from .cache_dir import directory, trusted

FORMAT = 1


class Kept:
    """The compiled code by source text: what the file held, and what this run added."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.known: dict[str, bytes] = {}
        self.added: dict[str, bytes] = {}
        self.read = self.compiled = 0  # what this run took from the file, and compiled
        if path is not None and all(trusted(p) for p in (path.parent.parent, path.parent, path)):
            self.known = _entries(path)

    def code(self, source: str) -> CodeType:
        data = self.known.get(source)
        if data is not None:
            try:
                found = marshal.loads(data)
            except (EOFError, ValueError, TypeError):
                found = None
            if isinstance(found, CodeType):
                self.read += 1
                return found
        self.compiled += 1
        made = compile(source, "<string>", "exec")
        self.added[source] = marshal.dumps(made)
        return made

    def store(self) -> None:
        """Write what this run compiled, with what the file held, if the directory is ours."""
        path = self.path
        if path is None or not self.added or not trusted(path.parent.parent):
            return
        try:
            if not path.parent.exists():
                path.parent.mkdir(mode=0o700)
            if not trusted(path.parent):
                return
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            with os.fdopen(os.open(temporary, flags, 0o600), "wb") as handle:
                handle.write(marshal.dumps((FORMAT, {**self.known, **self.added})))
            os.replace(temporary, path)
        except (OSError, ValueError):
            return


def _entries(path: Path) -> dict[str, bytes]:
    try:
        kept = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not (isinstance(kept, tuple) and len(kept) == 2 and kept[0] == FORMAT):
        return {}
    entries = kept[1]
    return entries if isinstance(entries, dict) else {}


def _file() -> Path | None:
    cache = directory()
    return None if cache is None else cache / "code" / (importlib.util.MAGIC_NUMBER.hex() + ".bin")


KEPT: Kept | None = None


def _exec(source: Any, globals: Any = None, locals: Any = None, /) -> None:
    """`exec` as `dataclasses` calls it: source text runs as its kept code."""
    if isinstance(source, str) and KEPT is not None:
        source = KEPT.code(source)
    builtins.exec(source, globals, locals)


def install() -> None:
    """Have `dataclasses` (which compiles with `exec` from Python 3.11 on) use the kept code,
    and keep what this process compiles when it exits."""
    global KEPT
    if KEPT is not None:
        return
    KEPT = Kept(_file())
    dataclasses.exec = _exec  # type: ignore[attr-defined]
    atexit.register(KEPT.store)
