"""What grubby does on Fedora, RHEL 8+ and their rebuilds, where /usr/sbin/grubby is the bash
script `grubby-bls` (grubby.spec: `install -T -m 0755 %{SOURCE1} .../grubby`), ported from
that script (tests/corpus/grubby/grubby-bls) function by function. tests/test_grubby_oracle.py
runs the script itself on the same files and requires the same bytes.

`grubby --update-kernel=ALL --remove-args=R --args=A` (`update_bls_fragment`) edits, in order:
GRUB_CMDLINE_LINUX in /etc/default/grub (every line that starts with that name, so a
GRUB_CMDLINE_LINUX_DEFAULT line too), kernelopts in the GRUB environment block, the `options`
of every BLS entry that does not use `$kernelopts`, and /etc/kernel/cmdline, which it first
creates from the last entry's options (in `sort -Vr` order) where it is missing; each line
through `update_args`:

- each word of R without `=` drops every `NAME` and `NAME=...` word, and each with `=` drops
  the first word equal to it; each word of A drops every word of its name, and then A is
  appended, so a parameter that occurred several times ends up once, last;
- the names are sed regular expressions anchored at a blank, so `iommu` does not touch
  `amd_iommu=on`, but a `.` in a name matches any character;
- a match takes the blank after a bare word with it, so of two adjacent bare words of one
  name (`quiet quiet`) one pass drops only the first;
- every line goes through an unquoted `echo`: blanks collapse and a word with `*`, `?` or `[`
  is a pathname pattern.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cmp_to_key

from .shell_values import Script, Unknown, evaluate

ENTRIES = "/boot/loader/entries"
GRUBENV = "/boot/grub2/grubenv"
GRUBENV_HEADER = "# GRUB Environment Block\n"
GRUBENV_SIZE = 1024
# The paths the script hard-codes (`grub_etc_default`, and /etc/kernel/cmdline since
# grubby 8.40-64, Fedora 37, where kernel-install takes a new kernel's options from).
ETC_DEFAULT_GRUB = "/etc/default/grub"
KERNEL_CMDLINE = "/etc/kernel/cmdline"
KERNELOPTS = "$kernelopts"


class GrubbyCannot(ValueError):
    """What grubby would do cannot be known exactly (or would damage the line): the message
    says which file, which line and why."""


def words(text: str) -> list[str]:
    """An unquoted expansion's words: bash splits on its default IFS (space, tab, newline)."""
    return [w for w in re.split(r"[ \t\n]+", text) if w]


def _echo(text: str, where: str) -> str:
    """`echo $text`: the words joined by one space. A word with a pathname pattern character
    would be expanded against grubby's working directory, and a first word such as `-n` taken
    as echo's option: neither is known here."""
    found = words(text)
    odd = [w for w in found if re.search(r"[*?[]", w)]
    if odd:
        raise GrubbyCannot(
            f"{where}: {odd[0]!r} holds a pathname pattern character, which grubby's unquoted "
            "`echo` expands against its working directory"
        )
    if found and re.fullmatch(r"-[neE]+", found[0]):
        raise GrubbyCannot(
            f"{where}: grubby's `echo` would take the first word {found[0]} as its option"
        )
    return " ".join(found)


_SPACE = r"[ \t\n\r\f\v]"
# Characters that mean the same in a sed ERE and in Python's re; a word with any other is not
# predicted.
_PLAIN = re.compile(r'[A-Za-z0-9_.,:=/+"@%-]+')


def _regex(arg: str, where: str) -> str:
    if not _PLAIN.fullmatch(arg):
        raise GrubbyCannot(f"{where}: grubby would read {arg!r} as a sed regular expression")
    return arg


def update_args(args: str, remove: str, add: str, where: str) -> str:
    """The script's `update_args`: `args` with the words of `remove` and the names of `add`
    dropped, then `add` appended."""
    for arg in words(remove):
        pattern = _regex(arg, where)
        if "=" in arg:
            args = re.sub(rf"(^|{_SPACE}){pattern}({_SPACE}|$)", " ", _echo(args, where), count=1)
        else:
            args = re.sub(
                rf"(^|{_SPACE}){pattern}(({_SPACE}|$)|(=[^ ]*(\$*)))", " ", _echo(args, where)
            )
    added = words(add)
    for arg in added:
        pattern = _regex(arg.partition("=")[0], where)
        args = re.sub(
            rf"(^|{_SPACE}){pattern}(({_SPACE}|$)|(=[^ ]*(\$*)))", " ", _echo(args, where)
        )
    for arg in added:
        args = f"{args} {arg}"
    return _echo(args, where)


