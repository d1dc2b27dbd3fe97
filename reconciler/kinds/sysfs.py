"""Arbitrary sysfs attributes, by path; globs apply the value to every match.

```yaml
sysfs:
  /sys/kernel/mm/transparent_hugepage/enabled: madvise
  /sys/block/nvme*/queue/scheduler: none
  /sys/devices/system/cpu/cpufreq/boost: {value: "0", may_be_absent: true}
```
Choice files (`always [madvise] never`) compare by the bracketed, selected option.

A path whose directory is not there (a device this host lacks) is skipped with a note. A file
missing from a directory that is there is taken for a misspelling: the plan names the closest
file there ("did you mean"), and apply refuses it, unless the entry says `may_be_absent: true`
(a file a driver or CPU model has and another lacks, as cpufreq's `boost`): then it is skipped.
A path skipped is never written into tmpfiles.d either.
"""

from __future__ import annotations

import difflib
import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core.changes import Change, Note, Outcome, Phase
from ..core.files import Files, Request
from ..core.paths import is_glob
from ..facts import services
from ..steps.ops import Read, Step
from ..steps.persist import Persisted, tmpfiles_write
from .base import (
    Entry,
    KernelValue,
    Kind,
    attribute_step,
    entry,
    host_path,
    missing_note,
    normalize_choice,
)

SysfsPath = host_path(
    r"/sys(/(?!\.\.?(?:/|$))[A-Za-z0-9_.:*?\[\]-]+)+",
    "sysfs path",
    "/sys/kernel/mm/transparent_hugepage/enabled",
    tree="/sys",
)


@dataclass(frozen=True, kw_only=True)
class SysfsItem(Entry[str]):
    value: KernelValue  # restated: pydantic does not carry Entry[str]'s argument into a subclass
    may_be_absent: bool = field(
        default=False,
        metadata={
            "description": "the file may be missing from its directory on some hosts (a "
            "driver's or CPU model's own attribute): skip it there with a note, instead of "
            "taking it for a misspelled path, which apply refuses"
        },
    )


SysfsEntry = entry(KernelValue, SysfsItem)
SysfsSpec = dict[SysfsPath, SysfsEntry]  # type: ignore[valid-type]


class Sysfs(Kind[dict[str, SysfsItem]]):
    section = "sysfs"
    spec_type = SysfsSpec
    kind = "sysfs"
    phase = Phase.RUNTIME
    reads = "the path (globs: every match)"
    compared = "`[selected]` choice files by the selected word"
    noun = "paths"

    def request(self, spec: dict[str, SysfsItem]) -> Request:
        # A file's directory, for "did you mean", only when there is no such file.
        near = [(posixpath.dirname(p), p) for p in spec if not is_glob(p)]
        return Request.of(*spec, listings_if_no_file=near) | services.request()

    def compare(self, spec: dict[str, SysfsItem], files: Files) -> Outcome:
        outcome = Outcome()
        daemons = services.managers(files)
        for pattern, item in spec.items():
            outcome.notes.extend(
                Note(d.note(pattern), f"sysfs:{pattern}") for d in daemons if d.sets_path(pattern)
            )
            desired = normalize_choice(str(item.value))
            paths = files.glob(pattern) or (pattern,)
            for path in paths:
                current = normalize_choice(files.value(path))
                # Its directory is there and the file is not: a misspelling, more likely than
                # hardware this host lacks, unless the entry says so. It stays a change, which
                # apply refuses.
                beside = [] if is_glob(pattern) else files.listing(posixpath.dirname(path))
                typo = current is None and bool(beside) and not item.may_be_absent
                missing = current is None and path not in files.errors and not typo
                outcome.changes.append(
                    self.change(
                        path,
                        current,
                        desired,
                        item,
                        setting=pattern,
                        subject=path if is_glob(pattern) else "",
                        fix=f"echo {shlex.quote(str(item.value))} > {pattern}",
                        missing=missing,
                    )
                )
                if current is None:
                    what = "matches nothing" if is_glob(pattern) else "does not exist"
                    if path in files.errors:
                        what = f"cannot be read ({files.errors[path]})"
                    said = f"{path} {what} on this host."
                    if typo and path not in files.errors:
                        said = f"{path} {what} on this host{_did_you_mean(path, beside)} {TYPO}"
                    said = missing_note(said, item) if missing else said
                    outcome.notes.append(Note(said, f"sysfs:{path}"))
        return outcome

    def step(self, spec: dict[str, SysfsItem], change: Change, files: Files) -> Step:
        return attribute_step(change, change.target, files, Read.CHOICE)

    def persist(self, spec: dict[str, SysfsItem], files: Files) -> list[Persisted]:
        # tmpfiles.d `w` lines take globs, as the profile does; a path (or a glob matching
        # nothing) the host lacks is left out by its id.
        return [
            tmpfiles_write(path, str(item.value), f"{self.kind}:{path}")
            for path, item in spec.items()
        ]


TYPO = (
    "Its directory is there, so tune takes the path for a misspelling and apply refuses it "
    "(`may_be_absent: true` on the entry skips a file some hosts lack)."
)


def _did_you_mean(path: str, listed: Sequence[str]) -> str:
    """`; did you mean PATH?` for the file of `path`'s directory closest to it, else `.`."""
    directory = posixpath.dirname(path)
    names = [posixpath.basename(p) for p in listed if posixpath.dirname(p) == directory]
    close = difflib.get_close_matches(posixpath.basename(path), names, n=1, cutoff=0.75)
    return f"; did you mean {directory}/{close[0]}?" if close else "."


KIND = Sysfs()
