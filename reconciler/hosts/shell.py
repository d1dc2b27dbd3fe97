"""Hosts reached through a POSIX shell: one script in, one byte stream out.

A `ShellHost` observes a whole `Request` with a single script that needs only POSIX `sh` and
coreutils on the target (no Python there), so an SSH host answers in one round trip. The script
expands every glob, walks every listing directory and prints every file's bytes with one
`head -v` for all files: a process per file would cost ~1 ms of target CPU each, and a profile
reads a thousand files.

The answer is parsed back into `Files` exactly as `DirectoryHost` builds them, so a plan cannot
tell a snapshot directory from a remote host. The remote side reads `$TUNE_ROOT` (unset: `/`)
as its root, which is how tests point each loopback address at a different snapshot.

Framing: `head -v` separates files with `\\n==> NAME <==\\n`. File contents may be binary (PCI
config space), so the parser checks that the separator occurs exactly once per file; if a file
happens to contain it, or the tree changed between the two glob expansions, the files are read
again with a per-file random boundary (a second round trip, for that rare case only).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from ..core.errors import HostError
from ..core.files import (
    MAX_FILE_BYTES,
    MAX_STATE_BYTES,
    NOT_INSTALLED,
    CommandOutput,
    Files,
    Request,
    cap_rank,
    rooted_body,
)
from ..core.paths import checked, path_matches, within
from ..core.quoting import printf_format, quote_pattern, quoted
from . import recorded
from .base import Host
from .trust import Owned

# tune's own state read whole over SSH (run journals, the stored profile), as DirectoryHost
# reads it: one byte past the limit says the file is larger.
WHOLE_MAX_BYTES = MAX_STATE_BYTES + 1

MAGIC = b"TUNE-READ-1\0"
ERRORS_MARK = b"TUNE-READ-ERRORS\n"
SEPARATOR = b"\n==> "
# A `cd` into `$TUNE_ROOT` that fails exits with this status.
NO_ROOT = 97
# `read_file` of a file that does not exist exits with this status.
ABSENT = 96

# Inside a bracket expression only characters that mean the same to Python's fnmatch and to sh
# and that no shell parses specially; the profile schema admits fewer still.

_PRELUDE = (
    "export LC_ALL=C\n"  # untranslated error messages from head, byte-wise globs
    f'cd -- "${{TUNE_ROOT:-/}}" || exit {NO_ROOT}\n'
)


def _batched(body: str) -> str:
    """`body` with its standard output gathered into large writes. Each `printf` and each file
    `head` prints is a write of its own, and sshd sends each write it reads as an SSH packet:
    a thousand small packets cost the controller ~40 ms of CPU to decrypt and dispatch, where
    the same bytes in full packets cost ~3 ms. POSIX dd with `obs` unlike `ibs` collects its
    input into `obs`-sized output blocks; the script's status is then dd's (reads exit 0)."""
    return f"{{\n{body}}} | dd ibs=64k obs=1M 2>/dev/null\n"


# Every file below a directory, as `os.walk` lists them: hidden ones too, symlinks to files and
# dangling symlinks, but not symlinks to directories and nothing below them.
_WALK = r"""w() {
    for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
        if [ -d "$e" ]; then [ -h "$e" ] || w "$e"
        elif [ -e "$e" ] || [ -h "$e" ]; then printf '%s\000' "${e#.}"
        fi
    done
}
"""


# What the shell expanded stays under each pattern's literal prefix (`host.within`), checked
# after expanding: the quoted literal part of a word comes through a glob unchanged, so the one way
# out is a `.` or `..` component, and sh globs yield them (readdir lists both: dash expands `.?` to
# `..`). One `case` over all the words costs nothing; only when one looks suspect are they kept
# one by one, by number, so that no word is ever parsed again. "$*" joins the words with spaces:
# a component `.` or `..` is followed by `/`, a space or the end. (A hidden file, NVIDIA's
# `.driver-ctr-ready`, is no suspect: keeping a thousand words one by one costs 14 ms of CPU.)
_INSIDE = r"""case "$*" in *"/./"* | *"/../"* | *"/. "* | *"/.. "* | *"/." | *"/..")
    k= i=0
    for w; do
        i=$((i + 1))
        case "$w/" in */./* | */../*) ;; *) k="$k \"\${$i}\"" ;; esac
    done
    eval "set -- $k" ;;
esac
"""


# Whether any of the paths is not a file (symlinks followed): for the listings needed only then.
_GONE = r"""gone() {
    for p; do [ -f "$p" ] || return 0; done
    return 1
}
"""


@dataclass(frozen=True)
class ScriptResult:
    """What a script printed, and how it exited."""

    stdout: bytes
    stderr: bytes
    status: int

    @property
    def said(self) -> str:
        """What a message quotes of a failed script: its standard error (tune's scripts print
        one sentence there), else its exit status."""
        return self.stderr.decode("utf-8", "replace").strip() or f"exit status {self.status}"


class ShellHost(Host):
    """A host that runs POSIX `sh` scripts; subclasses say how a script reaches `sh`.

    `run` is the one seam: observation sends one script through it today, and apply can send
    its rendered script through the same call.
    """

    # The digest of tune's sh library as this connection stored it on the host
    # (`apply.sh_engine.run_with_library`); None: not yet on this connection.
    library: str | None = None
    # What the lock's record adds to the command that holds it: where it was pushed from (a
    # local shell runs this machine's own command: nothing).
    pushed = True

    @abstractmethod
    def run_script(self, script: str, timeout: float | None = None) -> ScriptResult:
        """Run `script` with `sh` on the host (fed on standard input) and collect its output;
        `timeout`: seconds to wait for the answer, when a script (a probe) may run longer than
        the host's command timeout."""

    def fetch(self, request: Request) -> Files:
        read = ReadScript.of(request)
        files = read.parse(self.name, self._checked(read.text, "reading files"))
        if isinstance(files, Files):
            return files
        each = EachScript.of(files.paths, files.caps)
        data, problems = each.parse(self.name, self._checked(each.text, "re-reading files"))
        return read.build(files.answer, data, problems)

    def read_file(self, path: str) -> bytes | None:
        """A whole file of tune's state, in one round trip: as `DirectoryHost.read_file`, up to
        one byte past MAX_STATE_BYTES, for the reader to refuse a larger one."""
        done = self.run_script(
            f"{_PRELUDE}[ -e {quoted('.' + path)} ] || exit {ABSENT}\n"
            f"exec head -c {WHOLE_MAX_BYTES} -- {quoted('.' + path)}\n"
        )
        if done.status == ABSENT:
            return None
        return self._checked_done(done, f"reading {path}").stdout

    def file_size(self, path: str) -> int | None:
        """One round trip, only for a file too large to read (`wc -c` of standard input: a
        seek to its end for a regular file, whatever its name)."""
        done = self.run_script(f"{_PRELUDE}exec wc -c <{quoted('.' + checked(path))}\n")
        text = done.stdout.decode("ascii", "replace").strip()
        return int(text) if done.status == 0 and text.isdigit() else None

    def value_unlike(
        self, path: str, before: str | None, within: float, interval: float
    ) -> str | None:
        """One round trip that reads the file on the host every `interval` seconds until it
        differs from `before` (None: at once), for `within` seconds at most: a reboot's wait
        costs the host a `sleep` a poll, not an SSH session, and the controller one
        round trip a wait. The answer may come a quarter of `within` late on a loaded host
        before it counts as lost (a connection to a host that went down without a word)."""
        ticks = 0 if before is None else max(0, int(within / interval))
        target = quoted("." + checked(path))
        done = self.run_script(
            f"{_PRELUDE}i=0\n"
            "while :; do\n"
            f"    if [ -e {target} ]; then\n"
            # A builtin read for the one whole line a boot id is (a poll forks only its
            # sleep), as lib.sh's is_line reads one. Anything else is read by cat as before:
            # more lines, none, no newline, a read that failed (bash keeps the variable a
            # failed read would set; cat fails on a directory, and the wait with it).
            f'        v= w=; {{ IFS= read -r v && ! IFS= read -r w && [ -z "$w" ]; }} '
            f"2>/dev/null <{target} ||\n"
            f"            v=$(cat -- {target}) || exit 1\n"
            f"""        [ "$v" = {quoted(before or "")} ] || {{ printf '%s' "$v"; exit 0; }}\n"""
            "    fi\n"
            f"    [ $i -lt {ticks} ] || break\n"
            f"    sleep {interval:g}; i=$((i + 1))\n"
            "done\n"
            f"[ -e {target} ] || exit {ABSENT}\n"
            """printf '%s' "$v"\n""",
            timeout=within + 5 + within / 4,
        )
        if done.status == ABSENT:
            return None
        return self._checked_done(done, f"reading {path}").stdout.decode("utf-8", "replace")

    def append(self, path: str, data: bytes, *, sync: bool = True) -> None:
        """Append to a file (created with mode 0600) in one round trip: the records a run
        gains after its apply, such as the probes `tune verify -H` measures after the boot."""
        target = quoted("." + path)
        flush = f"sync -- {target} 2>/dev/null || sync\n" if sync else ""
        script = f"{_PRELUDE}umask 077\nprintf {printf_format(data)} >>{target} || exit 1\n{flush}"
        self._checked(script, f"appending to {path}")

    def owned(self, paths: Sequence[str]) -> tuple[int, dict[str, Owned | None]]:
        """In one round trip: `id -u`, then each path's owner and raw mode (`lstat`), or None
        for a path that is not there."""
        caller, found, _ = self._owned(paths, None)
        return caller, found

    def owned_and_read(
        self, paths: Sequence[str], path: str
    ) -> tuple[int, dict[str, Owned | None], bytes | None]:
        """`owned` and `read_file` in one round trip: the file's bytes follow stat's lines."""
        return self._owned(paths, path)

    def _owned(
        self, paths: Sequence[str], path: str | None
    ) -> tuple[int, dict[str, Owned | None], bytes | None]:
        # "-" only for a path that is not there: any other failure of stat (EACCES, a stat
        # without -c) fails the script, never reads as "nobody's yet", which trusts it. One
        # `stat` for all that are there: a `+` or `-` per path says which its lines answer.
        marks = "".join(
            f'if [ -e {q} ] || [ -h {q} ]; then echo +; set -- "$@" {q}; else echo -; fi\n'
            for q in (quoted("." + p) for p in paths)
        )
        stats = "[ $# -eq 0 ] || stat -c '%u %f' -- \"$@\" || exit 1\n"
        # The file last, after a line of its own: `+` and its bytes, or `-` when absent.
        read = (
            ""
            if path is None
            else f"if [ -e {quoted('.' + path)} ]; then echo +; "
            f"exec head -c {WHOLE_MAX_BYTES} -- {quoted('.' + path)}; else echo -; fi\n"
        )
        script = f"{_PRELUDE}id -u\nset --\n{marks}{stats}{read}"
        done = self._checked(script, "reading who owns tune's state")
        stdout, data = done.stdout, None
        if path is not None:
            # id -u, the marks, a stat line for each `+` mark: the file's line follows them.
            head = stdout.split(b"\n", 1 + len(paths))
            plus = head[1 : 1 + len(paths)].count(b"+")
            parts = stdout.split(b"\n", 1 + len(paths) + plus + 1)
            if len(parts) != 1 + len(paths) + plus + 2 or parts[-2] not in (b"+", b"-"):
                raise HostError(f"{self.name}: unexpected answer reading {path}.")
            data = parts[-1] if parts[-2] == b"+" else None
            stdout = b"\n".join(parts[:-2]) + b"\n"
        lines = stdout.decode("ascii", "replace").split("\n")
        marked, answers = lines[1 : 1 + len(paths)], iter(lines[1 + len(paths) :])
        try:
            caller = int(lines[0])
            found: dict[str, Owned | None] = {}
            for path, mark in zip(paths, marked, strict=False):
                if mark == "-":
                    found[path] = None
                    continue
                if mark != "+":
                    raise ValueError(mark)
                uid, _, mode = next(answers, "").partition(" ")
                found[path] = Owned(int(uid), int(mode, 16))
        except ValueError:
            raise HostError(f"{self.name}: unexpected answer from stat: {lines!r:.200}") from None
        if len(found) != len(paths):
            raise HostError(f"{self.name}: stat did not answer for every path.")
        return caller, found, data

    def _checked(self, script: str, doing: str) -> ScriptResult:
        return self._checked_done(self.run_script(script), doing)

    def _checked_done(self, done: ScriptResult, doing: str) -> ScriptResult:
        if done.status == NO_ROOT:
            raise HostError(f"{self.name}: the directory in TUNE_ROOT does not exist on the host.")
        if done.status != 0:
            last = _last_line(done.stderr) or f"exit status {done.status}"
            raise HostError(f"{self.name}: {doing} failed: {last}.")
        return done


@dataclass
class _Answer:
    """What the script listed: per read pattern, the arguments head got for it (paths with
    the leading `.`) and where they came from; the listings' and node patterns' paths."""

    words: list[list[str]] = field(default_factory=list)
    # Per pattern: "g" words the shell found by expanding a glob; "u" a glob the shell left as
    # it is (nothing matched); "p" a literal path that exists (or is a symlink); "n" one that
    # does not.
    origins: list[str] = field(default_factory=list)
    listed: dict[int, list[str]] = field(default_factory=dict)
    nodes: dict[int, list[str]] = field(default_factory=dict)
    outputs: dict[int, CommandOutput] = field(default_factory=dict)


# Ends each pattern's words among head's arguments: a file every Linux host has, empty when
# read, and never one of the words, which all start with `.`.
GROUP_END = "/dev/null"
# How coreutils' head, under LC_ALL=C, says that an argument it opened is a directory.
_IS_A_DIRECTORY = os.strerror(errno.EISDIR)
# The re-read's own line for a directory, with its number among the paths.
_DIRECTORY = "tune-directory "


@dataclass(frozen=True)
class Reread:
    """The batch could not be split unambiguously: read these files one by one, each with the
    largest cap of the patterns that listed it (`caps`, in the order of `paths`)."""

    paths: tuple[str, ...]
    answer: _Answer
    caps: tuple[int, ...] = ()

    @classmethod
    def of(cls, answer: _Answer, caps: tuple[int, ...]) -> Reread:
        found: dict[str, int] = {}
        for words, origin, cap in zip(answer.words, answer.origins, caps, strict=True):
            for word in words if origin != "n" else ():
                found[word[1:]] = max(cap, found.get(word[1:], 0))
        return cls(tuple(found), answer, tuple(found.values()))


@dataclass(frozen=True)
class ReadScript:
    """The observation script for a request, and how to turn its output into `Files`.

    Every pattern read at MAX_FILE_BYTES goes to one head; each other (a file read whole, the
    newest matches of one) to a head of its own, with its own cap, after it.

    The script lists what head will read before head reads it: each glob's expansion with one
    printf (the shell's own glob, which lists dangling symlinks and leaves an unmatched glob as
    it is), and a test only for literal paths, whose existence the shell does not check. The
    rest (a directory, a dangling symlink, a file that cannot be read) head's own errors say:
    a test per expanded word would cost the target ~20 ms on a 64-CPU host. The parse works a
    list at a time for the same reason on the controller's side.
    """

    patterns: tuple[str, ...]
    listings: tuple[str, ...]
    text: str
    caps: tuple[int, ...] = ()  # per pattern: head's byte cap
    nodes: tuple[str, ...] = ()  # device-node patterns: names and types, never opened
    literal: tuple[bool, ...] = ()  # per pattern: a path the shell does not expand
    apart: tuple[bool, ...] = ()  # per pattern: read by a head of its own (its cap, or newest)
    commands: tuple[tuple[str, ...], ...] = ()

    @classmethod
    def of(cls, request: Request) -> ReadScript:
        return _read_script(request)

    def parse(self, host: str, done: ScriptResult) -> Files | Reread:
        start = done.stdout.find(MAGIC)
        if start < 0:
            raise HostError(f"{host}: the host's answer does not start with tune's marker.")
        answer, stream = self._records(host, done.stdout, start + len(MAGIC))
        arguments = self._arguments(answer)
        problems = _batch_errors(host, done.stderr, arguments)
        if problems is None:
            return Reread.of(answer, self.caps)
        closed = {n for n, (_, not_opened) in problems.items() if not_opened}
        # head printed a header for every argument it opened, and nothing for the others.
        opened = [w for n, w in enumerate(arguments) if n not in closed] if closed else arguments
        if opened:
            chunks = stream.split(SEPARATOR)
            framed = chunks[0] == b"" and len(chunks) == len(opened) + 1
        else:  # at most the newline that would have come before head's first header
            chunks = [b""]
            framed = stream.strip(b"\n") == b""
        if not framed:
            return Reread.of(answer, self.caps)
        heads = [f"{word} <==\n".encode("utf-8", "surrogateescape") for word in opened]
        if not all(map(bytes.startswith, chunks[1:], heads)):
            return Reread.of(answer, self.caps)
        # A path read by several heads keeps its longest read (its largest cap), as
        # DirectoryHost reads a path with the largest cap a pattern asks of it.
        data: dict[str, bytes] = {}
        for chunk, head, word in zip(chunks[1:], heads, opened, strict=True):
            body = chunk[len(head) :]
            if len(body) > len(data.get(word[1:], b"")) or word[1:] not in data:
                data[word[1:]] = body
        return self.build(answer, data, {arguments[n][1:]: p for n, p in problems.items()})

    def _arguments(self, answer: _Answer) -> list[str]:
        """head's arguments, in order: each pattern read with the others ended by GROUP_END."""
        return [
            argument
            for words, apart in zip(answer.words, self.apart, strict=True)
            for argument in (words if apart else (*words, GROUP_END))
        ]

    def _records(self, host: str, out: bytes, pos: int) -> tuple[_Answer, bytes]:
        """The NUL-terminated fields up to `:c`, then the head stream after it. A field that
        starts with `:` opens a group (`:rN` read pattern N, `:nN` literal N is absent, `:lN`
        listing N, `:eN` node pattern N, `:xN` command N's output in hex and its status); every
        other field is a path in the group."""
        end = out.find(b"\0:c\0", pos - 1)
        if end < 0:
            raise HostError(f"{host}: the host's answer was cut short or is not tune's format.")
        groups: dict[str, list[str]] = {}
        together: list[str] = []
        for group in out[pos - 1 : end].decode("utf-8", "surrogateescape").split("\0:")[1:]:
            if group.startswith("w\0"):
                # Every pattern's words, each pattern's ended by GROUP_END.
                together = group[1:].split(f"\0{GROUP_END}")
                continue
            tag, *paths = group.split("\0")
            groups[tag] = paths
        ended_well = not together or together.pop() == ""  # the last GROUP_END ends the group
        if not ended_well or len(together) != self.apart.count(False):
            raise HostError(f"{host}: the host's answer lacks a pattern's expansion.")
        answer = _Answer()
        main = iter(together)
        for index, pattern in enumerate(self.patterns):
            apart = self.apart[index]
            words = groups.get(f"r{index}") if apart else next(main)[1:].split("\0")
            if self.literal[index]:
                answer.words.append([f".{pattern}"])
                answer.origins.append("n" if f"n{index}" in groups else "p")
                continue
            if words is None:
                raise HostError(f"{host}: the host's answer lacks a pattern's expansion.")
            # The script left out what leaves the pattern (a group may be empty); the same
            # rule again here, so that no shell's glob decides alone.
            words = [w for w in words if w and within(pattern, w[1:])]
            answer.words.append(words)
            answer.origins.append("u" if words == [f".{pattern}"] else "g")
        for index in range(len(self.listings)):
            if f"l{index}" in groups:  # a conditional listing that was not needed is absent
                answer.listed[index] = groups[f"l{index}"]
        for index, pattern in enumerate(self.nodes):
            found = groups.get(f"e{index}", [])
            answer.nodes[index] = [p for p in found if within(pattern, p.removesuffix("/"))]
        for index in range(len(self.commands)):
            if f"x{index}" in groups:  # absent: `command -v` did not find it
                answer.outputs[index] = _output(host, groups[f"x{index}"])
        return answer, out[end + 4 :]

    def build(
        self, answer: _Answer, data: dict[str, bytes], problems: dict[str, tuple[str, bool]]
    ) -> Files:
        """The same `Files`, in the same order, that `DirectoryHost.fetch` builds, from what
        head read (`data`) and what it reported (path -> (reason, not even opened))."""
        files = Files()
        for index, pattern in enumerate(self.patterns):
            origin = answer.origins[index]
            paths = [word[1:] for word in answer.words[index]]
            if origin == "n" or (origin == "u" and not path_matches(pattern, paths[0])):
                paths = []  # a file named like an unmatched glob is no match for it
            if problems and not problems.keys().isdisjoint(paths):
                reported = [(p, _reported(origin, problems.get(p))) for p in paths]
                files.errors.update((p, error) for p, (_, error) in reported if error)
                paths = [p for p, (kept, _) in reported if kept]
            else:
                paths = [p for p in paths if p in data]
            matched = tuple(sorted(set(paths)))
            for path in matched:
                if path not in files.errors:
                    files.contents[path] = data[path]
            files.matches[pattern] = matched
        for index, directory in enumerate(self.listings):
            if index in answer.listed:
                files.listings[directory] = tuple(sorted(answer.listed[index]))
        for index, pattern in enumerate(self.nodes):
            files.nodes[pattern] = tuple(sorted(answer.nodes[index]))
        for index, argv in enumerate(self.commands):
            files.commands[argv] = answer.outputs.get(index, NOT_INSTALLED)
        return files


def _output(host: str, fields: list[str]) -> CommandOutput:
    """A command's record: what od printed of its output, then its exit status."""
    stdout = b""
    try:
        hexed, status = fields
        code = int(status)
        stdout = bytes.fromhex("".join(hexed.split()))
    except ValueError:
        code = -1
    if not 0 <= code <= 255:
        raise HostError(f"{host}: the host's answer holds a command output tune cannot read.")
    return CommandOutput(code, stdout[:MAX_FILE_BYTES])


# One command's output in the records, whatever bytes it prints: od's hex holds no NUL that
# could end the field early, and the status comes back through fd 3 past the pipeline. The
# command reads /dev/null, never the rest of this script on sh's standard input; it gets no fd
# 3 or 4 to write into the status; `cat` drains what is past the cap so that it ends as it would
# unread, not by SIGPIPE.
_RUN = (
    "    printf ':x{index}\\000'\n"
    "    {{ tune_status=$( {{ {{ {words} </dev/null 2>/dev/null 3>&- 4>&-; echo $? >&3; }} |\n"
    "        {{ head -c {cap}; cat >/dev/null; }} | od -An -v -tx1 >&4; }} 3>&1 ); }} 4>&1\n"
    "    printf '\\000%s\\000' \"$tune_status\"\n"
)
# A snapshot served as a host (`$TUNE_ROOT` set: the test lab, a demo) answers from what it
# recorded, as `SnapshotHost` does (`reconciler.hosts.recorded`): its commands are not this
# machine's to run. Only tune's own rooted scripts (`files.rooted_script`) run there, from the
# snapshot's root, as `SnapshotHost` computes them from its files.
_COMMAND = (
    'if [ -n "${{TUNE_ROOT:-}}" ]; then\n'
    "    if [ -f {record}/status ]; then\n"
    "        printf ':x{index}\\000'\n"
    "        head -c {cap} {record}/stdout 2>/dev/null | od -An -v -tx1\n"
    "        printf '\\000%s\\000' \"$(head -c 16 {record}/status)\"\n"
    "{rooted}"
    "    fi\n"
    "elif command -v {program} >/dev/null 2>&1; then\n"
    "{run}"
    "fi\n"
)


def _reported(origin: str, problem: tuple[str, bool] | None) -> tuple[bool, str | None]:
    """(a match?, its error) for a word and what head reported on it: a directory is no
    match, nor an unmatched glob; a dangling symlink or an unreadable file is, with the reason
    as its error."""
    if problem is None:
        return True, None
    reason, not_opened = problem
    if (origin == "u" and not_opened) or reason == _IS_A_DIRECTORY:
        return False, None
    return True, reason


@lru_cache(maxsize=8)
def _read_script(request: Request) -> ReadScript:
    """Built once per request: every host of a fleet is sent the same script."""
    reads = request.reads()
    patterns = tuple(p for p, _, _ in reads)
    caps = tuple(cap_rank(limit) for _, _, limit in reads)
    # One head reads every file at the usual cap; a file read whole (tune's state, a file it
    # edits) or only the newest matches of a pattern, by a head of its own after it, so that
    # a large file a glob matches is never read past MAX_FILE_BYTES for their sake.
    apart = tuple(
        keep is not None or cap != MAX_FILE_BYTES
        for (_, keep, _), cap in zip(reads, caps, strict=True)
    )
    conditions = request.conditions()
    listings = tuple(sorted({*request.listings, *conditions}))
    words = [quote_pattern(p) for p in patterns]
    literal = tuple(w == "." + quoted(p) for p, w in zip(patterns, words, strict=True))
    lines = ["printf 'TUNE-READ-1\\000'\n"]
    together = []
    alone = []
    for index, ((_, keep, _), word) in enumerate(zip(reads, words, strict=True)):
        if literal[index]:
            # The shell passes a literal path on whether or not it exists: ask, as lexists.
            lines.append(f"[ -e {word} ] || [ -h {word} ] || printf ':n{index}\\000'\n")
        if not apart[index]:
            together.append(f"{word} {GROUP_END}")
            continue
        # The newest `keep` matches: the expansion cut to its last ones, as "$@".
        newest = "" if keep is None else f"[ $# -gt {keep} ] && shift $(($# - {keep}))\n"
        expansion = f"set -- {word}\n{_INSIDE}{newest}"
        if not literal[index]:
            lines.append(f"{expansion}printf '%s\\000' :r{index} \"$@\"\n")
        alone.append((expansion, caps[index]))
    if listings:
        lines.append(_WALK)
    if conditions:
        lines.append(_GONE)
    for index, directory in enumerate(listings):
        walk = f"printf ':l{index}\\000'; w {quote_pattern(directory.rstrip('/') or '/')}"
        if directory in conditions:
            paths = " ".join(quoted("." + p) for p in conditions[directory])
            walk = f"if gone {paths}; then {walk}; fi"
        lines.append(walk + "\n")
    nodes = tuple(sorted(request.nodes))
    for index, pattern in enumerate(nodes):
        lines.append(
            f"printf ':e{index}\\000'\n"
            f"for f in {quote_pattern(pattern)}; do\n"
            '    case "$f/" in */./* | */../*) continue ;; esac\n'
            '    if [ -d "$f" ]; then s=/; elif [ -e "$f" ] || [ -h "$f" ]; then s=\n'
            "    else continue; fi\n"
            '    printf \'%s%s\\000\' "${f#.}" "$s"\n'
            "done\n"
        )
    commands = tuple(sorted(request.commands))
    for index, argv in enumerate(commands):
        body = rooted_body(argv)
        rooted = ""
        if body is not None:
            shown = " ".join(map(quoted, (*argv[:2], body, *argv[3:])))
            rooted = "    else\n" + _RUN.format(index=index, words=shown, cap=MAX_FILE_BYTES)
        lines.append(
            _COMMAND.format(
                program=quoted(argv[0]),
                index=index,
                run=_RUN.format(index=index, words=" ".join(map(quoted, argv)), cap=MAX_FILE_BYTES),
                rooted=rooted,
                cap=MAX_FILE_BYTES,
                record=quoted("." + recorded.where(argv)),
            )
        )
    if together:
        # Every glob expanded once, into "$@": listed, then given to head as they are, so
        # head sees exactly the words listed, directories and non-matches included, and
        # reports those on stderr. (Expanding them twice cost the target ~6 ms per host.)
        lines.append(f"set -- {' '.join(together)}\n{_INSIDE}printf '%s\\000' :w \"$@\"\n")
    lines.append("printf ':c\\000'\nprintf 'TUNE-READ-ERRORS\\n' >&2\n")
    if together:
        lines.append(f"printf '\\n'\nhead -c {MAX_FILE_BYTES} -v -- \"$@\"\n")
    for expansion, cap in alone:
        # head prints a header only for a file it opens: the separator's newline goes out
        # only then (a wrong guess, a race, costs the re-read, never a wrong answer). With no
        # word left (every match left the pattern), head would read standard input.
        lines.append(
            f"{expansion}for f; do [ -r \"$f\" ] && {{ printf '\\n'; break; }}; done\n"
            f'[ $# -eq 0 ] || head -c {cap} -v -- "$@"\n'
        )
    text = _PRELUDE + _batched("".join(lines))
    return ReadScript(patterns, listings, text, caps, nodes, literal, apart, commands)


@dataclass(frozen=True)
class EachScript:
    """Read files one `head` each, between random boundaries no file content can contain. A
    directory is not opened: its number goes to stderr, so that even a name head would quote
    beyond recognition (a newline in it) is known for what it is."""

    paths: tuple[str, ...]
    boundary: bytes
    text: str

    @classmethod
    def of(cls, paths: tuple[str, ...], caps: tuple[int, ...] = ()) -> EachScript:
        """`caps`: each path's byte cap (MAX_FILE_BYTES for those not given)."""
        boundary = f"TUNE-{secrets.token_hex(16)}"
        caps = caps + (MAX_FILE_BYTES,) * (len(paths) - len(caps))
        words = " ".join(f"{c} {quoted(f'.{p}')}" for p, c in zip(paths, caps, strict=True))
        text = _PRELUDE + _batched(
            "printf 'TUNE-READ-ERRORS\\n' >&2\n"
            f"n=0\nset -- {words}\nwhile [ $# -gt 0 ]; do\n"
            "    c=$1 f=$2; shift 2\n"
            f"    printf '\\000{boundary}\\000'\n"
            f'    if [ -d "$f" ]; then printf \'{_DIRECTORY}%s\\n\' "$n" >&2\n'
            '    else head -c "$c" -- "$f"; fi\n'
            "    n=$((n + 1))\n"
            f"done\nprintf '\\000{boundary}\\000'\n"
        )
        return cls(paths, f"\0{boundary}\0".encode(), text)

    def parse(
        self, host: str, done: ScriptResult
    ) -> tuple[dict[str, bytes], dict[str, tuple[str, bool]]]:
        start = done.stdout.find(self.boundary)
        chunks = done.stdout[start:].split(self.boundary)[1:-1] if start >= 0 else []
        if len(chunks) != len(self.paths):
            raise HostError(f"{host}: the host's answer was cut short.")
        lines = done.stderr.split(b"\n")
        mark = _DIRECTORY.encode()
        directories = {int(line[len(mark) :]) for line in lines if line.startswith(mark)}
        errors = b"\n".join(line for line in lines if not line.startswith(mark))
        found = _head_errors(host, errors, [f".{p}" for p in self.paths])
        found.update((n, (_IS_A_DIRECTORY, False)) for n in directories)
        problems = {self.paths[n]: problem for n, problem in found.items()}
        data = {p: c for p, c in zip(self.paths, chunks, strict=True) if p not in problems}
        return data, problems


def _head_errors(host: str, stderr: bytes, args: list[str]) -> dict[int, tuple[str, bool]]:
    """Which of head's arguments failed, with the reason and whether it could not even be
    opened (then head printed no header for it). head reports in argument order."""
    mark = stderr.find(ERRORS_MARK)
    lines = stderr[mark + len(ERRORS_MARK) :].decode("utf-8", "surrogateescape").splitlines()
    problems: dict[int, tuple[str, bool]] = {}
    named = _Names(args)
    for line in lines if mark >= 0 else []:
        found = named.find(line)
        if found is None:
            raise HostError(f"{host}: unexpected error while reading files: {line}")
        n, at = found
        # GNU: "cannot open 'x' for reading: E"; busybox: "can't open 'x': E".
        problems[n] = (line.rsplit(": ", 1)[-1], line[:at].endswith("open "))
    return problems


class _Names:
    """Finds which argument an error line of head names, arguments taken in order: head
    reports in argument order, so each search starts after the last argument found and a
    thousand arguments cost one pass, however many lines name them."""

    _SINGLE = re.compile(r"'((?:[^']|'\\'')*)'")

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.position = 0

    def find(self, line: str) -> tuple[int, int] | None:
        """(argument index, where its quoted name starts in `line`), or None."""
        for match in self._SINGLE.finditer(line):
            name = match.group(1).replace("'\\''", "'")
            try:
                n = self.args.index(name, self.position)
            except ValueError:
                continue
            self.position = n + 1
            return n, match.start()
        # A name quoted some other way (double quotes around a name with a quote in it).
        for n in range(self.position, len(self.args)):
            at = min((line.find(q) for q in _quoted(self.args[n]) if q in line), default=-1)
            if at >= 0:
                self.position = n + 1
                return n, at
        return None


def _batch_errors(host: str, stderr: bytes, args: list[str]) -> dict[int, tuple[str, bool]] | None:
    """`_head_errors`, or None when a message names no argument (an unusual file name, quoted
    in a way not foreseen): reading file by file then tells which file failed."""
    try:
        return _head_errors(host, stderr, args)
    except HostError:
        return None


def _quoted(arg: str) -> tuple[str, ...]:
    """How head may print a file name in a message: coreutils and busybox quote it."""
    escaped = arg.replace("'", "'\\''")
    return (f"'{arg}'", f'"{arg}"', f"'{escaped}'")


def _last_line(data: bytes) -> str:
    lines = [x for x in data.decode("utf-8", "replace").splitlines() if x.strip()]
    return lines[-1].strip() if lines else ""