def bls_value(text: str, key: str) -> str:
    """`get_bls_value`: every `key` line's value (grep's `[ \\t]` is a blank, a backslash or a
    `t`), joined by line breaks as the command substitution leaves them."""
    lines = text.split("\n")
    found = [
        re.sub(rf"^{key}[ \\t]*", "", line) for line in lines if re.match(rf"{key}[ \\t]", line)
    ]
    return "\n".join(found).rstrip("\n")


def _replacement(value: str, where: str) -> str:
    """A value as sed's `s///` replacement writes it: `&` and `\\` would be read, not copied."""
    if "&" in value or "\\" in value:
        raise GrubbyCannot(
            f"{where}: {value!r} holds `&` or `\\`, which grubby's sed would rewrite"
        )
    return value


def set_bls_value(text: str, key: str, value: str, where: str) -> str:
    """`set_bls_value`: every line that starts with `key` becomes `key VALUE` (sed -i)."""
    value = _replacement(_echo(value, where), where)
    lines = text.split("\n")
    return "\n".join(f"{key} {value}" if line.startswith(key) else line for line in lines)


def _filevercmp_order(text: str, at: int) -> int:
    if at == len(text):
        return -1
    char = text[at]
    if char.isascii() and char.isdigit():
        return 0
    if char.isascii() and char.isalpha():
        return ord(char)
    if char == "~":
        return -2
    return ord(char) + 256


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            left, right = _filevercmp_order(a, i), _filevercmp_order(b, j)
            if left != right:
                return left - right
            i, j = i + 1, j + 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        first = 0
        while i < len(a) and j < len(b) and a[i].isdigit() and b[j].isdigit():
            first = first or ord(a[i]) - ord(b[j])
            i, j = i + 1, j + 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first:
            return first
    return 0


_SUFFIX = re.compile(r"(\.[A-Za-z~][A-Za-z0-9~]*)*$")


def filevercmp(a: str, b: str) -> int:
    """GNU `sort -V`'s comparison (gnulib filevercmp): version parts compared as numbers, a
    trailing `.suffix` chain only where the rest ties."""
    if not a or not b:
        return (not b) - (not a)
    if (a[0] == "." or b[0] == ".") and a[0] != b[0]:
        return -1 if a[0] == "." else 1
    cut_a = _SUFFIX.search(a, 1)
    cut_b = _SUFFIX.search(b, 1)
    stem_a = a[: cut_a.start()] if cut_a else a
    stem_b = b[: cut_b.start()] if cut_b else b
    result = _verrevcmp(stem_a, stem_b)
    if result or (stem_a == a and stem_b == b):
        return result
    return _verrevcmp(a, b)


@dataclass(frozen=True)
class BlsEntry:
    """One BLS entry as the script loads it (`get_bls_values`)."""

    path: str
    id: str  # the file name without `.conf`
    title: str
    options: str  # every `options` line's value

    @property
    def uses_kernelopts(self) -> bool:
        """`has_kernelopts`: a word of the options is `$kernelopts`; `--update-kernel=ALL`
        then edits kernelopts in the environment block, not the entry."""
        return KERNELOPTS in words(self.options)


def _sort_vr(a: str, b: str) -> int:
    """`sort -Vr`'s comparison: filevercmp reversed, ties broken by the bytes, reversed too."""
    diff = filevercmp(a, b)
    if diff == 0:
        left, right = a.encode(), b.encode()
        diff = (left > right) - (left < right)
    return -diff


def entries(texts: Mapping[str, str]) -> list[BlsEntry]:
    """The entries of `ENTRIES` among `texts`, in the script's order (index 0 first)."""
    found = {
        path.rsplit("/", 1)[1].removesuffix(".conf"): (path, text)
        for path, text in texts.items()
        if path.startswith(ENTRIES + "/")
        and path.endswith(".conf")
        and "/" not in path[len(ENTRIES) + 1 :]
    }
    ordered = sorted(found, key=cmp_to_key(_sort_vr))
    return [
        BlsEntry(found[n][0], n, bls_value(found[n][1], "title"), bls_value(found[n][1], "options"))
        for n in ordered
    ]


