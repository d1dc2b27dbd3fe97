"""The syntax of the POSIX-sh subset that configuration files use: words with their quoting
kept, and commands (simple ones, `if`, `case`, `&&`/`||`), for `shell_values` to evaluate.
Whatever else a file holds (loops, functions, redirections, subshells) is one `Unsupported`
command where it stands; a file sh itself could not parse raises `ShellSyntaxError`."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import NamedTuple

# The syntax tree's nodes are NamedTuples: values as immutable as frozen dataclasses, and only
# `isinstance` tells them apart here, but made at import for a tenth of the cost (every
# `tune plan` of a host with GRUB imports this module).


class Literal(NamedTuple):
    text: str
    quoted: bool


class Param(NamedTuple):
    """`$NAME` or `${NAME<op><word>}`. In `word` a literal's `quoted` says whether it was
    quoted inside the braces: that decides, for a pattern (`#`, `%`), whether `*` matches."""

    name: str
    op: str | None  # None, LENGTH, or one of OPERATORS
    word: tuple[Part, ...]
    quoted: bool


# `${#NAME}`
LENGTH = "length"
# The operators of `${NAME<op>word}` (POSIX 2.6.2), longest first so `:-` is not taken for `-`.
OPERATORS = (":-", ":=", ":?", ":+", "##", "%%", "-", "=", "?", "+", "#", "%")
PATTERN_OPERATORS = frozenset({"#", "##", "%", "%%"})


class Opaque(NamedTuple):
    """An expansion whose value this evaluator cannot know; `effects`: it may also change
    variables (arithmetic that assigns); `stops`: dash stops on it (`${X/a/b}`)."""

    reason: str
    quoted: bool
    effects: bool = False
    stops: bool = False


Part = Literal | Param | Opaque


class Word(NamedTuple):
    parts: tuple[Part, ...]
    line: int

    @property
    def plain(self) -> str | None:
        """The word's text when it is one unquoted literal (a reserved word, an operator)."""
        if len(self.parts) == 1 and isinstance(self.parts[0], Literal):
            return None if self.parts[0].quoted else self.parts[0].text
        return None

    def assignment(self) -> tuple[str, Word] | None:
        first = self.parts[0] if self.parts else None
        if not isinstance(first, Literal) or first.quoted:
            return None
        match = _ASSIGNMENT.match(first.text)
        if not match:
            return None
        rest = first.text[match.end() :]
        parts = ((Literal(rest, False),) if rest else ()) + self.parts[1:]
        return match.group(1), Word(parts, self.line)


class Op(NamedTuple):
    text: str
    line: int


Token = Word | Op
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_METACHARS = " \t\n;&|()<>"
_OPERATORS = (
    *("&&", "||", ";;", ";&", "<<", ">>", "<&", ">&", "<>", ">|"),
    *("&", "|", ";", "(", ")", "<", ">", "\n"),
)


