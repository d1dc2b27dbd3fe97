"""The profiles that come with tune, found by name: `tune plan blackwell-8x` after a pipx
install, from any directory. A path that exists always wins over a bundled name."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ..core.errors import UsageError
from .source import is_url, path_of_url

SUFFIX = ".yaml"


class BundledProfile(NamedTuple):
    name: str
    path: Path


def directory() -> Path:
    from importlib import resources  # a profile named by its path never needs it

    return Path(str(resources.files("reconciler") / "profiles"))


def bundled() -> list[BundledProfile]:
    found = sorted(directory().glob(f"*{SUFFIX}"))
    return [BundledProfile(path.name.removesuffix(SUFFIX), path) for path in found]


def shown(path: str | Path) -> str:
    """`path` as an operator would name it: a bundled profile by its bundled name (not the
    site-packages path it lives at), any other path as it was given."""
    given = Path(path)
    if given.suffix == SUFFIX and given.parent == directory():
        return given.name.removesuffix(SUFFIX)
    return str(path)


def resolve(spec: str) -> str:
    """`spec` as a path when one exists there, else the bundled profile of that name; a
    `file://` URL is always the path it names (`source.path_of_url`)."""
    if is_url(spec):
        path = path_of_url(spec)
        if not Path(path).exists():
            raise UsageError(f"{spec}: no such file ({path}).")
        return path
    if Path(spec).exists():
        return spec
    if "/" in spec:
        raise UsageError(f"{spec}: no such file.")
    name = spec.removesuffix(SUFFIX)
    for profile in bundled():
        if profile.name == name:
            return str(profile.path)
    names = ", ".join(p.name for p in bundled())
    raise UsageError(
        f"{spec}: no such file, and no bundled profile of that name "
        f"(`tune profiles` lists them: {names})."
    )
