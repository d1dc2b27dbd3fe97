"""Hosts: where observation reads from.

Every knob kind says which files it needs as a `Request` (glob patterns and directories whose
names it lists, and commands whose output it parses); a host answers the whole request at once
with `Files`. That single batch is what
lets an SSH host later observe in one round trip, and what makes every knob testable against a
snapshot directory: knobs parse `Files`, never the host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .paths import is_glob, matching, path_matches

# sysfs and procfs files report 4096 bytes or 0 whatever they hold; cap reads so a profile glob
# that matches something large (a log, a firmware blob) cannot balloon the observation.
MAX_FILE_BYTES = 1 << 16
# tune's own state read whole (run journals, the stored profile): far above any journal tune
# writes (a 128-CPU host's run is a few MB), and still a bound on what a file planted or grown
# there (a sparse file of 20 GiB) can make tune hold. Whole reads take one byte more, which is
# how a reader tells a file past the limit from one at it.
MAX_STATE_BYTES = 64 << 20
# A file tune rewrites (a container config, the kernel command line's files, its own persisted
# files) is read whole, never cut at MAX_FILE_BYTES: its prior is journaled and written back
# byte for byte, and an edit of a prefix would drop the rest (a Proxmox config's snapshot
# sections). 16 MiB is far past any such file (a Proxmox config with a hundred snapshots and
# long descriptions is a few hundred KiB), equal to the most a snapshot archive holds of one
# file, and small enough to hold a few of in memory and in a run journal; one byte more is
# read, for tune to tell a file past it and refuse to edit it.
MAX_EDITED_BYTES = 16 << 20
EDITED_READ = MAX_EDITED_BYTES + 1


def cap_rank(limit: int | None) -> int:
    """How much a read with byte cap `limit` takes (None: whole, the most)."""
    return MAX_STATE_BYTES + 1 if limit is None else limit


View = TypeVar("View")


@dataclass(frozen=True)
class CommandOutput:
    """What a command printed on standard output (cut at MAX_FILE_BYTES) and its exit status;
    `status` None: the command is not installed on the host."""

    status: int | None
    stdout: bytes = b""

    @property
    def installed(self) -> bool:
        return self.status is not None


NOT_INSTALLED = CommandOutput(None)


def checked_command(argv: tuple[str, ...]) -> tuple[str, ...]:
    """`argv` if it can be run as it is: words tune built (its own, or a profile value the
    schema validated), never parsed by a shell; a NUL no exec can pass."""
    if not argv or not argv[0] or any("\0" in word for word in argv):
        raise ValueError(f"not a command tune can run: {argv!r}")
    return argv


# tune's own read-only scripts (`sh -c SCRIPT sh ARG...`), each a body that reads paths
# relative to the host's root after a `cd /`: a snapshot served as a host (`$TUNE_ROOT`, the
# test lab) runs the body from its root instead, which it does for no other command. Exact
# texts only: nothing a profile or a snapshot writes can become one.
_ROOTED: dict[str, str] = {}


def rooted_script(body: str) -> str:
    """`body` after a `cd /`, registered as one of tune's own rooted scripts."""
    script = f"cd / || exit 125\n{body}"
    _ROOTED[script] = body
    return script


def rooted_body(argv: tuple[str, ...]) -> str | None:
    """The body of a rooted script `argv` runs (None: `argv` is not one)."""
    if len(argv) < 4 or argv[:2] != ("sh", "-c"):
        return None
    return _ROOTED.get(argv[2])


