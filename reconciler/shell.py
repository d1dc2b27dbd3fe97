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

import re
import secrets
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import NamedTuple

from .errors import HostError
from .host import MAX_FILE_BYTES, Files, Host, Request

# tune's own state read whole over SSH (run journals, the stored profile): far above any
# journal tune writes, and still a bound on what one answer can bring back.
WHOLE_MAX_BYTES = 64 << 20

MAGIC = b"TUNE-READ-1\0"
ERRORS_MARK = b"TUNE-READ-ERRORS\n"
SEPARATOR = b"\n==> "
# Records before the file contents: (tag, pattern or listing index, path), all NUL-terminated.
_RECORDS = re.compile(rb"(?:[mdnle]\0[0-9]+\0[^\0]*\0)*c\0")
# A `cd` into `$TUNE_ROOT` that fails exits with this status.
NO_ROOT = 97
# `read_file` of a file that does not exist exits with this status.
ABSENT = 96

# Inside a bracket expression only characters that mean the same to Python's fnmatch and to sh
# and that no shell parses specially; the profile schema admits fewer still.
_BRACKET_BODY = re.compile(r"!?\]?[A-Za-z0-9_.:*?\[-]*")

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
        if [ -d "$e" ]; then [ -h "$e" ] || w "$e" "$2"
        elif [ -e "$e" ] || [ -h "$e" ]; then printf 'l\000%s\000%s\000' "$2" "${e#.}"
        fi
    done
}
"""


@dataclass(frozen=True)
class ScriptResult:
    """What a script printed, and how it exited."""

    stdout: bytes
    stderr: bytes
    status: int


class ShellHost(Host):
    """A host that runs POSIX `sh` scripts; subclasses say how a script reaches `sh`.

    `run` is the one seam: observation sends one script through it today, and apply can send
    its rendered script through the same call.
    """

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
        each = EachScript.of(files.paths, read.cap)
        data, errors = each.parse(self.name, self._checked(each.text, "re-reading files"))
        return read.build(files.answer, data, errors)

    def read_file(self, path: str) -> bytes | None:
        """A whole file (a run journal), uncapped, in one round trip."""
        done = self.run_script(
            f"{_PRELUDE}[ -e {quoted('.' + path)} ] || exit {ABSENT}\n"
            f"exec cat -- {quoted('.' + path)}\n"
        )
        if done.status == ABSENT:
            return None
        return self._checked_done(done, f"reading {path}").stdout

    def append(self, path: str, data: bytes, *, sync: bool = True) -> None:
        """Append to a file (created with mode 0600) in one round trip: the records a run
        gains after its apply, such as the probes `tune verify -H` measures after the boot."""
        target = quoted("." + path)
        flush = f"sync -- {target} 2>/dev/null || sync\n" if sync else ""
        script = f"{_PRELUDE}umask 077\nprintf {printf_format(data)} >>{target} || exit 1\n{flush}"
        self._checked(script, f"appending to {path}")

    def _checked(self, script: str, doing: str) -> ScriptResult:
        return self._checked_done(self.run_script(script), doing)

    def _checked_done(self, done: ScriptResult, doing: str) -> ScriptResult:
        if done.status == NO_ROOT:
            raise HostError(f"{self.name}: the directory in TUNE_ROOT does not exist on the host.")
        if done.status != 0:
            last = _last_line(done.stderr) or f"exit status {done.status}"
            raise HostError(f"{self.name}: {doing} failed: {last}.")
        return done


def quote_pattern(pattern: str) -> str:
    """A glob pattern as an sh word: literal text single-quoted, `*`, `?` and bracket
    expressions left bare so the shell expands them, relative to `$TUNE_ROOT`."""
    if not pattern.startswith("/"):
        raise HostError(f"{pattern!r}: only absolute paths can be read from a host.")
    words = ["."]
    literal: list[str] = []

    def flush() -> None:
        if literal:
            words.append(quoted("".join(literal)))
            literal.clear()

    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c in "*?":
            flush()
            words.append(c)
        elif c == "[" and (end := _bracket_end(pattern, i)) is not None:
            body = pattern[i + 1 : end]
            if not _BRACKET_BODY.fullmatch(body):
                raise HostError(f"{pattern!r}: the bracket expression cannot be sent to a shell.")
            flush()
            words.append(pattern[i : end + 1])
            i = end
        else:
            literal.append(c)
        i += 1
    flush()
    return "".join(words)


def quoted(text: str) -> str:
    """One literal sh word, always quoted, even when shlex would leave the text bare: every
    value tune puts in a script reads the same way."""
    return "'" + text.replace("'", "'\\''") + "'"


_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 ._,:;=/+-@#()")


def printf_format(data: bytes) -> str:
    """`data` as a single-quoted printf format that prints exactly these bytes (octal escapes
    for everything but plain characters: binary, %, backslash and quotes survive)."""
    # A leading `-` would be read as an option by some printf implementations (dash's).
    chars = [
        chr(b) if b in _SAFE and not (i == 0 and b == 0x2D) else f"\\{b:03o}"
        for i, b in enumerate(data)
    ]
    return "'" + "".join(chars) + "'"


def _bracket_end(pattern: str, start: int) -> int | None:
    """Where fnmatch ends the bracket expression opened at `start`, or None if it is literal."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    end = pattern.find("]", j)
    return None if end == -1 else end