class ShellSyntaxError(Exception):
    def __init__(self, reason: str, line: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


@dataclass
class _Parts:
    """A word's parts as the lexer finds them: runs of plain characters gathered into one
    literal (quoted or not), expansions and quoted pieces in between."""

    quoted: bool
    parts: list[Part] = field(default_factory=list)
    literal: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.parts and not self.literal

    def char(self, char: str) -> None:
        self.literal.append(char)

    def add(self, part: Part) -> None:
        self._flush()
        self.parts.append(part)

    def done(self) -> tuple[Part, ...]:
        self._flush()
        return tuple(self.parts)

    def _flush(self) -> None:
        if self.literal:
            self.parts.append(Literal("".join(self.literal), self.quoted))
            self.literal.clear()


class Lexer:
    """Tokens as sh's lexer makes them: words (with their quoting kept) and operators."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.line = 1

    def tokens(self) -> list[Token]:
        out: list[Token] = []
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
                out.append(Op(operator, self.line))
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

    def _word(self) -> Word:
        line = self.line
        out = _Parts(quoted=False)
        while self.i < len(self.text):
            char = self.text[self.i]
            if char in _METACHARS:
                break
            if char == "\\":
                if self.text.startswith("\\\n", self.i):
                    self.i += 2
                    self.line += 1
                    continue
                if self.i + 1 >= len(self.text):
                    self.i += 1
                    break
                out.add(Literal(self.text[self.i + 1], True))
                self.i += 2
            elif char == "'":
                end = self.text.find("'", self.i + 1)
                if end < 0:
                    raise ShellSyntaxError("a ' quote is never closed", self.line)
                body = self.text[self.i + 1 : end]
                out.add(Literal(body, True))
                self.line += body.count("\n")
                self.i = end + 1
            elif char == '"':
                for part in self._double_quoted():
                    out.add(part)
            elif char == "$":
                out.add(self._dollar(quoted=False))
            elif char == "`":
                out.add(self._backquoted(quoted=False))
            elif char == "~" and out.empty:
                out.add(Opaque("tilde expansion", False))
                self.i += 1
            else:
                out.char(char)
                self.i += 1
        return Word(out.done(), line)

    def _double_quoted(self) -> list[Part]:
        start = self.line
        self.i += 1
        out = _Parts(quoted=True)
        while self.i < len(self.text):
            char = self.text[self.i]
            if char == '"':
                self.i += 1
                return list(out.done()) or [Literal("", True)]
            if char == "\\" and self.i + 1 < len(self.text) and self.text[self.i + 1] in '$`"\\\n':
                if self.text[self.i + 1] == "\n":
                    self.line += 1
                else:
                    out.char(self.text[self.i + 1])
                self.i += 2
            elif char == "$":
                out.add(self._dollar(quoted=True))
            elif char == "`":
                out.add(self._backquoted(quoted=True))
            else:
                if char == "\n":
                    self.line += 1
                out.char(char)
                self.i += 1
        raise ShellSyntaxError('a " quote is never closed', start)

    def _backquoted(self, quoted: bool) -> Opaque:
        end = self.i + 1
        while end < len(self.text) and self.text[end] != "`":
            end += 2 if self.text[end] == "\\" else 1
        if end >= len(self.text):
            raise ShellSyntaxError("a ` command substitution is never closed", self.line)
        self.line += self.text.count("\n", self.i, end)
        self.i = end + 1
        return Opaque("a command substitution (`...`)", quoted)

    def _dollar(self, quoted: bool) -> Part:
        text, i = self.text, self.i + 1
        if text.startswith("((", i):
            start = i
            self._skip_parens(i)
            body = text[start : self.i]
            # `=`, `+=`, `++`, ... assign; `==`, `!=`, `<=`, `>=` compare.
            assigns = re.search(r"(?<![=!<>])=(?!=)|\+\+|--", body) is not None
            return Opaque("arithmetic expansion $((...))", quoted, effects=assigns)
        if text.startswith("(", i):
            self._skip_parens(i)
            return Opaque("a command substitution $(...)", quoted)
        if text.startswith("{", i):
            return self._braced(quoted)
        name = NAME.match(text, i)
        if name:
            self.i = name.end()
            return Param(name.group(), None, (), quoted)
        if i < len(text) and text[i] in "0123456789@*#?$!-":
            self.i = i + 1
            return Opaque(f"the special parameter ${text[i]}", quoted)
        if i < len(text) and text[i] in "'\"" and not quoted:
            # $'...' and $"..." mean different things to dash and bash.
            self.i = i
            return Opaque(f"${text[i]}...{text[i]} quoting", quoted)
        self.i = i
        return Literal("$", quoted)

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
        raise ShellSyntaxError("a $( is never closed", start)

    def _braced(self, quoted: bool) -> Part:
        text = self.text
        i = self.i + 2
        end = self._closing_brace(i, quoted)
        body = text[i:end]
        line = self.line
        self.line += body.count("\n")
        self.i = end + 1
        if (length := re.fullmatch(r"#([A-Za-z_][A-Za-z0-9_]*)", body)) is not None:
            return Param(length.group(1), LENGTH, (), quoted)
        name = NAME.match(body)
        if not name:
            return Opaque(f"the expansion ${{{body}}}", quoted)
        after = body[name.end() :]
        if after == "":
            return Param(name.group(), None, (), quoted)
        op = next((o for o in OPERATORS if after.startswith(o)), None)
        if op is None:
            # `${X/a/b}`, `${X:1}`: bash's, and dash stops with "Bad substitution".
            return Opaque(
                f'the expansion ${{{body}}}, bash\'s (dash stops: "Bad substitution")',
                quoted,
                stops=True,
            )
        inner = Lexer(after[len(op) :])
        inner.line = line
        word = inner.inner_word(quoted, pattern=op in PATTERN_OPERATORS)
        return Param(name.group(), op, word, quoted)

    def inner_word(self, outer_quoted: bool, pattern: bool) -> tuple[Part, ...]:
        """The word inside `${NAME<op>word}`, read as dash reads it: blanks are part of it;
        inside double quotes a backslash escapes only `$`, backquote, `"` and `\\`, and a
        single quote is an ordinary character, except in a pattern, where it quotes."""
        out = _Parts(quoted=False)
        if not outer_quoted and self.text.startswith("~"):
            out.add(Opaque("tilde expansion", False))
            self.i += 1
        while self.i < len(self.text):
            char = self.text[self.i]
            if char == "\\":
                following = self.text[self.i + 1 : self.i + 2]
                if following == "\n":
                    self.line += 1
                elif following and (not outer_quoted or following in '$`"\\'):
                    out.add(Literal(following, True))
                else:
                    out.char(char + following)
                self.i += 2
            elif char == "'" and (pattern or not outer_quoted):
                end = self.text.find("'", self.i + 1)
                if end < 0:
                    raise ShellSyntaxError("a ' quote is never closed", self.line)
                out.add(Literal(self.text[self.i + 1 : end], True))
                self.line += self.text.count("\n", self.i, end)
                self.i = end + 1
            elif char == '"':
                for part in self._double_quoted():
                    out.add(part)
            elif char == "$":
                out.add(self._dollar(quoted=False))
            elif char == "`":
                out.add(self._backquoted(quoted=False))
            else:
                if char == "\n":
                    self.line += 1
                out.char(char)
                self.i += 1
        return out.done()

    def _closing_brace(self, i: int, quoted: bool) -> int:
        """The `}` that closes `${`: not one escaped, quoted, or closing a `${` inside."""
        depth = 1
        while i < len(self.text):
            char = self.text[i]
            if char == "\\":
                i += 2
                continue
            if char == "'" and not quoted:
                end = self.text.find("'", i + 1)
                i = len(self.text) if end < 0 else end + 1
                continue
            if char == '"':
                i += 1
                while i < len(self.text) and self.text[i] != '"':
                    i += 2 if self.text[i] == "\\" else 1
                i += 1
                continue
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return i
            i += 1
        raise ShellSyntaxError("a ${ is never closed", self.line)


# --- commands ----------------------------------------------------------------------------------


class Simple(NamedTuple):
    words: tuple[Word, ...]
    line: int


class Unsupported(NamedTuple):
    reason: str
    line: int


class If(NamedTuple):
    condition: tuple[Command, ...]
    then: tuple[Command, ...]
    otherwise: tuple[Command, ...]  # `elif` is an `if` here


class CaseItem(NamedTuple):
    patterns: tuple[Word, ...]
    body: tuple[Command, ...]


class Case(NamedTuple):
    word: Word
    items: tuple[CaseItem, ...]
    line: int


class AndOr(NamedTuple):
    first: Command
    rest: tuple[tuple[str, Command], ...]  # ("&&" | "||", command)


Command = Simple | Unsupported | If | Case | AndOr
_RESERVED = {"then", "elif", "else", "fi", "do", "done", "esac", "}", "in"}
_UNSUPPORTED_RESERVED = {"while", "until", "for", "{", "!", "function", "select", "[["}
_SEPARATORS = {";", "\n"}


class Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0

    def program(self) -> list[Command]:
        commands = self._list(stop=set())
        if self.i < len(self.tokens):
            token = self.tokens[self.i]
            raise ShellSyntaxError(f"unexpected {_show(token)}", token.line)
        return commands

    def _peek(self) -> Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _peek_word(self) -> str | None:
        token = self._peek()
        return token.plain if isinstance(token, Word) else None

    def _skip_separators(self) -> None:
        while isinstance(self._peek(), Op) and self._peek().text in _SEPARATORS:  # type: ignore[union-attr]
            self.i += 1

    def _list(self, stop: set[str]) -> list[Command]:
        """Commands up to a reserved word in `stop` (left for the caller) or the end."""
        commands: list[Command] = []
        while True:
            self._skip_separators()
            token = self._peek()
            if token is None:
                return commands
            if isinstance(token, Op) and token.text in {";;", ";&", ")"}:
                return commands
            if self._peek_word() in stop:
                return commands
            commands.append(self._and_or())

    def _and_or(self) -> Command:
        first = self._command()
        rest: list[tuple[str, Command]] = []
        while isinstance(self._peek(), Op) and self._peek().text in {"&&", "||"}:  # type: ignore[union-attr]
            op = self.tokens[self.i].text  # type: ignore[union-attr]
            self.i += 1
            while isinstance(self._peek(), Op) and self._peek().text == "\n":  # type: ignore[union-attr]
                self.i += 1
            rest.append((op, self._command()))
        return AndOr(first, tuple(rest)) if rest else first

    def _command(self) -> Command:
        token = self._peek()
        assert token is not None
        word = self._peek_word()
        if word == "if":
            return self._if()
        if word == "case":
            return self._case()
        if word in _RESERVED:
            raise ShellSyntaxError(f"unexpected {word!r}", token.line)
        if word == "[[":
            # bash's; dash has no such command, so it fails (127) and update-grub says so.
            self._skip_compound("[[", token.line)
            return Unsupported("`[[` (bash's test, which dash does not have)", token.line)
        if word in _UNSUPPORTED_RESERVED:
            return self._skip_compound(word or "", token.line)
        if isinstance(token, Op) and token.text == "(":
            return self._skip_group(token.line, "a subshell ( ... )")
        words: list[Word] = []
        unsupported: str | None = None
        while (token := self._peek()) is not None:
            if isinstance(token, Op):
                if token.text in _SEPARATORS | {"&&", "||", ";;", ";&", ")"}:
                    break
                if token.text == "(" and words and words[-1].assignment() is not None:
                    # bash's array assignment; dash stops with `Syntax error: "(" unexpected`.
                    raise ShellSyntaxError(
                        'an array assignment, which dash rejects ("(" unexpected)', token.line
                    )
                if token.text == "(":
                    return self._skip_group(token.line, "a function definition")
                unsupported = unsupported or f"the operator {token.text!r}"
                self.i += 1
                continue
            words.append(token)
            self.i += 1
        line = words[0].line if words else self.tokens[self.i - 1].line
        if not words and unsupported is None:
            raise ShellSyntaxError("a command is missing", line)
        if unsupported is not None:
            return Unsupported(unsupported, line)
        return Simple(tuple(words), line)

    def _skip_compound(self, word: str, line: int) -> Command:
        """A loop, a group or another construct not evaluated: skipped to its end."""
        end = {"while": "done", "until": "done", "for": "done", "select": "done", "{": "}"}
        closing = end.get(word)
        depth = 0
        while self.i < len(self.tokens):
            token = self.tokens[self.i]
            if closing is None and isinstance(token, Op) and token.text in _SEPARATORS:
                break
            plain = self._peek_word()
            self.i += 1
            if closing is not None and plain is not None and end.get(plain) == closing:
                depth += 1
            elif closing is not None and plain == closing:
                depth -= 1
                if depth == 0:
                    break
        return Unsupported(f"`{word}`", line)

    def _skip_group(self, line: int, what: str) -> Command:
        depth = 0
        while self.i < len(self.tokens):
            token = self.tokens[self.i]
            self.i += 1
            if isinstance(token, Op) and token.text == "(":
                depth += 1
            elif isinstance(token, Op) and token.text == ")":
                depth -= 1
                if depth == 0:
                    break
        if what == "a function definition":
            self._skip_separators()
            if self._peek_word() == "{":
                self.i += 1
                self._skip_compound_body("}")
        return Unsupported(what, line)

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
            raise ShellSyntaxError(f"expected {word!r}", line)
        self.i += 1

    def _if(self) -> Command:
        line = self.tokens[self.i].line
        self.i += 1  # if / elif
        condition = self._list({"then"})
        self._expect("then")
        then = self._list({"elif", "else", "fi"})
        if not condition or not then:
            raise ShellSyntaxError("an if with an empty condition or body", line)
        otherwise: tuple[Command, ...] = ()
        word = self._peek_word()
        if word == "elif":
            otherwise = (self._if(),)
            return If(tuple(condition), tuple(then), otherwise)
        if word == "else":
            self.i += 1
            otherwise = tuple(self._list({"fi"}))
            if not otherwise:
                raise ShellSyntaxError("an else with an empty body", line)
        self._expect("fi")
        return If(tuple(condition), tuple(then), otherwise)

    def _case(self) -> Command:
        line = self.tokens[self.i].line
        self.i += 1
        token = self._peek()
        if not isinstance(token, Word):
            raise ShellSyntaxError("case without a word", line)
        self.i += 1
        self._skip_separators()
        self._expect("in")
        items: list[CaseItem] = []
        while True:
            self._skip_separators()
            if self._peek_word() == "esac":
                self.i += 1
                return Case(token, tuple(items), line)
            if isinstance(self._peek(), Op) and self._peek().text == "(":  # type: ignore[union-attr]
                self.i += 1
            patterns: list[Word] = []
            while True:
                pattern = self._peek()
                if not isinstance(pattern, Word):
                    raise ShellSyntaxError("a case pattern is missing", line)
                patterns.append(pattern)
                self.i += 1
                op = self._peek()
                if isinstance(op, Op) and op.text == "|":
                    self.i += 1
                    continue
                if isinstance(op, Op) and op.text == ")":
                    self.i += 1
                    break
                raise ShellSyntaxError("a case pattern is not closed by ')'", pattern.line)
            body = self._list({"esac"})
            op = self._peek()
            if isinstance(op, Op) and op.text == ";&":
                body = [*body, Unsupported("a case fall-through ;&", op.line)]
            if isinstance(op, Op) and op.text in {";;", ";&"}:
                self.i += 1
            items.append(CaseItem(tuple(patterns), tuple(body)))


def _show(token: Token) -> str:
    if isinstance(token, Op):
        return "end of line" if token.text == "\n" else repr(token.text)
    return repr(token.plain or "word")


@functools.lru_cache(maxsize=64)
def parse(text: str) -> tuple[Command, ...]:
    """The commands of a file, or ShellSyntaxError where sh would refuse it. Kept by text (the
    commands are frozen): a fleet's hosts share their GRUB files, and each plan reads every
    version of the drop-in it writes."""
    return tuple(Parser(Lexer(text).tokens()).program())