def grubenv(text: str) -> dict[str, str]:
    """The variables of a GRUB environment block: `name=value` lines after the header, padded
    with `#` to its size. grub-editenv puts a backslash before a backslash or a newline in a
    value (lib/envblk.c), and a line starting with `#` is padding."""
    found: dict[str, str] = {}
    body = text.removeprefix(GRUBENV_HEADER)
    i = 0
    while i < len(body):
        end = i
        while end < len(body) and body[end] != "\n":
            end += 2 if body[end] == "\\" else 1
        line = body[i:end]
        i = end + 1
        if line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        found[name] = re.sub(r"\\(.)", r"\1", value, flags=re.DOTALL)
    return found


_ESCAPED = re.compile(r"([\\\n])")


def grubenv_set(text: str, name: str, value: str) -> str:
    """The block after `grub2-editenv FILE set NAME=VALUE` (grub_envblk_set): each variable in
    its place (a new one last), escaped, padded with `#` to the block's size. Its free space
    is the `#` run that ends the block after a line break: where the value needs more,
    grub2-editenv fails ("environment block too small"), grubby goes on, and the block stays
    as it was."""
    stripped = text.rstrip("#")
    free = len(text.encode()) - len(stripped.encode())
    env = grubenv(text)
    new = len(_ESCAPED.sub(r"\\\1", value).encode())
    old = env.get(name)
    grow = (
        new - len(_ESCAPED.sub(r"\\\1", old).encode()) if old is not None else len(name) + new + 2
    )
    if not stripped.endswith("\n") or grow > free or old == value:
        return text
    if "\n#" in stripped:
        raise GrubbyCannot(f"{GRUBENV}: a `#` line amid its variables, which grub2-editenv moves")
    env[name] = value
    body = GRUBENV_HEADER + "".join(
        key + "=" + _ESCAPED.sub(r"\\\1", item) + "\n" for key, item in env.items()
    )
    return body + "#" * max(0, len(text.encode()) - len(body.encode()))


def _listed(env_text: str | None, name: str) -> str:
    """`grub2-editenv ENV list | grep NAME | sed -e "s/NAME=//"`: every variable line that
    holds NAME anywhere, its first `NAME=` cut."""
    if env_text is None:
        return ""
    lines = [f"{k}={v}" for k, v in grubenv(env_text).items()]
    return "\n".join(line.replace(f"{name}=", "", 1) for line in lines if name in line).rstrip("\n")


@dataclass(frozen=True)
class GrubbyFiles:
    """The files `grubby --update-kernel=ALL --args/--remove-args` reads and writes, by path
    (None: the file does not exist); `kernel_dir`: whether /etc/kernel exists, without which
    the script cannot create /etc/kernel/cmdline."""

    files: Mapping[str, str | None]
    kernel_dir: bool = True

    def text(self, path: str) -> str | None:
        return self.files.get(path)

    @property
    def entries(self) -> list[BlsEntry]:
        return entries({p: t for p, t in self.files.items() if t is not None})

    def default(self) -> BlsEntry | None:
        """The entry GRUB boots (None: there is none). grubby's `get_default_index` takes
        saved_entry in the environment block as an index, or as an entry's id or title (a bash
        pattern), and none set as index 0, the newest version; where saved_entry names no
        entry, grubby names none (`--default-index` prints nothing) and GRUB boots the first
        (grub-core/normal/menu.c: a default it cannot find is entry 0)."""
        found = self.entries
        env = self.text(GRUBENV) or ""
        saved = "\n".join(
            line.removeprefix("saved_entry=")
            for line in env.split("\n")
            if line.startswith("saved_entry=")
        ).rstrip("\n")
        index = -1
        if not saved:
            index = 0
        elif re.fullmatch(r"[0-9]+", saved):
            octal = saved.startswith("0") and re.fullmatch("[0-7]+", saved)
            index = int(saved, 8) if octal else int(saved)
        for i, entry in enumerate(found):
            if i == index:
                return entry
            if fnmatch.fnmatchcase(saved, entry.id) or fnmatch.fnmatchcase(saved, entry.title):
                return entry
        return found[0] if found else None

    def args(self, entry: BlsEntry) -> str:
        """`get_bls_args`: the entry's options with `$kernelopts` replaced from the block."""
        args = entry.options
        for word in words(entry.options):
            if word == KERNELOPTS:
                value = _echo(_listed(self.text(GRUBENV), "kernelopts"), GRUBENV)
                if value:
                    value = _replacement(value, GRUBENV)
                    args = _echo(args, entry.path).replace(KERNELOPTS, value, 1)
        return _echo(args, entry.path)

    def lines(self) -> dict[str, str]:
        """The lines `--update-kernel=ALL` edits, by file: GRUB_CMDLINE_LINUX, kernelopts,
        each entry's options that does not use it, and /etc/kernel/cmdline's first line."""
        found: dict[str, str] = {}
        grub = self.text(ETC_DEFAULT_GRUB)
        linux = _cmdline_linux(grub) if grub is not None else ""
        if linux:  # grubby leaves an empty one alone
            found[ETC_DEFAULT_GRUB] = linux
        kernelopts = _listed(self.text(GRUBENV), "kernelopts")
        if kernelopts:
            found[GRUBENV] = kernelopts
        for entry in self.entries:
            if not entry.uses_kernelopts:
                found[entry.path] = entry.options
        cmdline = self.text(KERNEL_CMDLINE)
        if cmdline is not None:
            found[KERNEL_CMDLINE] = cmdline.partition("\n")[0]
        return found


