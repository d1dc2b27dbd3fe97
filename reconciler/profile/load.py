"""Profiles: YAML files declaring a host's desired state, validated with pydantic, with every
error pointing at a file, line and column."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import re
import typing
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from ..core.bounded import (
    MAX_PROFILE_BYTES,
    TooManyValues,
    counting_composer,
    read_bounded,
    size_text,
)
from ..core.errors import Diagnostic, ProfileError, reason
from ..core.schema import Before, json_schema, validate
from ..kinds import LINES, SECTIONS, in_profile, of_section
from ..kinds.base import Kind, Meta, Strict, safe
from . import cache as profile_cache
from .probe_spec import ProbeName, ProbeSpec
from .source import set_digest, shown

if TYPE_CHECKING:
    from pydantic import ValidationError
    from ruamel.yaml import YAML
    from ruamel.yaml.scanner import RoundTripScanner

ProfileName = safe(r"[A-Za-z0-9_.-]+", "profile name", "blackwell-8x")


def _listify(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


SpecT = typing.TypeVar("SpecT")


@dataclass(frozen=True, kw_only=True)
class Profile(Strict):
    """The whole desired state of a host. Sections are owned by knob kinds (`reconciler.kinds`):
    `MODEL`, the class profiles are validated as, adds one per registered kind after these
    fields, then `probes`."""

    # The JSON Schema shows the docstring above. A profile itself is made as `model` of the
    # sections it has (the schema's `MODEL` is the model of all of them); a section it does
    # not have reads as None. So a profile imports the kinds of its own sections only, read
    # from the YAML or from the profile cache.

    name: ProfileName  # type: ignore[valid-type]
    description: str = ""
    extends: Annotated[list[str], Before(_listify)] = field(
        default_factory=list,
        metadata={"description": "parent profiles, relative to this file; this file wins"},
    )
    if TYPE_CHECKING:  # added by `model`, after the sections
        probes: dict[str, ProbeSpec]

    def spec(self, kind: Kind[SpecT]) -> SpecT | None:
        """What `kind` works from in this profile (its section), None when there is nothing."""
        return kind.spec_of(self)

    def sections(self) -> Iterator[tuple[Kind[Any], Any]]:
        """(kind, spec) for every profile section in use."""
        for kind in in_profile(self, with_persistence=False):
            spec = kind.spec_of(self) if kind.section else None
            if spec:
                yield kind, spec

    def work(self, with_persistence: bool = True) -> Iterator[tuple[Kind[Any], Any]]:
        """(kind, spec) for every kind with something to observe and plan: the sections in use,
        then, `with_persistence`, tune's boot-time files from the whole profile."""
        found = list(in_profile(self, with_persistence))
        yield from self.sections()
        # Kinds derived from sections (`nvreg` from `modules`), in the registry's order.
        for kind in found:
            derived = None if kind.section or kind.persistence else kind.spec_of(self)
            if derived is not None:
                yield kind, derived
        yield from ((k, k.spec_of(self)) for k in found if k.persistence)

    def entries(self) -> Iterator[Meta]:
        """Every entry of the knob sections that has priority, reason and `optional`."""
        for line in LINES:
            # The section itself: a kind's spec may carry other sections' entries (cmdline).
            yield from _metas(getattr(self, line.section) if line.section else None)

    def __getattr__(self, name: str) -> Any:
        # A section this profile's model leaves out (`model`): the profile does not have it.
        if name in SECTIONS:
            return None
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (the profile cache) as its sections and values: unpickling builds the model
        # of those sections, importing their kinds and no other.
        names = [info.name for info in dataclasses.fields(self)]
        return _rebuilt, (_sections_of(type(self)), {n: getattr(self, n) for n in names})


def _section(kind: Kind[Any]) -> tuple[str, Any, Any]:
    """A kind's profile field: a mapping or a list is empty when absent, anything else None."""
    meta = {"description": kind.summary}
    empty = typing.get_origin(kind.spec_type)
    if empty in (dict, list):
        return kind.section, kind.spec_type, field(default_factory=empty, metadata=meta)
    return kind.section, kind.spec_type | None, field(default=None, metadata=meta)


