"""The variables a POSIX shell holds after sourcing configuration files, computed without a shell.

`grub-mkconfig` sources /etc/default/grub and /etc/default/grub.d/*.cfg with /bin/sh; other
tools source files like them. Those files come from the host, so they are never run here: this
module evaluates the subset of sh that real configuration files use, and for anything outside it
answers `Unknown` (why, and at which file and line), never a value it is not sure of.

Evaluated: assignments (quotes, backslash escapes, backslash-newline continuation), `$VAR`,
`${VAR}`, `${VAR:-w}`, `${VAR-w}`, `${VAR:+w}`, `${VAR+w}`, comments, `export`, `unset`,
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


@dataclass(frozen=True)
class Unknown:
    """A value the evaluator cannot know exactly, and the first place that made it so."""

    reason: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


Value = str | Unknown | None  # None: the variable is not set


@dataclass(frozen=True)
class Script:
    """One file as the shell sources it."""

    path: str
    text: str


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
            tokens = _Lexer(script.text).tokens()
            commands = _Parser(tokens).program()
        except _SyntaxError as error:
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


# --- words -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Literal:
    text: str
    quoted: bool


@dataclass(frozen=True)
class _Param:
    name: str
    op: str | None  # None, "-", ":-", "+", ":+"
    word: tuple[_Part, ...]
    quoted: bool


@dataclass(frozen=True)
class _Opaque:
    """An expansion whose value this evaluator cannot know; `effects`: it may also change
    variables or stop the shell (`${X:=w}`, `${X?w}`, arithmetic)."""

    reason: str
    quoted: bool
    effects: bool = False


_Part = _Literal | _Param | _Opaque


@dataclass(frozen=True)
class _Word:
    parts: tuple[_Part, ...]
    line: int

    @property
    def plain(self) -> str | None:
        """The word's text when it is one unquoted literal (a reserved word, an operator)."""
        if len(self.parts) == 1 and isinstance(self.parts[0], _Literal):
            return None if self.parts[0].quoted else self.parts[0].text
        return None

    def assignment(self) -> tuple[str, _Word] | None:
        first = self.parts[0] if self.parts else None
        if not isinstance(first, _Literal) or first.quoted:
            return None
        match = _ASSIGNMENT.match(first.text)
        if not match:
            return None
        rest = first.text[match.end() :]
        parts = ((_Literal(rest, False),) if rest else ()) + self.parts[1:]
        return match.group(1), _Word(parts, self.line)


@dataclass(frozen=True)
class _Op:
    text: str
    line: int


_Token = _Word | _Op
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_METACHARS = " \t\n;&|()<>"
_OPERATORS = (
    *("&&", "||", ";;", ";&", "<<", ">>", "<&", ">&", "<>", ">|"),
    *("&", "|", ";", "(", ")", "<", ">", "\n"),
)