def _cmdline_linux(text: str) -> str:
    """`(source /etc/default/grub; echo ${GRUB_CMDLINE_LINUX})`."""
    value = evaluate([Script(ETC_DEFAULT_GRUB, text)]).get("GRUB_CMDLINE_LINUX")
    if isinstance(value, Unknown):
        raise GrubbyCannot(
            f"{ETC_DEFAULT_GRUB}: GRUB_CMDLINE_LINUX cannot be known ({value}), and grubby "
            "rewrites it"
        )
    return _echo(value or "", ETC_DEFAULT_GRUB)


def _read_line(text: str) -> str:
    """`read old_args < FILE`: the first line, outer blanks off (a backslash would escape)."""
    line = text.partition("\n")[0]
    if "\\" in line:
        raise GrubbyCannot(f"{KERNEL_CMDLINE}: {line!r} holds a backslash, which `read` removes")
    return line.strip(" \t")


def update_all(boot: GrubbyFiles, remove: str, add: str) -> GrubbyFiles:
    """The files after `grubby --update-kernel=ALL --remove-args=REMOVE --args=ADD` on a
    grub2 host (`update_bls_fragment`), every other byte kept."""
    if not remove and not add:
        return boot
    out = dict(boot.files)
    grub = out.get(ETC_DEFAULT_GRUB)
    if grub is not None:
        old = _cmdline_linux(grub)
        if old:
            opts = _replacement(update_args(old, remove, add, ETC_DEFAULT_GRUB), ETC_DEFAULT_GRUB)
            out[ETC_DEFAULT_GRUB] = re.sub(
                r"^GRUB_CMDLINE_LINUX.*", lambda _: f'GRUB_CMDLINE_LINUX="{opts}"', grub, flags=re.M
            )
    env = out.get(GRUBENV)
    old = _listed(env, "kernelopts")
    if env is not None and old:
        out[GRUBENV] = grubenv_set(env, "kernelopts", update_args(old, remove, add, GRUBENV))
    before = replace(boot, files=dict(out))
    for entry in boot.entries:
        if entry.uses_kernelopts:
            continue
        new = update_args(before.args(entry), remove, add, entry.path)
        out[entry.path] = set_bls_value(out[entry.path] or "", "options", new, entry.path)
    cmdline = out.get(KERNEL_CMDLINE)
    if cmdline is None and boot.kernel_dir:
        # "most of the time we'll just want the most recent one": index -1 is the last of
        # `sort -Vr`, the oldest (often the rescue entry), read with the new kernelopts.
        found = boot.entries
        cmdline = (before.args(found[-1]) if found else "") + "\n"
    if cmdline is not None:
        out[KERNEL_CMDLINE] = update_args(_read_line(cmdline), remove, add, KERNEL_CMDLINE) + "\n"
    return replace(boot, files=out)