class _Item(NamedTuple):
    """One word of a glob's expansion, in the order the shell (and then head) saw it."""

    pattern: int
    path: str
    kind: str  # "m" a file to read, "d" a directory, "n" nothing there


@dataclass
class _Answer:
    items: list[_Item] = field(default_factory=list)
    listed: dict[int, list[str]] = field(default_factory=dict)
    nodes: dict[int, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Reread:
    """The batch could not be split unambiguously: read these files one by one."""

    paths: tuple[str, ...]
    answer: _Answer

    @classmethod
    def of(cls, answer: _Answer) -> Reread:
        return cls(tuple(dict.fromkeys(i.path for i in answer.items if i.kind == "m")), answer)


@dataclass(frozen=True)
class ReadScript:
    """The observation script for a request, and how to turn its output into `Files`."""

    patterns: tuple[str, ...]
    listings: tuple[str, ...]
    text: str
    whole: frozenset[str] = frozenset()  # patterns read past the usual cap (tune's own state)
    cap: int = MAX_FILE_BYTES
    nodes: tuple[str, ...] = ()  # device-node patterns: names and types, never opened

    @classmethod
    def of(cls, request: Request) -> ReadScript:
        reads = request.reads()
        patterns = tuple(p for p, _, _ in reads)
        whole = frozenset(p for p, _, limit in reads if limit is None)
        listings = tuple(sorted(request.listings))
        # One head reads every file, so one cap: the larger one when whole files are wanted;
        # `build` cuts the others back to MAX_FILE_BYTES, as DirectoryHost reads them.
        cap = WHOLE_MAX_BYTES if whole else MAX_FILE_BYTES
        words = [quote_pattern(p) for p, keep, _ in reads if keep is None]
        # The newest n matches of a pattern: its expansion, cut to the last n, as "$@".
        newest = [
            f"set -- {quote_pattern(p)}\n[ $# -gt {keep} ] && shift $(($# - {keep}))\n"
            for p, keep, _ in reads
            if keep is not None
        ]
        lines = ["printf 'TUNE-READ-1\\000'\n"]
        items = [*words, *newest]
        for index, word in enumerate(items):
            loop = f"for f in {word}; do\n" if index < len(words) else f'{word}for f in "$@"; do\n'
            lines.append(
                loop + '    if [ -d "$f" ]; then t=d\n'
                '    elif [ -e "$f" ] || [ -h "$f" ]; then t=m\n'
                "    else t=n; fi\n"
                f'    printf \'%s\\000%s\\000%s\\000\' "$t" {index} "${{f#.}}"\n'
                "done\n"
            )
        if listings:
            lines.append(_WALK)
            for index, directory in enumerate(listings):
                lines.append(f"w {quote_pattern(directory.rstrip('/') or '/')} {index}\n")
        nodes = tuple(sorted(request.nodes))
        for index, pattern in enumerate(nodes):
            lines.append(
                f"for f in {quote_pattern(pattern)}; do\n"
                '    if [ -d "$f" ]; then s=/; elif [ -e "$f" ] || [ -h "$f" ]; then s=\n'
                "    else continue; fi\n"
                f'    printf \'e\\000%s\\000%s%s\\000\' {index} "${{f#.}}" "$s"\n'
                "done\n"
            )
        lines.append("printf 'c\\000'\nprintf 'TUNE-READ-ERRORS\\n' >&2\n")
        if words:
            # The same words again: head sees exactly the expansion listed above, directories
            # and non-matches included, and reports those on stderr.
            lines.append(f"printf '\\n'\nhead -c {cap} -v -- {' '.join(words)}\n")
        for expansion in newest:
            # head prints a header only for a file it opens: the separator's newline goes out
            # only then (a wrong guess, a race, costs the re-read, never a wrong answer).
            lines.append(
                f"{expansion}for f; do [ -r \"$f\" ] && {{ printf '\\n'; break; }}; done\n"
                f'head -c {cap} -v -- "$@"\n'
            )
        text = _PRELUDE + _batched("".join(lines))
        return cls(patterns, listings, text, whole, cap, nodes)

    def parse(self, host: str, done: ScriptResult) -> Files | Reread:
        start = done.stdout.find(MAGIC)
        if start < 0:
            raise HostError(f"{host}: the host's answer does not start with tune's marker.")
        answer, stream = self._records(host, done.stdout, start + len(MAGIC))
        problems = _batch_errors(host, done.stderr, [f".{i.path}" for i in answer.items])
        if problems is None:
            return Reread.of(answer)
        opened = [
            (n, item) for n, item in enumerate(answer.items) if not problems.get(n, ("", False))[1]
        ]
        chunks = stream.split(SEPARATOR)
        headers_ok = chunks[0] == b"" and len(chunks) == len(opened) + 1
        data: dict[str, bytes] = {}
        errors: dict[str, str] = {}
        if headers_ok:
            for (n, item), chunk in zip(opened, chunks[1:], strict=True):
                head = f".{item.path} <==\n".encode("utf-8", "surrogateescape")
                if not chunk.startswith(head):
                    headers_ok = False
                    break
                if item.kind == "m" and n not in problems:
                    data.setdefault(item.path, chunk[len(head) :])
        if not headers_ok:
            return Reread.of(answer)
        for n, (reason, _not_opened) in problems.items():
            item = answer.items[n]
            if item.kind == "m":
                errors.setdefault(item.path, reason)
                data.pop(item.path, None)
        return self.build(answer, data, errors)

    def _records(self, host: str, out: bytes, pos: int) -> tuple[_Answer, bytes]:
        """The NUL-separated records up to `c`, then the head stream after it."""
        records = _RECORDS.match(out, pos)
        if records is None:
            raise HostError(f"{host}: the host's answer was cut short or is not tune's format.")
        fields = out[pos : records.end() - 2].split(b"\0")
        answer = _Answer()
        for tag, number, raw in zip(fields[0:-1:3], fields[1::3], fields[2::3], strict=True):
            index, path = int(number), raw.decode("utf-8", "surrogateescape")
            if tag == b"l":
                answer.listed.setdefault(index, []).append(path)
            elif tag == b"e":
                answer.nodes.setdefault(index, []).append(path)
            else:
                answer.items.append(_Item(index, path, tag.decode()))
        return answer, out[records.end() :]

    def build(self, answer: _Answer, data: dict[str, bytes], errors: dict[str, str]) -> Files:
        """The same `Files`, in the same order, that `DirectoryHost.fetch` builds."""
        files = Files()
        by_pattern: dict[int, list[str]] = {}
        whole_paths = set()
        for item in answer.items:
            if item.kind == "m":
                by_pattern.setdefault(item.pattern, []).append(item.path)
                if self.patterns[item.pattern] in self.whole:
                    whole_paths.add(item.path)
        data = {p: d if p in whole_paths else d[:MAX_FILE_BYTES] for p, d in data.items()}
        for index, pattern in enumerate(self.patterns):
            matched = []
            for path in sorted(set(by_pattern.get(index, ()))):
                if path in errors:
                    files.errors[path] = errors[path]
                elif path in data:
                    files.contents[path] = data[path]
                else:
                    continue
                matched.append(path)
            files.matches[pattern] = tuple(matched)
        for index, directory in enumerate(self.listings):
            files.listings[directory] = tuple(sorted(answer.listed.get(index, ())))
        for index, pattern in enumerate(self.nodes):
            files.nodes[pattern] = tuple(sorted(answer.nodes.get(index, ())))
        return files


@dataclass(frozen=True)
class EachScript:
    """Read files one `head` each, between random boundaries no file content can contain."""

    paths: tuple[str, ...]
    boundary: bytes
    text: str

    @classmethod
    def of(cls, paths: tuple[str, ...], cap: int = MAX_FILE_BYTES) -> EachScript:
        boundary = f"TUNE-{secrets.token_hex(16)}"
        words = " ".join(quoted(f".{p}") for p in paths)
        text = _PRELUDE + _batched(
            "printf 'TUNE-READ-ERRORS\\n' >&2\n"
            f"for f in {words}; do\n"
            f"    printf '\\000{boundary}\\000'\n"
            f'    head -c {cap} -- "$f"\n'
            f"done\nprintf '\\000{boundary}\\000'\n"
        )
        return cls(paths, f"\0{boundary}\0".encode(), text)

    def parse(self, host: str, done: ScriptResult) -> tuple[dict[str, bytes], dict[str, str]]:
        start = done.stdout.find(self.boundary)
        chunks = done.stdout[start:].split(self.boundary)[1:-1] if start >= 0 else []
        if len(chunks) != len(self.paths):
            raise HostError(f"{host}: the host's answer was cut short.")
        problems = _head_errors(host, done.stderr, [f".{p}" for p in self.paths])
        errors = {self.paths[n]: reason for n, (reason, _) in problems.items()}
        data = {p: c for p, c in zip(self.paths, chunks, strict=True) if p not in errors}
        return data, errors


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
    """Finds which argument an error line of head names, arguments taken in order: a thousand
    arguments and a dozen errors must not cost a thousand string searches per line."""

    _SINGLE = re.compile(r"'((?:[^']|'\\'')*)'")

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.position = 0
        self.at: dict[str, list[int]] = {}
        for n, arg in enumerate(args):
            self.at.setdefault(arg, []).append(n)

    def find(self, line: str) -> tuple[int, int] | None:
        """(argument index, where its quoted name starts in `line`), or None."""
        for match in self._SINGLE.finditer(line):
            name = match.group(1).replace("'\\''", "'")
            for n in self.at.get(name, ()):
                if n >= self.position:
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
