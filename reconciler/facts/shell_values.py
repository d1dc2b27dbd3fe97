"""The variables a POSIX shell holds after sourcing configuration files, computed without a shell.

`grub-mkconfig` sources /etc/default/grub and /etc/default/grub.d/*.cfg with /bin/sh; other
tools source files like them. Those files come from the host, so they are never run here: this
module evaluates the subset of sh that real configuration files use, and for anything outside it
answers `Unknown` (why, and at which file and line), never a value it is not sure of.

Evaluated: assignments (quotes, backslash escapes, backslash-newline continuation), `$VAR`,
`${VAR}` and every POSIX parameter expansion, as dash evaluates them (`${#VAR}`, `:-`, `-`,
`:=`, `=`, `:?`, `?` (which stops the shell), `:+`, `+`, and the patterns of `#`, `##`, `%`,
`%%`), comments, `export`, `unset`,
`:`, `true`, `false`, `echo`, `[`/`test` with string operands (`-n`, `-z`, `=`, `!=`, `!`),
`if`/`elif`/`else`, `case` with literal and `*`/`?` patterns, `&&` and `||`. Where a condition
cannot be decided, a variable is known only when every way through gives it the same value.
A value from a command substitution is Unknown; any other command or construct (a function,
a loop, `.`/`source`, `eval`, a redirection, a pipeline) could change any variable, so every
variable is Unknown from there on until it is assigned again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .shell_syntax import (
    LENGTH,
    NAME,
    PATTERN_OPERATORS,
    AndOr,
    Case,
    Command,
    If,
    Literal,
    Opaque,
    Param,
    Part,
    ShellSyntaxError,
    Simple,
    Unsupported,
    Word,
    parse,
)


@dataclass(frozen=True)
class Unknown:
    """A value the evaluator cannot know exactly, and the first place that made it so."""

    reason: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


Value = str | Unknown | None  # None: the variable is not set


class Script(NamedTuple):
    """One file as the shell sources it."""

    path: str
    text: str


NO_SCRIPT = Script("<none>", "")


@dataclass(frozen=True)
class Variables:
    """The variables after the last script."""

    _state: _State

    def get(self, name: str) -> Value:
        """The value, None when unset, or why it cannot be known."""
        return self._state.get(name, 0)


def evaluate(
    scripts: Iterable[Script], unset_outside: Callable[[str], bool] = lambda _: True
) -> Variables:
    """Source `scripts` in order in one shell whose environment holds no variable, except that
    a name for which `unset_outside` is false has a value set by whoever sources them (so
    reading it before the files assign it gives Unknown)."""
    state = _State(unset_outside)
    for script in scripts:
        state.script = script
        try:
            commands = parse(script.text)
        except ShellSyntaxError as error:
            state.stop(f"sh cannot parse this ({error.reason})", error.line)
            break
        status = state.run_all(commands)
        if status != 0:
            # grub-mkconfig sources each file as the last command of an `if` body under
            # `set -e`: a file whose last command fails stops it.
            line = script.text.count("\n", 0, len(script.text.rstrip("\n"))) + 1
            state.stop("the file's last command fails, and `set -e` stops the shell", line)
        if state.stopped is not None:
            break
    return Variables(state)


# --- evaluation --------------------------------------------------------------------------------

_Status = int | Unknown  # an exit status, or why it cannot be known
_HARMLESS = {":": 0, "true": 0, "false": 1, "echo": 0}
_GLOB = re.compile(r"[*?\[]")
_APPEND = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+=")


@dataclass
class _State:
    unset_outside: Callable[[str], bool]
    values: dict[str, str | Unknown | None] = field(default_factory=dict)
    poisoned: Unknown | None = None
    script: Script = NO_SCRIPT
    stopped: Unknown | None = None

    def copy(self) -> _State:
        return _State(
            self.unset_outside, dict(self.values), self.poisoned, self.script, self.stopped
        )

    def unknown(self, reason: str, line: int) -> Unknown:
        return Unknown(reason, self.script.path, line)

    def stop(self, reason: str, line: int) -> None:
        """The shell stops here (a syntax error, a failure under `set -e`): nothing after it
        runs, and grub-mkconfig writes no menu."""
        self.poison(reason, line)
        self.stopped = self.poisoned

    def poison(self, reason: str, line: int) -> None:
        """Something that could change any variable: each one is Unknown until assigned again."""
        cause = self.unknown(reason, line)
        if self.stopped is not None:
            return
        if self.poisoned is None:
            self.poisoned = cause
        self.values = {name: cause for name in self.values}

    def get(self, name: str, line: int) -> Value:
        if self.stopped is not None:
            return self.stopped
        if name in self.values:
            return self.values[name]
        if self.poisoned is not None:
            return self.poisoned
        if self.unset_outside(name):
            return None
        return self.unknown(f"${name} is not set in these files but by whoever sources them", line)

    # Words

    def expand(self, parts: Sequence[Part], line: int) -> str | Unknown:
        """A word without field splitting or globbing (an assignment's value, `case`'s word)."""
        out: list[str] = []
        unknown: Unknown | None = None
        for part in parts:
            # Every part, after an unknown one too: a later `${X:=w}` or `${X:?w}` still acts.
            value = self._part(part, line)
            if isinstance(value, Unknown):
                unknown = unknown or value
            else:
                out.append(value)
        return self.stopped or unknown or "".join(out)

    def _part(self, part: Part, line: int) -> str | Unknown:
        if isinstance(part, Literal):
            return part.text
        if isinstance(part, Opaque):
            if part.stops:
                self.stop(part.reason, line)
                return self.stopped or self.unknown(part.reason, line)
            if part.effects:
                # `$((X=1))`: any variable may have changed.
                self.poison(f"{part.reason} is not evaluated", line)
            return self.unknown(f"{part.reason} is not evaluated", line)
        value = self.get(part.name, line)
        if isinstance(value, Unknown):
            if part.op is not None and part.op.endswith("?"):
                # dash exits here if the value is unset (or empty): nothing after it is known.
                self.stop(f"${{{part.name}{part.op}...}} may find {part.name} unset", line)
                return self.stopped or value
            return value
        op = part.op
        if op is None:
            return value or ""
        if op == LENGTH:
            # dash counts bytes, not characters.
            return str(len((value or "").encode()))
        if op in PATTERN_OPERATORS:
            return self._trimmed(value or "", op, part.word, line)
        # `-`, `=`, `?`, `+` test for unset; with `:` for unset or empty.
        missing = not value if op.startswith(":") else value is None
        if op.endswith("+"):
            return "" if missing else self.expand(part.word, line)
        if not missing:
            return value or ""
        if op.endswith("-"):
            return self.expand(part.word, line)
        if op.endswith("="):
            assigned = self.expand(part.word, line)
            self.values[part.name] = assigned
            return assigned
        unset = "unset or empty" if op == ":?" else "unset"
        self.stop(f"${{{part.name}{op}...}} finds {part.name} {unset}, and dash exits", line)
        return self.stopped or self.unknown("not evaluated", line)

    def _trimmed(self, value: str, op: str, word: Sequence[Part], line: int) -> str | Unknown:
        """`${X#p}`, `${X##p}`, `${X%p}`, `${X%%p}`: the shortest or longest prefix or suffix
        the pattern matches, removed."""
        pattern = self._pattern(word, line)
        if isinstance(pattern, Unknown):
            return pattern
        size = len(value)
        if op.startswith("#"):
            cuts = range(size + 1) if op == "#" else range(size, -1, -1)
            for cut in cuts:
                if pattern.fullmatch(value[:cut]):
                    return value[cut:]
            return value
        cuts = range(size, -1, -1) if op == "%" else range(size + 1)
        for cut in cuts:
            if pattern.fullmatch(value[cut:]):
                return value[:cut]
        return value

    def _pattern(self, word: Sequence[Part], line: int) -> re.Pattern[str] | Unknown:
        """A pattern word as a regular expression: what was quoted inside the braces matches
        itself, the rest (and an unquoted variable's value) is a glob."""
        regex: list[str] = []
        for part in word:
            text = self._part(part, line)
            if isinstance(text, Unknown):
                return text
            if part.quoted:
                regex.append(re.escape(text))
                continue
            glob = _glob(text)
            if glob is None:
                return self.unknown(f"the pattern {text!r} (a character class)", line)
            regex.append(glob)
        return re.compile("".join(regex), re.DOTALL)

    def fields(self, word: Word) -> list[str] | Unknown:
        """A command argument: one field, or Unknown where field splitting, globbing or an
        empty unquoted expansion would make it something else."""
        value = self.expand(word.parts, word.line)
        if isinstance(value, Unknown):
            return value
        for part in word.parts:
            if part.quoted:
                continue
            if isinstance(part, Literal) and _GLOB.search(part.text) and word.plain != "[":
                return self.unknown(f"the unquoted pattern {part.text!r}", word.line)
            if isinstance(part, Param):
                text = self._part(part, word.line)
                if isinstance(text, Unknown):
                    return text
                if text == "" or any(c in text for c in " \t\n*?["):
                    return self.unknown(
                        f"the unquoted ${part.name} (it is split into words)", word.line
                    )
        return [value]

    # Commands

    def run_all(self, commands: Iterable[Command], tested: bool = False) -> _Status:
        status: _Status = 0
        for command in commands:
            if self.stopped is not None:
                return self.stopped
            status = self._run(command, tested)
        return status

    def _run(self, command: Command, tested: bool) -> _Status:
        """`tested`: the command's status is tested (an `if` condition, the left of `&&`), so
        its failure does not stop grub-mkconfig, which runs with `set -e`."""
        if isinstance(command, Unsupported):
            self.poison(f"{command.reason} is not evaluated", command.line)
            return self.unknown(f"{command.reason} is not evaluated", command.line)
        if isinstance(command, Simple):
            status = self._simple(command)
            if status != 0 and not tested and not isinstance(status, Unknown):
                self.stop("this command fails, which stops a shell run with `set -e`", command.line)
            return status
        if isinstance(command, AndOr):
            status = self._run(command.first, tested=True)
            for index, (op, following) in enumerate(command.rest):
                last = index == len(command.rest) - 1
                status = self._branch(status, op, following, tested or not last)
            return status
        if isinstance(command, If):
            condition = self.run_all(command.condition, tested=True)
            return self._choose(
                condition,
                lambda state: state.run_all(command.then),
                lambda state: state.run_all(command.otherwise),
            )
        return self._case(command)

    def _branch(self, status: _Status, op: str, following: Command, tested: bool) -> _Status:
        """`status && following` or `status || following`."""
        if isinstance(status, Unknown):
            return self._choose(
                status,
                lambda state: state._run(following, tested) if op == "&&" else 0,
                lambda state: state._run(following, tested) if op == "||" else 1,
            )
        runs = (status == 0) == (op == "&&")
        return self._run(following, tested) if runs else status

    def _choose(
        self,
        condition: _Status,
        then: Callable[[_State], _Status],
        otherwise: Callable[[_State], _Status],
    ) -> _Status:
        if not isinstance(condition, Unknown):
            return then(self) if condition == 0 else otherwise(self)
        return self._merge(condition, [then, otherwise])

    def _merge(self, why: Unknown, ways: Sequence[Callable[[_State], _Status]]) -> _Status:
        """Every way through, each from the state now: a variable is known only where all
        of them agree."""
        states = []
        statuses = []
        for way in ways:
            state = self.copy()
            statuses.append(way(state))
            states.append(state)
        cause = Unknown(f"it depends on what sh cannot decide ({why.reason})", why.file, why.line)
        names = set().union(*(s.values for s in states))
        merged: dict[str, str | Unknown | None] = {}
        for name in names:
            seen = [s.get(name, why.line) for s in states]
            unknowns = [v for v in seen if isinstance(v, Unknown)]
            agreed = all(v == seen[0] for v in seen)
            merged[name] = unknowns[0] if unknowns else seen[0] if agreed else cause
        poisons = [s.poisoned for s in states if s.poisoned is not None]
        if poisons:
            self.poisoned = self.poisoned or poisons[0]
        stops = [s.stopped for s in states if s.stopped is not None]
        if stops:
            self.values = merged
            self.stop(f"the shell may stop here ({stops[0]})", why.line)
            return self.stopped or why
        self.values = merged
        agreed = all(s == statuses[0] and not isinstance(s, Unknown) for s in statuses)
        return statuses[0] if agreed else why

    def _case(self, command: Case) -> _Status:
        subject = self.expand(command.word.parts, command.line)
        for index, item in enumerate(command.items):
            for pattern in item.patterns:
                matched = self._matches(subject, pattern)
                if matched is True:
                    return self.run_all(item.body)
                if isinstance(matched, Unknown):
                    rest = command.items[index:]
                    ways = [lambda state, body=other.body: state.run_all(body) for other in rest]
                    return self._merge(matched, [*ways, lambda state: 0])
        return 0

    def _matches(self, subject: str | Unknown, pattern: Word) -> bool | Unknown:
        if isinstance(subject, Unknown):
            return subject
        regex: list[str] = []
        for part in pattern.parts:
            text = self._part(part, pattern.line)
            if isinstance(text, Unknown):
                return text
            if part.quoted or isinstance(part, Param):
                if isinstance(part, Param) and not part.quoted and _GLOB.search(text):
                    return self.unknown("a case pattern from an unquoted variable", pattern.line)
                regex.append(re.escape(text))
                continue
            for char in text:
                if char == "[":
                    return self.unknown("a [...] case pattern", pattern.line)
                regex.append({"*": ".*", "?": "."}.get(char, re.escape(char)))
        return re.fullmatch("".join(regex), subject, re.DOTALL) is not None

    def _simple(self, command: Simple) -> _Status:
        words = list(command.words)
        assignments: list[tuple[str, Word]] = []
        while words and (found := words[0].assignment()) is not None:
            assignments.append(found)
            words.pop(0)
        if not words:
            for name, value in assignments:
                self.values[name] = self.expand(value.parts, value.line)
            return 0
        utility = words[0].plain
        if assignments:
            self.poison(f"assignments before the command {utility!r}", command.line)
            return self.unknown("not evaluated", command.line)
        if utility == "export":
            return self._export(words[1:])
        if utility == "unset":
            return self._unset(words[1:])
        if utility in _HARMLESS:
            # `: ${X:=default}` is how a file gives a variable a default.
            for word in words[1:]:
                self.expand(word.parts, word.line)
            return self.stopped or _HARMLESS[utility]
        if utility in {"[", "test"}:
            args: list[str] = []
            for word in words[1:]:
                got = self.fields(word)
                if isinstance(got, Unknown):
                    return got
                args.extend(got)
            if utility == "[":
                if not args or args[-1] != "]":
                    self.poison("a [ without its ]", command.line)
                    return self.unknown("a [ without its ]", command.line)
                args = args[:-1]
            return _test(args, self.unknown(f"the test [ {' '.join(args)} ]", command.line))
        first = words[0].parts[0] if words[0].parts else None
        if isinstance(first, Literal) and not first.quoted and _APPEND.match(first.text):
            self.stop(
                f"dash has no `+=`: it runs {first.text.partition('=')[0]}=... as a command, "
                "which is not found, and `set -e` stops update-grub",
                command.line,
            )
            return self.stopped or self.unknown("not evaluated", command.line)
        what = f"the command {utility!r}" if utility else "a command"
        self.poison(f"{what} is not evaluated", command.line)
        return self.unknown(f"{what} is not evaluated", command.line)

    def _export(self, words: list[Word]) -> _Status:
        # export is a command: every argument is expanded before any is assigned.
        assigned: list[tuple[str, str | Unknown]] = []
        for word in words:
            found = word.assignment()
            if found is None:
                if word.plain is None or not NAME.fullmatch(word.plain):
                    self.poison("an export argument that is not a name", word.line)
                continue
            name, value = found
            expanded = self.expand(value.parts, value.line)  # `${X:=w}` assigns X even here
            # dash before 0.5.11 splits an unquoted expansion in export's arguments.
            if any(isinstance(p, Param | Opaque) and not p.quoted for p in value.parts):
                expanded = self.unknown(
                    f"export {name}=... with an unquoted expansion (shells split it differently)",
                    word.line,
                )
            assigned.append((name, expanded))
        if self.stopped is not None:
            return self.stopped
        self.values.update(assigned)
        return 0

    def _unset(self, words: list[Word]) -> _Status:
        for word in words:
            name = word.plain
            if name is None or not NAME.fullmatch(name):
                self.poison("unset with options or patterns", word.line)
                return self.unknown("not evaluated", word.line)
            self.values[name] = None
        return 0


def _test(args: list[str], unknown: Unknown) -> _Status:
    """`test` with string operands only: the exit status, or Unknown."""
    if args and args[0] == "!" and len(args) > 1:
        inner = _test(args[1:], unknown)
        return inner if isinstance(inner, Unknown) else 1 - inner
    if len(args) == 0:
        return 1
    if len(args) == 1:
        return 0 if args[0] else 1
    if len(args) == 2 and args[0] in {"-n", "-z"}:
        empty = args[1] == ""
        return int(empty) if args[0] == "-n" else int(not empty)
    if len(args) == 3 and args[1] in {"=", "!="}:
        equal = args[0] == args[2]
        return int(not equal) if args[1] == "=" else int(equal)
    return unknown


def _glob(text: str) -> str | None:
    """An unquoted piece of a pattern as a regular expression, as dash's pmatch reads it: `*`,
    `?`, `[...]` (`!` negates; `^` is an ordinary character), a backslash quotes the next
    character. None for a character class (`[[:alpha:]]`), which is left unknown."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "\\" and i + 1 < len(text):
            i += 1
            out.append(re.escape(text[i]))
        elif char == "[":
            start = i + 1
            negate = text[start : start + 1] == "!"
            first = start + 1 if negate else start
            end = text.find("]", first + 1)
            if end < 0:
                out.append(re.escape(char))
            else:
                members = text[first:end]
                if "[:" in members or "[=" in members or "[." in members:
                    return None
                escaped = "".join("-" if c == "-" else re.escape(c) for c in members)
                out.append(f"[{'^' if negate else ''}{escaped}]")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)
