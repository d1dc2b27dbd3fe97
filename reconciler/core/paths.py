"""Host paths as tune accepts them: absolute and normal, and globs that cannot leave
the tree they name.
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
from collections.abc import Iterable, Sequence

from .errors import HostError

GLOB_CHARS = frozenset("*?[")


def is_glob(pattern: str) -> bool:
    return not GLOB_CHARS.isdisjoint(pattern)


def normal(path: str) -> bool:
    """Absolute, with no `.` or `..` component: the path names what it says, so a path under a
    directory stays under it (symlinks aside)."""
    # A path built from a snapshot's text (its kernel release, a container's mount source) may
    # hold a NUL, which every os call refuses with ValueError, not OSError.
    return (
        path.startswith("/")
        and "\0" not in path
        # Without "/." no component can be "." or "..": the common case, a thousand times a
        # plan, needs no split.
        and ("/." not in path or not any(part in (".", "..") for part in path.split("/")))
    )


def checked(path: str) -> str:
    """`path` if it is `normal`; otherwise the refusal every engine gives, nothing read or
    written."""
    if not normal(path):
        raise HostError(f"{path}: refusing a path that is not absolute and normal.")
    return path


def within(pattern: str, path: str) -> bool:
    """Whether `path`, which `pattern` expanded to, lies under the pattern's literal prefix (its
    components before the first glob): the rule every engine applies to an expansion, after
    expanding. Python's glob never yields `.` or `..`, but a host's sh does (dash expands `.?`
    to `..`), and a pattern checked before expansion is only as good as the checker."""
    if not is_glob(pattern):
        return path == pattern and normal(path)
    return path.startswith(_literal_prefix(pattern)) and normal(path)


@functools.lru_cache(maxsize=1024)
def _literal_prefix(pattern: str) -> str:
    """A glob pattern's components before its first glob, with their slash."""
    parts = pattern.split("/")
    first = next(n for n, part in enumerate(parts) if is_glob(part))
    return "/".join(parts[:first]) + "/"


def may_match_dot(component: str) -> bool:
    """Whether a glob component could match a name that starts with `.` (`.` and `..` among
    them) in some POSIX shell: one that starts with `.` and holds a glob, or with a bracket
    expression that admits `.` (a negation without it, a range over it, a class). POSIX
    promises that `*` and `?` never match a leading `.`; for brackets it leaves it open."""
    if not is_glob(component):
        return False
    if component.startswith("."):
        return True
    end = bracket_end(component, 0) if component.startswith("[") else None
    if end is None:
        return False
    body = component[1:end]
    negated = body[:1] in ("!", "^")
    body = body[negated:]
    if "[" in body:  # [:class:], [.coll.], [=equiv=]: what they admit is the locale's
        return True
    return _admits_dot(body) != negated


def _admits_dot(body: str) -> bool:
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            if body[i] <= "." <= body[i + 2]:
                return True
            i += 3
            continue
        if body[i] == ".":
            return True
        i += 1
    return False


def bracket_end(pattern: str, start: int) -> int | None:
    """Where fnmatch ends the bracket expression opened at `start`, or None if it is literal."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    end = pattern.find("]", j)
    return None if end == -1 else end


def matching(pattern: str, paths: Iterable[str]) -> list[str]:
    """The paths `pattern` matches (`path_matches`), in their order. What comes before the
    pattern's first glob character is literal, so a path must start with it: a C-speed test
    that rules out nearly every path of an observation before any fnmatch."""
    cut = min((i for i, c in enumerate(pattern) if c in GLOB_CHARS), default=len(pattern))
    prefix = pattern[:cut]
    return [p for p in paths if p.startswith(prefix) and path_matches(pattern, p)]


def overlay_order(directories: Sequence[str], paths: Iterable[str]) -> list[str]:
    """`paths` (files of `directories`) in the order a reader of configuration directories
    (systemd's sysctl.d, kmod's modprobe.d) takes them: sorted by file name across all of them,
    a name in an earlier directory hiding the same name in a later one."""
    rank = {d: i for i, d in enumerate(directories)}
    by_name: dict[str, str] = {}
    for path in sorted(paths, key=lambda p: rank.get(posixpath.dirname(p), len(rank))):
        by_name.setdefault(posixpath.basename(path), path)
    return [by_name[name] for name in sorted(by_name)]


def path_matches(pattern: str, path: str) -> bool:
    """Shell-glob semantics per path component: `*` never crosses a slash."""
    # With as many slashes in the path as in the pattern, no component's regex can take one
    # (the separators need them all), so one regex over the whole path matches per component.
    return pattern.count("/") == path.count("/") and _regex(pattern).fullmatch(path) is not None


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> re.Pattern[str]:
    """`pattern`'s components as fnmatch translates them, joined by literal slashes: one C
    match per path, where fnmatchcase per component cost a split and a call each (a fleet's
    plans match every CPU's cpufreq and cpuidle files against their globs)."""
    parts = (_END.sub("", fnmatch.translate(part)) for part in pattern.split("/"))
    return re.compile("/".join(parts))


_END = re.compile(r"\\[Zz]$")  # what fnmatch.translate ends its regex with