@dataclass(frozen=True)
class Request:
    """Absolute paths or glob patterns to read, and directories whose file names to list."""

    patterns: frozenset[str] = frozenset()
    listings: frozenset[str] = frozenset()
    # Patterns read in full, past MAX_FILE_BYTES: tune's own state (a run journal of 128 CPUs'
    # steps outgrows the cap meant for kernel files, and a cut journal loses its end record).
    whole: frozenset[str] = frozenset()
    # Patterns of files a kind may rewrite, read whole up to MAX_EDITED_BYTES (one byte more):
    # their prior is what a rollback writes back.
    edited: frozenset[str] = frozenset()
    # (pattern, n): only the last n matches in name order, read whole (the newest run journals:
    # run ids sort by time), so a check reads them in the same batch as the observation.
    newest: frozenset[tuple[str, int]] = frozenset()
    # Patterns of device nodes (`/dev/nvidia*`) that are listed, never opened: opening an NVIDIA
    # node initialises the GPU, and what a container needs is only which nodes exist.
    nodes: frozenset[str] = frozenset()
    # (directory, path): list the directory only when there is no file at the path (nothing,
    # or a directory: a sysctl key one level short). The names to suggest for a path a profile
    # got wrong, without listing thousands of them (/proc/sys on a host with many network
    # interfaces) on every read.
    listings_if_no_file: frozenset[tuple[str, str]] = frozenset()
    # Commands (argv, run without a shell, standard input empty) whose output to read: a tool's
    # report of device state (`nvidia-smi --query-gpu=...`) that no file holds.
    commands: frozenset[tuple[str, ...]] = frozenset()

    @classmethod
    def of(
        cls,
        *patterns: str,
        listings: Iterable[str] = (),
        whole: Iterable[str] = (),
        newest: Iterable[tuple[str, int]] = (),
        nodes: Iterable[str] = (),
        listings_if_no_file: Iterable[tuple[str, str]] = (),
        commands: Iterable[tuple[str, ...]] = (),
        edited: Iterable[str] = (),
    ) -> Request:
        return cls(
            frozenset(patterns),
            frozenset(listings),
            frozenset(whole),
            frozenset(edited),
            frozenset(newest),
            frozenset(nodes),
            frozenset(listings_if_no_file),
            frozenset(map(checked_command, commands)),
        )

    def __or__(self, other: Request) -> Request:
        return Request(
            self.patterns | other.patterns,
            self.listings | other.listings,
            self.whole | other.whole,
            self.edited | other.edited,
            self.newest | other.newest,
            self.nodes | other.nodes,
            self.listings_if_no_file | other.listings_if_no_file,
            self.commands | other.commands,
        )

    def conditions(self) -> dict[str, tuple[str, ...]]:
        """Each directory to list only when a path is not a file, with those paths, in order; a
        directory also listed unconditionally is not one of them."""
        found: dict[str, list[str]] = {}
        for directory, path in sorted(self.listings_if_no_file):
            if directory not in self.listings:
                found.setdefault(directory, []).append(path)
        return {directory: tuple(paths) for directory, paths in found.items()}

    def listed(self, is_file: Callable[[str], bool]) -> list[str]:
        """The directories to list, given which paths are files (symlinks followed)."""
        wanted = set(self.listings)
        wanted.update(d for d, paths in self.conditions().items() if not all(map(is_file, paths)))
        return sorted(wanted)

    def read_whole(self, path: str) -> bool:
        """Whether a pattern of this request reads `path` whole (as a file tune edits, or as
        its own state), not cut at MAX_FILE_BYTES."""
        return any(path_matches(p, path) for p in self.edited | self.whole)

    def reads(self) -> list[tuple[str, int | None, int | None]]:
        """Every pattern to read, in a fixed order: (pattern, how many of its last matches to
        keep or None for all, the byte cap or None for whole, up to one byte past
        MAX_STATE_BYTES). The patterns read at MAX_FILE_BYTES come first, then the others
        (the order an SSH host's script reads them in). A path that several patterns match
        is read with the largest cap among them, whichever comes first."""
        return [
            *((p, None, MAX_FILE_BYTES) for p in sorted(self.patterns - self.edited - self.whole)),
            *((p, None, EDITED_READ) for p in sorted(self.edited - self.whole)),
            *((p, None, None) for p in sorted(self.whole)),
            *((p, n, None) for p, n in sorted(self.newest)),
        ]


def last(found: list[str], keep: int | None) -> list[str]:
    """The last `keep` of the sorted matches (all of them for None)."""
    return found if keep is None else found[max(0, len(found) - keep) :]


@dataclass
class Files:
    """The answer to a `Request`: plain data, no host access."""

    contents: dict[str, bytes] = field(default_factory=dict)
    matches: dict[str, tuple[str, ...]] = field(default_factory=dict)
    listings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Paths that exist but could not be read (EACCES, EIO), with the reason.
    errors: dict[str, str] = field(default_factory=dict)
    # Node pattern -> the paths it matches, a directory with a trailing "/" (`/dev/nvidia-caps/`).
    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # argv -> what it printed; every command of the request has an answer.
    commands: dict[tuple[str, ...], CommandOutput] = field(default_factory=dict)
    _views: dict[Callable[[Files], Any], Any] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def view(self, make: Callable[[Files], View]) -> View:
        """`make(self)`, built once per answer: a plan asks for the same parsed view (every
        CPU's idle states) from compare, persist and step, and over a fleet it adds up. Views
        are shared: callers read them, never change them."""
        if make not in self._views:
            self._views[make] = make(self)
        result: View = self._views[make]
        return result

    def read(self, path: str) -> bytes | None:
        return self.contents.get(path)

    def text(self, path: str) -> str | None:
        data = self.contents.get(path)
        return None if data is None else data.decode("utf-8", "replace")

    def value(self, path: str) -> str | None:
        """A one-value kernel file without its trailing newline."""
        text = self.text(path)
        return None if text is None else text.rstrip("\n")

    def glob(self, pattern: str) -> tuple[str, ...]:
        if pattern in self.matches:
            return self.matches[pattern]
        if not is_glob(pattern):
            return (pattern,) if pattern in self.contents else ()
        return tuple(sorted(matching(pattern, self.contents)))

    def listing(self, directory: str) -> tuple[str, ...]:
        return self.listings.get(directory, ())

    def node_paths(self, pattern: str) -> tuple[str, ...]:
        return self.nodes.get(pattern, ())

    def output(self, argv: tuple[str, ...]) -> CommandOutput:
        """A requested command's answer (NOT_INSTALLED for one that was not requested)."""
        return self.commands.get(argv, NOT_INSTALLED)