@functools.cache
def model(sections: tuple[str, ...] = SECTIONS) -> type[Profile]:
    """The class profiles with `sections` (in the registry's order) are validated as; every
    section by default: the schema, and what `profile_keys` lists."""
    fields = [_section(of_section(name)) for name in sections]
    probes: tuple[str, Any, Any] = (
        "probes",
        dict[ProbeName, ProbeSpec],
        field(default_factory=dict),
    )
    made = dataclasses.make_dataclass(
        "Profile", [*fields, probes], bases=(Profile,), frozen=True, kw_only=True
    )
    made.__module__ = __name__
    made.__doc__ = Profile.__doc__
    _SECTIONS_OF[made] = sections
    return made


_SECTIONS_OF: dict[type[Profile], tuple[str, ...]] = {}


def _sections_of(made: type[Profile]) -> tuple[str, ...]:
    return _SECTIONS_OF[made]


def model_of(data: Any) -> type[Profile]:
    """The model of the profile `data` (plain data): the sections it names."""
    named = data if isinstance(data, dict) else {}
    return model(tuple(name for name in SECTIONS if name in named))


def _rebuilt(sections: tuple[str, ...], values: dict[str, Any]) -> Profile:
    return model(sections)(**values)


def __getattr__(name: str) -> Any:
    # `MODEL`, as the model of every section was named before profiles had their own.
    if name == "MODEL":
        return model()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _metas(value: Any) -> Iterator[Meta]:
    if isinstance(value, Meta):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _metas(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _metas(item)
    elif isinstance(value, Strict):
        for info in dataclasses.fields(value):
            yield from _metas(getattr(value, info.name))


# pydantic's error types for a key the model does not have (models, dataclasses).
UNKNOWN_KEY = ("extra_forbidden", "unexpected_keyword_argument")

Position = tuple[str, int, int]  # file, 1-based line, 1-based column
Path_ = tuple[Any, ...]


@dataclass
class Tree:
    """Plain data from YAML, with where each value and each key came from."""

    data: Any
    values: dict[Path_, Position] = field(default_factory=dict)
    keys: dict[Path_, Position] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadedProfile:
    profile: Profile
    path: str
    files: tuple[str, ...]  # this file and every parent, in merge order
    data: dict[str, Any]  # the resolved profile (extends applied), plain data
    positions: dict[Path_, Position]
    digest: str = ""  # `source.set_digest` of the bytes read: this file and every parent

    @property
    def pinned_as(self) -> str:
        """The digest as `--profile-digest` takes it (`sha256:HEX`)."""
        return shown(self.digest)

    def locate(self, *path: Any) -> str:
        """`FILE:LINE:COL` of a profile entry, or the file alone."""
        pos = self.positions.get(tuple(path))
        return f"{pos[0]}:{pos[1]}:{pos[2]}" if pos else self.path

    @functools.cached_property
    def resolved_yaml(self) -> str:
        """`data` as block YAML, its keys in profile order: what each host stores as its
        applied profile. Dumped once per run, not twice per host (ruamel's pure-Python dumper
        took ~15 ms of controller CPU a host)."""
        import io

        from ruamel.yaml import YAML

        yaml = YAML(typ="safe", pure=True)
        yaml.default_flow_style = False
        yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
        out = io.StringIO()
        yaml.dump(self.data, out)
        return out.getvalue()


def _yaml() -> YAML:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yaml.Composer = counting_composer(MAX_PROFILE_VALUES)
    yaml.Scanner = _bounded_scanner()
    return yaml


def parse(path: Path, *, quote: bool = True) -> Tree:
    return parse_bytes(read(path), str(path), quote=quote)


def read(path: Path) -> bytes:
    """A profile file's bytes: a regular file of at most MAX_PROFILE_BYTES."""
    try:
        return read_bounded(path, MAX_PROFILE_BYTES, "a profile")
    except OSError as exc:
        message = f"cannot read profile: {reason(exc)}"
        raise ProfileError([Diagnostic(str(path), 1, 1, message)]) from exc


def parse_bytes(raw: bytes, name: str, *, quote: bool = True) -> Tree:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        message = f"not UTF-8 text (byte 0x{raw[exc.start]:02x})"
        raise ProfileError([Diagnostic(name, line, column, message)]) from exc
    return parse_text(text, name, quote=quote)


# What one profile may hold once its aliases are expanded: keys, values and list items. A
# profile for eight GPUs holds a few hundred; a YAML alias bomb (each anchor repeating the one
# before nine times) holds billions in a few hundred bytes, and tune copies every one.
MAX_PROFILE_VALUES = 20_000


# How deep one profile's collections may nest. A profile nests a handful of levels (section,
# key, setting, list); ruamel's scanner costs time quadratic in the depth of open flow brackets
# (40 KB of `[` took a minute) and its composer recurses once a level (Python's stack ends near
# 1,000), so depth is refused as it is scanned, before either cost is paid.
MAX_PROFILE_DEPTH = 64


class _TooDeep(Exception):
    def __init__(self, mark: Any) -> None:
        self.line, self.column = mark.line + 1, mark.column + 1


@functools.cache
def _bounded_scanner() -> type[RoundTripScanner]:
    """ruamel's scanner, refusing a flow bracket or a block indentation past MAX_PROFILE_DEPTH
    at the place it opens."""
    from ruamel.yaml.scanner import RoundTripScanner

    class Bounded(RoundTripScanner):
        def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
            if self.flow_level + len(self.indents) >= MAX_PROFILE_DEPTH:
                raise _TooDeep(self.reader.get_mark())
            super().fetch_flow_collection_start(TokenClass, to_push)

        def add_indent(self, column: int) -> bool:
            if self.flow_level + len(self.indents) >= MAX_PROFILE_DEPTH:
                raise _TooDeep(self.reader.get_mark())
            return bool(super().add_indent(column))

    return Bounded


# What ruamel's messages quote from the document: an alias name, a duplicate key and its value.
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def parse_text(text: str, name: str, *, quote: bool = True) -> Tree:
    """YAML text as a `Tree`; `name` is what diagnostics call the file. With `quote` false a
    syntax error says where it is and why, but quotes nothing it found there: a parent named
    by `extends` may be a file the profile's author cannot read (`extends: /etc/shadow`)."""
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import MarkedYAMLError, YAMLError, YAMLWarning
    from ruamel.yaml.reader import ReaderError

    if len(text.encode()) > MAX_PROFILE_BYTES:  # a profile stored on a host, read as text
        limit = size_text(MAX_PROFILE_BYTES)
        message = f"larger than {limit}, the most tune reads for a profile"
        raise ProfileError([Diagnostic(name, 1, 1, message)])
    try:
        with warnings.catch_warnings():
            # ruamel warns on stderr about YAML 1.1 readings and reused anchors (which YAML 1.2
            # allows); tune reads YAML 1.2 and speaks only through its diagnostics.
            warnings.simplefilter("ignore", YAMLWarning)
            node = _yaml().load(text)
    except TooManyValues as exc:
        message = (
            f"more than {MAX_PROFILE_VALUES:,} keys, values and list items (aliases count what "
            "they repeat), the most tune reads in a profile"
        )
        raise ProfileError([Diagnostic(name, exc.line, exc.column, message)]) from None
    except _TooDeep as exc:
        message = (
            f"collections nested more than {MAX_PROFILE_DEPTH} deep, the most tune reads in a "
            "profile"
        )
        raise ProfileError([Diagnostic(name, exc.line, exc.column, message)]) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        start = exc.context_mark
        if (
            exc.problem
            and exc.context
            and start
            and (start.line, start.column) != (line - 1, col - 1)
        ):
            # Where an unclosed quote or bracket began is what the reader needs to find.
            problem += f" ({exc.context} at line {start.line + 1}, column {start.column + 1})"
        if not quote:
            problem = QUOTED.sub("(text not shown)", problem)
        raise ProfileError([Diagnostic(name, line, col, f"YAML syntax error: {problem}")]) from exc
    except ReaderError as exc:
        # A character YAML does not allow in a document at all (NUL, most control characters).
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        message = f"YAML does not allow the character U+{exc.character:04X} here"
        raise ProfileError([Diagnostic(name, line, col, message)]) from exc
    except (YAMLError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        # ruamel fails with Python errors of its own on some hostile documents (a mapping as a
        # key of a mapping, a merge of an alias still being built); still a broken profile.
        message = "YAML that cannot be read as plain data (a mapping as a key, a self-merge)"
        raise ProfileError([Diagnostic(name, 1, 1, message)]) from exc
    if not isinstance(node, CommentedMap):
        raise ProfileError([Diagnostic(name, 1, 1, "a profile must be a YAML mapping of sections")])
    tree = Tree(None)
    tree.data = _plain(node, (), name, tree)
    return tree


def _positions(node: Any, index: Any) -> tuple[int, int, int, int]:
    """0-based line and column of a mapping's key and value (or a list's item). Keys a merge
    (`<<: *base`) brings in, and `!!omap` entries, have no place of their own in ruamel: they
    point at the mapping that holds them."""
    data = node.lc.data
    found = data.get(index) if isinstance(data, dict) else None
    if found is None:
        line, col = node.lc.line or 0, node.lc.col or 0
        return line, col, line, col
    return (*found, *found) if len(found) == 2 else tuple(found)


def _plain(node: Any, path: Path_, name: str, tree: Tree) -> Any:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(node, CommentedMap):
        out = {}
        for key in node:
            key_line, key_col, val_line, val_col = _positions(node, key)
            # Keys are text, as pydantic reports them (`1:` or `? [a, b]` too).
            text_key = str(key)
            tree.keys[(*path, text_key)] = (name, key_line + 1, key_col + 1)
            tree.values[(*path, text_key)] = (name, val_line + 1, val_col + 1)
            out[text_key] = _plain(node[key], (*path, text_key), name, tree)
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for index, item in enumerate(node):
            line, col, _, _ = _positions(node, index)
            tree.values[(*path, index)] = (name, line + 1, col + 1)
            items.append(_plain(item, (*path, index), name, tree))
        return items
    if node is None or type(node) in (bool, int, float, str):
        return node
    digits = _leading_zero(node)
    if digits is not None and not _octal_alike(digits, int(node)):
        file, line, column = tree.values.get(path, (name, 1, 1))
        raise ProfileError([Diagnostic(file, line, column, _ambiguous(digits, int(node)))])
    if isinstance(node, bool | int | float | str):
        # ruamel's ScalarInt/ScalarFloat/ScalarString subclasses carry formatting; drop it.
        return type(node).__mro__[-2](node)
    return node


def _leading_zero(node: Any) -> str | None:
    """The digits of an unquoted integer written with a leading zero (`020`), else None. ruamel
    keeps how many digits were written (`_width`) beside the value YAML 1.2 gives; its
    subclasses (`0x0302`, `0o20`) say their base."""
    from ruamel.yaml.scalarint import ScalarInt

    width = getattr(node, "_width", None)
    if type(node) is not ScalarInt or not isinstance(width, int):
        return None
    digits = str(abs(int(node))).zfill(width)
    return digits if len(digits) > 1 and digits.startswith("0") else None


def _octal_alike(digits: str, value: int) -> bool:
    """Whether the kernel's octal reading is YAML's value all the same (`00`, `07`)."""
    octal = set(digits) <= set("01234567")
    return octal and int(digits, 8) == abs(value)


def _ambiguous(digits: str, value: int) -> str:
    sign = "-" if value < 0 else ""
    kernel = (
        f"as octal {sign}{int(digits, 8)}"
        if set(digits) <= set("01234567")
        else "as no number (not octal)"
    )
    return (
        f"{sign}{digits} is ambiguous: YAML reads an unquoted {sign}{digits} as {value}, the "
        f"kernel reads it {kernel}; write the number without leading zeros, or quote it "
        f"('{sign}{digits}') for the kernel's reading."
    )


def _merge(base: Tree, top: Tree) -> Tree:
    """`top` over `base`: mappings merge key by key, anything else (lists too) is replaced."""
    merged = Tree(_merge_data(base.data, top.data), dict(base.values), dict(base.keys))
    for table, new in ((merged.values, top.values), (merged.keys, top.keys)):
        for path in list(table):
            if _replaced(path, top.data):
                del table[path]
        table.update(new)
    return merged


def _merge_data(base: Any, top: Any) -> Any:
    if isinstance(base, dict) and isinstance(top, dict):
        out = dict(base)
        for key, value in top.items():
            out[key] = _merge_data(base[key], value) if key in base else value
        return out
    return top


def _replaced(path: Path_, top: Any) -> bool:
    """Whether `top` replaces (not merges) the value at `path` or one of its ancestors."""
    node = top
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
        if not isinstance(node, dict):
            return True
    return False


def _resolve(
    path: Path,
    stack: tuple[Path, ...],
    parsed: list[tuple[str, str]],
    named_at: Position | None = None,
) -> Tree:
    """`path` with its parents merged in; `named_at` is the `extends` entry that names it."""
    raw = read(path)
    # A parent is whatever file `extends` names, and the profile itself whatever file the
    # operator pointed at (`tune validate /etc/shadow`, run as root): readable by tune but
    # perhaps not by whoever sees the message, so its text shows in diagnostics only once it
    # reads as a profile.
    tree = parse_bytes(raw, str(path), quote=named_at is None and _names_a_section(raw))
    # The cache is keyed by these very bytes: a file edited after this read is a miss later,
    # never the old profile under the new content's name.
    parsed.append((str(path), profile_cache.digest(raw)))
    if tree.data and not tree.data.keys() & set(_keys()):
        if named_at is None:
            message = "not a tune profile (no profile section in it)"
            raise ProfileError([Diagnostic(str(path), 1, 1, message)])
        message = f"extends: {str(path)!r} is not a tune profile (no profile section in it)"
        raise ProfileError([Diagnostic(*named_at, message)])
    parents = tree.data.get("extends")
    if parents is None:
        return tree
    parent_list = [parents] if isinstance(parents, str) else parents
    where = tree.values.get(("extends",), (str(path), 1, 1))
    if not isinstance(parent_list, list) or not all(isinstance(p, str) for p in parent_list):
        raise ProfileError([Diagnostic(*where, "extends: expected a path or a list of paths")])
    merged = Tree({})
    for index, parent in enumerate(parent_list):
        at = tree.values.get(("extends", index), where)
        if "\0" in parent:
            raise ProfileError([Diagnostic(*at, "extends: a path cannot hold a NUL character")])
        named = path.parent / parent
        try:
            target = named.resolve()
            is_file = target.is_file()
        except (OSError, RuntimeError) as exc:
            # A link that leads to itself (RuntimeError before Python 3.13, ELOOP after), a
            # name past PATH_MAX: a parent that cannot be found, said so, not exit 70.
            why = getattr(exc, "strerror", None) or "a loop of symbolic links"
            message = f"extends: cannot resolve {parent!r} ({why})"
            raise ProfileError([Diagnostic(*at, message)]) from None
        # Where the name leads is part of what was read (`profile_cache.leads_to`).
        parsed.append((str(named), profile_cache.leads_to(target)))
        if target in stack or target == path.resolve():
            chain = " -> ".join(p.name for p in (*stack, path.resolve(), target))
            raise ProfileError([Diagnostic(*at, f"extends cycle: {chain}")])
        if not is_file:
            raise ProfileError([Diagnostic(*at, f"extends: no such profile {parent!r}")])
        merged = _merge(merged, _resolve(target, (*stack, path.resolve()), parsed, at))
    return _merge(merged, tree)


def _names_a_section(raw: bytes) -> bool:
    """Whether a line of `raw` starts with a profile's key (`name:`, `sysctl:`): a file that
    reads as a profile before it parses, whose syntax errors may quote what they found."""
    return _section_line().search(raw) is not None


@functools.cache
def _section_line() -> re.Pattern[bytes]:
    keys = b"|".join(re.escape(key.encode()) for key in _keys())
    return re.compile(rb"^(?:" + keys + rb")[ \t]*:", re.MULTILINE)


def load_profile(path: str | Path, digest: str | None = None) -> LoadedProfile:
    """Parse, resolve `extends`, validate (or reuse the result of the last time these files were
    read: `reconciler.profile_cache`). Raises ProfileError with every problem found; with
    `digest` (hex, `source.pinned`), `DigestMismatch` first when the bytes read are not the
    ones it pins, whatever else is wrong with them."""
    path = Path(path)
    key = profile_cache.path_key(path)
    cached = profile_cache.lookup(key, LoadedProfile)
    if cached is not None:
        _check_digest(str(path), cached.digest, digest)
        return cached
    parsed: list[tuple[str, str]] = []
    try:
        tree = _resolve(path, (), parsed)
    except ProfileError:
        # A file that is not the one released may well be broken too: which it is comes first.
        _check_digest(str(path), _digest_of(parsed), digest)
        raise
    read_digest = _digest_of(parsed)
    _check_digest(str(path), read_digest, digest)
    loaded = dataclasses.replace(_validated(tree, str(path)), digest=read_digest)
    profile_cache.store(key, loaded, tuple(parsed))
    return loaded


def _digest_of(parsed: list[tuple[str, str]]) -> str:
    """`source.set_digest` of the files `_resolve` read (its records of where a name led are
    not content)."""
    return set_digest(known for _, known in parsed if not known.startswith(profile_cache.LEADS_TO))


class DigestMismatch(ProfileError):
    """A profile whose bytes (its own or a parent's) are not the ones `--profile-digest` pins."""


def _check_digest(path: str, found: str, pinned: str | None) -> None:
    if pinned is None or found == pinned:
        return
    message = (
        f"this profile and its parents read as {shown(found)}, not the {shown(pinned)} "
        "--profile-digest pins (a sync in progress, or an edit); nothing was read from the host"
    )
    raise DigestMismatch([Diagnostic(path, 1, 1, message)])


def load_profile_text(text: str, name: str) -> LoadedProfile:
    """A resolved profile held as text, e.g. the one `tune apply` stored on a host; `name` (the
    host path) is the file every diagnostic points at. Such a profile stands alone: `extends`
    could only be resolved against files on the host, so it is refused."""
    key = profile_cache.text_key(name, text)
    cached = profile_cache.lookup(key, LoadedProfile)
    if cached is not None:
        return cached
    tree = parse_text(text, name)
    if "extends" in tree.data:
        where = tree.keys.get(("extends",), (name, 1, 1))
        raise ProfileError(
            [Diagnostic(*where, "a stored profile is already resolved; extends is not allowed")]
        )
    text_digest = set_digest([profile_cache.digest(text.encode())])
    loaded = dataclasses.replace(_validated(tree, name), digest=text_digest)
    profile_cache.store(key, loaded)
    return loaded


def profiles_of(data: list[dict[str, Any]]) -> list[Profile | None]:
    """Profiles from plain data (what the audit's fixes would write), None for data the format
    refuses; kept in the profile cache by content, as profile files are."""
    key = profile_cache.text_key("data", json.dumps(data, sort_keys=True, default=str))
    cached = profile_cache.lookup(key, list)
    if cached is not None:
        return cached
    from pydantic import ValidationError

    made: list[Profile | None] = []
    for item in data:
        try:
            made.append(validate(model_of(item), item))
        except ValidationError:
            made.append(None)
    profile_cache.store(key, made)
    return made


def _validated(tree: Tree, path: str) -> LoadedProfile:
    from pydantic import ValidationError

    data = {k: v for k, v in tree.data.items() if k != "extends"}
    try:
        profile = validate(model_of(data), data)
    except ValidationError as exc:
        raise ProfileError(_diagnostics(exc, tree, path)) from None
    files = tuple(dict.fromkeys(p[0] for p in tree.values.values()))
    return LoadedProfile(profile, path, files or (path,), data, tree.values)


def _diagnostics(exc: ValidationError, tree: Tree, fallback: str) -> list[Diagnostic]:
    found: dict[tuple[Position, str], None] = {}
    for error in exc.errors():
        loc = tuple(error["loc"])
        # A key that fails its pattern (`[key]`) or is not allowed at all: point at the key.
        if loc and loc[-1] == "[key]":
            loc = loc[:-1]
        is_key = len(loc) < len(error["loc"]) or error["type"] in UNKNOWN_KEY
        path, position = _locate(loc, tree, is_key)
        pos = position or (fallback, 1, 1)
        found[(pos, _message(error, path, is_key))] = None
    return [Diagnostic(*pos, msg) for pos, msg in found]


def _locate(loc: Path_, tree: Tree, is_key: bool) -> tuple[Path_, Position | None]:
    """The deepest position recorded along `loc`, skipping pydantic's union-member tags."""
    path: Path_ = ()
    position = tree.values.get(())
    for part in loc:
        if (*path, part) in tree.values:
            path = (*path, part)
            position = tree.values[path]
    if is_key:
        position = tree.keys.get(path, position)
    return path, position


def _message(error: Any, path: Path_, is_key: bool) -> str:
    # A key error names the mapping it is in; the message quotes the key itself.
    where = ".".join(str(p) for p in (path[:-1] if is_key else path))
    kind = error["type"]
    if kind in UNKNOWN_KEY:
        key = str(error["loc"][-1])
        close = difflib.get_close_matches(key, _known_keys(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown key {key!r}{hint}"
    if kind == "missing":
        return f"{where + ': ' if where else ''}missing required key {error['loc'][-1]!r}"
    message = str(error["msg"])
    if message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    prefix = f"{where}: " if where else ""
    return f"{prefix}key {message}" if is_key else f"{prefix}{message}"


def profile_keys(model: Any) -> list[str]:
    """The keys a profile model takes, as written in YAML (`class`, not `class_`)."""
    return [f.metadata.get("alias", f.name) for f in dataclasses.fields(model)]


def _known_keys() -> list[str]:
    keys: set[str] = set()

    def walk(model: Any) -> None:
        keys.update(profile_keys(model))
        hints = typing.get_type_hints(model, include_extras=True)
        for info in dataclasses.fields(model):
            for arg in _models_in(hints[info.name]):
                walk(arg)

    walk(model())
    return sorted(keys)


def _models_in(annotation: Any) -> Iterator[Any]:
    if isinstance(annotation, type) and issubclass(annotation, Strict):
        yield annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        yield from _models_in(arg)
    for arg in getattr(annotation, "__metadata__", ()) or ():
        yield from _models_in(arg) if isinstance(arg, type) else iter(())
    origin = getattr(annotation, "__origin__", None)
    if origin is not None and origin is not annotation:
        yield from _models_in(origin) if isinstance(origin, type) else iter(())


def _keys() -> list[str]:
    """The keys a profile takes (`profile_keys` of `model()`), no kind imported."""
    return [*profile_keys(Profile), *SECTIONS, "probes"]


def schema() -> dict[str, Any]:
    return json_schema(model())
