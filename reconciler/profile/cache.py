"""Validated profiles kept between runs, the way Python keeps bytecode.

Reading a profile costs ruamel.yaml and pydantic (their import, the validator's build, the
validation): most of the start-up of a `tune plan` or a cron `tune check`. The result depends
only on the bytes of the profile and its parents and on tune's own code, so it is kept in the
user's cache directory (`$TUNE_CACHE_DIR`, else `$XDG_CACHE_HOME/tune`, else `~/.cache/tune`),
keyed by tune's code and the path as given (or, for a profile held as text, its content), and
reused while every file it was read from still has the same content. Only valid profiles are
kept. A cache that cannot be read or written is ignored: it never changes what a run does, only
how fast it starts. `TUNE_CACHE_DIR=` (empty) turns it off.

The entries are pickles, so the directory is trusted only when it belongs to this user and
nobody else can write to it (as ssh treats `~/.ssh`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
from pathlib import Path
from typing import TypeVar

from ..core.bounded import MAX_PROFILE_BYTES, read_bounded
from ..core.cache_dir import directory
from ..core.cache_dir import trusted as _trusted
from ..hosts.trust import private_directory

T = TypeVar("T")

FORMAT = 1
PACKAGE = Path(__file__).resolve().parent.parent


@functools.cache
def code_fingerprint() -> str:
    """Changes whenever any module of tune changes (an upgrade, an edit in a checkout)."""
    digest = hashlib.sha256(str(FORMAT).encode())
    for folder, _dirs, names in sorted(os.walk(PACKAGE)):
        for name in sorted(names):
            if name.endswith(".py"):
                info = os.stat(os.path.join(folder, name))
                digest.update(f"{folder}/{name}:{info.st_mtime_ns}:{info.st_size}\n".encode())
    return digest.hexdigest()


def path_key(path: Path) -> str:
    """The key of a profile file: where it is, as given and resolved (diagnostics and
    parents' positions name it so)."""
    return f"file\0{path}\0{path.resolve()}"


def text_key(name: str, text: str) -> str:
    """The key of a profile held as text (the one `tune apply` stored on a host), or of plain
    data as JSON (`name` says what it is)."""
    return f"text\0{name}\0{hashlib.sha256(text.encode()).hexdigest()}"


def _entry(cache: Path, key: str) -> Path:
    digest = hashlib.sha256(f"{code_fingerprint()}\0{key}".encode()).hexdigest()
    return cache / "profiles" / (digest + ".pickle")


def digest(data: bytes) -> str:
    """What identifies a file's content in an entry: the hash of the bytes parsed."""
    return hashlib.sha256(data).hexdigest()


# A record of where a name led rather than of a file's content: `extends: current.yaml`, a
# link to the release in force, must miss once the link moves, even where the file it led to
# is unchanged.
LEADS_TO = "leads to "


def leads_to(target: Path) -> str:
    """What identifies where an `extends` name led: the file it resolved to."""
    return LEADS_TO + str(target)


def _content(name: str) -> str | None:
    try:
        return digest(read_bounded(name, MAX_PROFILE_BYTES, "a profile"))
    except OSError:
        return None


def _now(name: str, known: str) -> str | None:
    """The record of `name` as it is now, of the kind `known` is."""
    if not known.startswith(LEADS_TO):
        return _content(name)
    try:
        return leads_to(Path(name).resolve())
    except (OSError, RuntimeError):  # RuntimeError: a loop of links, before Python 3.13
        return None


def lookup(key: str, expected: type[T]) -> T | None:
    """What is kept under `key`, if every file it was read from is unchanged."""
    cache = directory()
    if cache is None:
        return None
    entry = _entry(cache, key)
    if not all(_trusted(p) for p in (cache, entry.parent, entry)):
        return None
    try:
        version, hashes, kept = pickle.loads(entry.read_bytes())
    except Exception:  # a damaged or foreign entry is a miss, never an error
        return None
    if version != FORMAT or any(_now(name, known) != known for name, known in hashes):
        return None
    return kept if isinstance(kept, expected) else None


def _ours(cache: Path) -> bool:
    """Whether we may write here: the cache (or the folder it would be made in) is ours; a root
    run with another user's $HOME leaves that user's cache alone."""
    existing = next((p for p in (cache, *cache.parents) if p.exists()), None)
    return existing is not None and _trusted(existing)


def store(key: str, kept: object, files: tuple[tuple[str, str], ...] = ()) -> None:
    """Keep `kept` under `key`, read from `files`: every file parsed, parents included, with the
    `digest` of the bytes that were parsed (never of a second read, which an edit in between
    would make the new content's hash over the old profile)."""
    cache = directory()
    if cache is None or not _ours(cache):
        return
    entry = _entry(cache, key)
    hashes = list(files)
    try:
        # Every directory it makes 0700: under umask 000 a parent made 0777 would never pass
        # `_trusted` again, and the cache would stay off for good.
        private_directory(entry.parent)
        temporary = entry.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            pickle.dump((FORMAT, hashes, kept), handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, entry)
    except (OSError, pickle.PicklingError):
        return