class _SyntaxError(Exception):
    def __init__(self, reason: str, line: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


class _Lexer:
    """Tokens as sh's lexer makes them: words (with their quoting kept) and operators."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.line = 1

    def tokens(self) -> list[_Token]:
        out: list[_Token] = []
        while True:
            self._blanks()
            if self.i >= len(self.text):
                return out
            char = self.text[self.i]
            if char == "#":
                while self.i < len(self.text) and self.text[self.i] != "\n":
                    self.i += 1
                continue
            operator = next((o for o in _OPERATORS if self.text.startswith(o, self.i)), None)
            if operator is not None:
                out.append(_Op(operator, self.line))
                self.i += len(operator)
                self.line += operator.count("\n")
                continue
            out.append(self._word())

    def _blanks(self) -> None:
        while self.i < len(self.text):
            if self.text[self.i] in " \t":
                self.i += 1
            elif self.text.startswith("\\\n", self.i):
                self.i += 2
                self.line += 1
            else:
                return

    def _word(self) -> _Word:
        line = self.line
        parts: list[_Part] = []
        literal: list[str] = []

        def flush() -> None:
            if literal:
                parts.append(_Literal("".join(literal), False))
                literal.clear()

        while self.i < len(self.text):
            char = self.text[self.i]
            if char in _METACHARS:
                break
            if char == "\\":
                if self.text.startswith("\\\n", self.i):
                    self.i += 2
                    self.line += 1
                    continue
                flush()
                if self.i + 1 >= len(self.text):
                    self.i += 1
                    break
                parts.append(_Literal(self.text[self.i + 1], True))
                self.i += 2
            elif char == "'":
                flush()
                end = self.text.find("'", self.i + 1)
                if end < 0:
                    raise _SyntaxError("a ' quote is never closed", self.line)
                body = self.text[self.i + 1 : end]
                parts.append(_Literal(body, True))
                self.line += body.count("\n")
                self.i = end + 1
            elif char == '"':
                flush()
                parts.extend(self._double_quoted())
            elif char == "$":
                flush()
                parts.append(self._dollar(quoted=False))
            elif char == "`":
                flush()
                parts.append(self._backquoted(quoted=False))
            else:
                if char == "~" and not literal and not parts:
                    flush()
                    parts.append(_Opaque("tilde expansion", False))
                    self.i += 1
                    continue
                literal.append(char)
                self.i += 1
        flush()
        return _Word(tuple(parts), line)

    def _double_quoted(self) -> list[_Part]:
        start = self.line
        self.i += 1
        parts: list[_Part] = []
        literal: list[str] = []

        def flush() -> None:
            if literal:
                parts.append(_Literal("".join(literal), True))
                literal.clear()

        while self.i < len(self.text):
            char = self.text[self.i]
            if char == '"':
                self.i += 1
                flush()
                return parts or [_Literal("", True)]
            if char == "\\" and self.i + 1 < len(self.text) and self.text[self.i + 1] in '$`"\\\n':
                if self.text[self.i + 1] == "\n":
                    self.line += 1
                else:
                    literal.append(self.text[self.i + 1])
                self.i += 2
            elif char == "$":
                flush()
                parts.append(self._dollar(quoted=True))
            elif char == "`":
                flush()
                parts.append(self._backquoted(quoted=True))
            else:
                if char == "\n":
                    self.line += 1
                literal.append(char)
                self.i += 1
        raise _SyntaxError('a " quote is never closed', start)

    def _backquoted(self, quoted: bool) -> _Opaque:
        end = self.i + 1
        while end < len(self.text) and self.text[end] != "`":
            end += 2 if self.text[end] == "\\" else 1
        if end >= len(self.text):
            raise _SyntaxError("a ` command substitution is never closed", self.line)
        self.line += self.text.count("\n", self.i, end)
        self.i = end + 1
        return _Opaque("a command substitution (`...`)", quoted)

    def _dollar(self, quoted: bool) -> _Part:
        text, i = self.text, self.i + 1
        if text.startswith("((", i):
            self._skip_parens(i)
            return _Opaque("arithmetic expansion $((...))", quoted, effects=True)
        if text.startswith("(", i):
            self._skip_parens(i)
            return _Opaque("a command substitution $(...)", quoted)
        if text.startswith("{", i):
            return self._braced(quoted)
        name = _NAME.match(text, i)
        if name:
            self.i = name.end()
            return _Param(name.group(), None, (), quoted)
        if i < len(text) and text[i] in "0123456789@*#?$!-":
            self.i = i + 1
            return _Opaque(f"the special parameter ${text[i]}", quoted)
        if i < len(text) and text[i] in "'\"" and not quoted:
            # $'...' and $"..." mean different things to dash and bash.
            self.i = i
            return _Opaque(f"${text[i]}...{text[i]} quoting", quoted)
        self.i = i
        return _Literal("$", quoted)

    def _skip_parens(self, i: int) -> None:
        depth = 0
        quote = ""
        start = self.line
        while i < len(self.text):
            char = self.text[i]
            if char == "\n":
                self.line += 1
            if quote:
                if char == quote:
                    quote = ""
                elif char == "\\" and quote == '"':
                    i += 1
            elif char in "'\"":
                quote = char
            elif char == "\\":
                i += 1
            elif char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    self.i = i + 1
                    return
            i += 1
        raise _SyntaxError("a $( is never closed", start)

    def _braced(self, quoted: bool) -> _Part:
        text = self.text
        i = self.i + 2
        name = _NAME.match(text, i)
        end = self._closing_brace(i)
        body = text[i:end]
        self.line += body.count("\n")
        self.i = end + 1
        if not name:
            return _Opaque(f"the expansion ${{{body}}}", quoted)
        after = text[name.end() : end]
        if after == "":
            return _Param(name.group(), None, (), quoted)
        op = next((o for o in (":-", ":+", "-", "+") if after.startswith(o)), None)
        if op is None:
            effects = after.startswith((":=", "=", ":?", "?"))
            return _Opaque(f"the expansion ${{{body}}}", quoted, effects=effects)
        word = after[len(op) :]
        if any(c in word for c in "'\"\\`") or "$(" in word or "${" in word.replace("${", "", 0):
            return _Opaque(
                f"the expansion ${{{body}}} (quotes, escapes or substitutions inside it)", quoted
            )
        return _Param(name.group(), op, _simple_word(word, quoted), quoted)

    def _closing_brace(self, i: int) -> int:
        depth = 1
        while i < len(self.text):
            char = self.text[i]
            if char == "\\":
                i += 2
                continue
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return i
            i += 1
        raise _SyntaxError("a ${ is never closed", self.line)


def _simple_word(text: str, quoted: bool) -> tuple[_Part, ...]:
    """The word of `${X:-word}` that has no quotes or escapes: literals and `$NAME`s."""
    parts: list[_Part] = []
    i = 0
    while i < len(text):
        dollar = text.find("$", i)
        if dollar < 0:
            parts.append(_Literal(text[i:], quoted))
            break
        if dollar > i:
            parts.append(_Literal(text[i:dollar], quoted))
        name = _NAME.match(text, dollar + 1)
        if name:
            parts.append(_Param(name.group(), None, (), quoted))
            i = name.end()
        elif text.startswith("{", dollar + 1) and (
            braced := re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}").match(text, dollar + 1)
        ):
            parts.append(_Param(braced.group(1), None, (), quoted))
            i = braced.end()
        elif dollar + 1 < len(text):
            parts.append(_Opaque(f"${text[dollar + 1]} inside ${{...}}", quoted))
            i = dollar + 2
        else:
            parts.append(_Literal("$", quoted))
            i = dollar + 1
    return tuple(parts)


# --- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Simple:
    words: tuple[_Word, ...]
    line: int


@dataclass(frozen=True)
class _Unsupported:
    reason: str
    line: int


@dataclass(frozen=True)
class _If:
    condition: tuple[_Command, ...]
    then: tuple[_Command, ...]
    otherwise: tuple[_Command, ...]  # `elif` is an `if` here


@dataclass(frozen=True)
class _CaseItem:
    patterns: tuple[_Word, ...]
    body: tuple[_Command, ...]


@dataclass(frozen=True)
class _Case:
    word: _Word
    items: tuple[_CaseItem, ...]
    line: int


@dataclass(frozen=True)
class _AndOr:
    first: _Command
    rest: tuple[tuple[str, _Command], ...]  # ("&&" | "||", command)


_Command = _Simple | _Unsupported | _If | _Case | _AndOr
_RESERVED = {"then", "elif", "else", "fi", "do", "done", "esac", "}", "in"}
_UNSUPPORTED_RESERVED = {"while", "until", "for", "{", "!", "function", "select", "[["}
_SEPARATORS = {";", "\n"}


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.i = 0

    def program(self) -> list[_Command]:
        commands = self._list(stop=set())
        if self.i < len(self.tokens):
            token = self.tokens[self.i]
            raise _SyntaxError(f"unexpected {_show(token)}", token.line)
        return commands

    def _peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _peek_word(self) -> str | None:
        token = self._peek()
        return token.plain if isinstance(token, _Word) else None

    def _skip_separators(self) -> None:
        while isinstance(self._peek(), _Op) and self._peek().text in _SEPARATORS:  # type: ignore[union-attr]
            self.i += 1

    def _list(self, stop: set[str]) -> list[_Command]:
        """Commands up to a reserved word in `stop` (left for the caller) or the end."""
        commands: list[_Command] = []
        while True:
            self._skip_separators()
            token = self._peek()
            if token is None:
                return commands
            if isinstance(token, _Op) and token.text in {";;", ";&", ")"}:
                return commands
            if self._peek_word() in stop:
                return commands
            commands.append(self._and_or())

    def _and_or(self) -> _Command:
        first = self._command()
        rest: list[tuple[str, _Command]] = []
        while isinstance(self._peek(), _Op) and self._peek().text in {"&&", "||"}:  # type: ignore[union-attr]
            op = self.tokens[self.i].text  # type: ignore[union-attr]
            self.i += 1
            while isinstance(self._peek(), _Op) and self._peek().text == "\n":  # type: ignore[union-attr]
                self.i += 1
            rest.append((op, self._command()))
        return _AndOr(first, tuple(rest)) if rest else first

    def _command(self) -> _Command:
        token = self._peek()
        assert token is not None
        word = self._peek_word()
        if word == "if":
            return self._if()
        if word == "case":
            return self._case()
        if word in _RESERVED:
            raise _SyntaxError(f"unexpected {word!r}", token.line)
        if word in _UNSUPPORTED_RESERVED:
            return self._skip_compound(word or "", token.line)
        if isinstance(token, _Op) and token.text == "(":
            return self._skip_group(token.line, "a subshell ( ... )")
        words: list[_Word] = []
        unsupported: str | None = None
        while (token := self._peek()) is not None:
            if isinstance(token, _Op):
                if token.text in _SEPARATORS | {"&&", "||", ";;", ";&", ")"}:
                    break
                if token.text == "(":
                    return self._skip_group(token.line, "a function definition")
                unsupported = unsupported or f"the operator {token.text!r}"
                self.i += 1
                continue
            words.append(token)
            self.i += 1
        line = words[0].line if words else self.tokens[self.i - 1].line
        if not words and unsupported is None:
            raise _SyntaxError("a command is missing", line)
        if unsupported is not None:
            return _Unsupported(unsupported, line)
        return _Simple(tuple(words), line)

    def _skip_compound(self, word: str, line: int) -> _Command:
        """A loop, a group or another construct not evaluated: skipped to its end."""
        end = {"while": "done", "until": "done", "for": "done", "select": "done", "{": "}"}
        closing = end.get(word)
        depth = 0
        while self.i < len(self.tokens):
            token = self.tokens[self.i]
            if closing is None and isinstance(token, _Op) and token.text in _SEPARATORS:
                break
            plain = self._peek_word()
            self.i += 1
            if closing is not None and plain is not None and end.get(plain) == closing:
                depth += 1
            elif closing is not None and plain == closing:
                depth -= 1
                if depth == 0:
                    break
        return _Unsupported(f"`{word}`", line)

    def _skip_group(self, line: int, what: str) -> _Command:
        depth = 0
        while self.i < len(self.tokens):
            token = self.tokens[self.i]
            self.i += 1
            if isinstance(token, _Op) and token.text == "(":
                depth += 1
            elif isinstance(token, _Op) and token.text == ")":
                depth -= 1
                if depth == 0:
                    break
        if what == "a function definition":
            self._skip_separators()
            if self._peek_word() == "{":
                self.i += 1
                self._skip_compound_body("}")
        return _Unsupported(what, line)

    def _skip_compound_body(self, end: str) -> None:
        depth = 1
        while self.i < len(self.tokens):
            plain = self._peek_word()
            self.i += 1
            if plain == "{":
                depth += 1
            elif plain == end:
                depth -= 1
                if depth == 0:
                    return

    def _expect(self, word: str) -> None:
        token = self._peek()
        if self._peek_word() != word:
            line = token.line if token else (self.tokens[-1].line if self.tokens else 1)
            raise _SyntaxError(f"expected {word!r}", line)
        self.i += 1

    def _if(self) -> _Command:
        line = self.tokens[self.i].line
        self.i += 1  # if / elif
        condition = self._list({"then"})
        self._expect("then")
        then = self._list({"elif", "else", "fi"})
        if not condition or not then:
            raise _SyntaxError("an if with an empty condition or body", line)
        otherwise: tuple[_Command, ...] = ()
        word = self._peek_word()
        if word == "elif":
            otherwise = (self._if(),)
            return _If(tuple(condition), tuple(then), otherwise)
        if word == "else":
            self.i += 1
            otherwise = tuple(self._list({"fi"}))
            if not otherwise:
                raise _SyntaxError("an else with an empty body", line)
        self._expect("fi")
        return _If(tuple(condition), tuple(then), otherwise)

    def _case(self) -> _Command:
        line = self.tokens[self.i].line
        self.i += 1
        token = self._peek()
        if not isinstance(token, _Word):
            raise _SyntaxError("case without a word", line)
        self.i += 1
        self._skip_separators()
        self._expect("in")
        items: list[_CaseItem] = []
        while True:
            self._skip_separators()
            if self._peek_word() == "esac":
                self.i += 1
                return _Case(token, tuple(items), line)
            if isinstance(self._peek(), _Op) and self._peek().text == "(":  # type: ignore[union-attr]
                self.i += 1
            patterns: list[_Word] = []
            while True:
                pattern = self._peek()
                if not isinstance(pattern, _Word):
                    raise _SyntaxError("a case pattern is missing", line)
                patterns.append(pattern)
                self.i += 1
                op = self._peek()
                if isinstance(op, _Op) and op.text == "|":
                    self.i += 1
                    continue
                if isinstance(op, _Op) and op.text == ")":
                    self.i += 1
                    break
                raise _SyntaxError("a case pattern is not closed by ')'", pattern.line)
            body = self._list({"esac"})
            op = self._peek()
            if isinstance(op, _Op) and op.text == ";&":
                body = [*body, _Unsupported("a case fall-through ;&", op.line)]
            if isinstance(op, _Op) and op.text in {";;", ";&"}:
                self.i += 1
            items.append(_CaseItem(tuple(patterns), tuple(body)))


def _show(token: _Token) -> str:
    if isinstance(token, _Op):
        return "end of line" if token.text == "\n" else repr(token.text)
    return repr(token.plain or "word")


# --- evaluation --------------------------------------------------------------------------------

_Status = int | Unknown  # an exit status, or why it cannot be known
_HARMLESS = {":": 0, "true": 0, "false": 1, "echo": 0}
_GLOB = re.compile(r"[*?\[]")


@dataclass
class _State:
    unset_outside: Callable[[str], bool]
    values: dict[str, str | Unknown | None] = field(default_factory=dict)
    poisoned: Unknown | None = None
    script: Script = Script("<none>", "")
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

    def expand(self, parts: Sequence[_Part], line: int) -> str | Unknown:
        """A word without field splitting or globbing (an assignment's value, `case`'s word)."""
        out: list[str] = []
        for part in parts:
            value = self._part(part, line)
            if isinstance(value, Unknown):
                return value
            out.append(value)
        return "".join(out)

    def _part(self, part: _Part, line: int) -> str | Unknown:
        if isinstance(part, _Literal):
            return part.text
        if isinstance(part, _Opaque):
            return self.unknown(f"{part.reason} is not evaluated", line)
        value = self.get(part.name, line)
        if isinstance(value, Unknown):
            return value
        use_word = {
            None: False,
            "-": value is None,
            ":-": not value,
            "+": value is not None,
            ":+": bool(value),
        }[part.op]
        if use_word:
            return self.expand(part.word, line)
        if part.op in {"+", ":+"}:
            return ""
        return value or ""

    def fields(self, word: _Word) -> list[str] | Unknown:
        """A command argument: one field, or Unknown where field splitting, globbing or an
        empty unquoted expansion would make it something else."""
        value = self.expand(word.parts, word.line)
        if isinstance(value, Unknown):
            return value
        for part in word.parts:
            if part.quoted:
                continue
            if isinstance(part, _Literal) and _GLOB.search(part.text) and word.plain != "[":
                return self.unknown(f"the unquoted pattern {part.text!r}", word.line)
            if isinstance(part, _Param):
                text = self._part(part, word.line)
                if isinstance(text, Unknown):
                    return text
                if text == "" or any(c in text for c in " \t\n*?["):
                    return self.unknown(
                        f"the unquoted ${part.name} (it is split into words)", word.line
                    )
        return [value]

    # Commands

    def run_all(self, commands: Iterable[_Command], tested: bool = False) -> _Status:
        status: _Status = 0
        for command in commands:
            if self.stopped is not None:
                return self.stopped
            status = self._run(command, tested)
        return status

    def _run(self, command: _Command, tested: bool) -> _Status:
        """`tested`: the command's status is tested (an `if` condition, the left of `&&`), so
        its failure does not stop grub-mkconfig, which runs with `set -e`."""
        if isinstance(command, _Unsupported):
            self.poison(f"{command.reason} is not evaluated", command.line)
            return self.unknown(f"{command.reason} is not evaluated", command.line)
        if isinstance(command, _Simple):
            status = self._simple(command)
            if status != 0 and not tested and not isinstance(status, Unknown):
                self.stop("this command fails, which stops a shell run with `set -e`", command.line)
            return status
        if isinstance(command, _AndOr):
            status = self._run(command.first, tested=True)
            for index, (op, following) in enumerate(command.rest):
                last = index == len(command.rest) - 1
                status = self._branch(status, op, following, tested or not last)
            return status
        if isinstance(command, _If):
            condition = self.run_all(command.condition, tested=True)
            return self._choose(
                condition,
                lambda state: state.run_all(command.then),
                lambda state: state.run_all(command.otherwise),
            )
        return self._case(command)

    def _branch(self, status: _Status, op: str, following: _Command, tested: bool) -> _Status:
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

    def _case(self, command: _Case) -> _Status:
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

    def _matches(self, subject: str | Unknown, pattern: _Word) -> bool | Unknown:
        if isinstance(subject, Unknown):
            return subject
        regex: list[str] = []
        for part in pattern.parts:
            text = self._part(part, pattern.line)
            if isinstance(text, Unknown):
                return text
            if part.quoted or isinstance(part, _Param):
                if isinstance(part, _Param) and not part.quoted and _GLOB.search(text):
                    return self.unknown("a case pattern from an unquoted variable", pattern.line)
                regex.append(re.escape(text))
                continue
            for char in text:
                if char == "[":
                    return self.unknown("a [...] case pattern", pattern.line)
                regex.append({"*": ".*", "?": "."}.get(char, re.escape(char)))
        return re.fullmatch("".join(regex), subject, re.DOTALL) is not None

    def _simple(self, command: _Simple) -> _Status:
        words = list(command.words)
        assignments: list[tuple[str, _Word]] = []
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
            return _HARMLESS[utility]
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
        what = f"the command {utility!r}" if utility else "a command"
        self.poison(f"{what} is not evaluated", command.line)
        return self.unknown(f"{what} is not evaluated", command.line)

    def _export(self, words: list[_Word]) -> _Status:
        for word in words:
            found = word.assignment()
            if found is None:
                if word.plain is None or not _NAME.fullmatch(word.plain):
                    self.poison("an export argument that is not a name", word.line)
                continue
            name, value = found
            # dash before 0.5.11 splits an unquoted expansion in export's arguments.
            if any(isinstance(p, _Param | _Opaque) and not p.quoted for p in value.parts):
                self.values[name] = self.unknown(
                    f"export {name}=... with an unquoted expansion (shells split it differently)",
                    word.line,
                )
            else:
                self.values[name] = self.expand(value.parts, value.line)
        return 0

    def _unset(self, words: list[_Word]) -> _Status:
        for word in words:
            name = word.plain
            if name is None or not _NAME.fullmatch(name):
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
