"""Arbitrary sysfs attributes, by path; globs apply the value to every match.

```yaml
sysfs:
  /sys/kernel/mm/transparent_hugepage/enabled: madvise
  /sys/block/nvme*/queue/scheduler: none
```
Choice files (`always [madvise] never`) compare by the bracketed, selected option.
"""

from __future__ import annotations

import shlex

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
SysfsEntry = entry(KernelValue)
SysfsSpec = dict[SysfsPath, SysfsEntry]  # type: ignore[valid-type]


class Sysfs(Kind[dict[str, Entry[str]]]):
    section = "sysfs"
    spec_type = SysfsSpec
    kind = "sysfs"
    phase = Phase.RUNTIME
    reads = "the path (globs: every match)"
    compared = "`[selected]` choice files by the selected word"
    noun = "paths"

    def request(self, spec: dict[str, Entry[str]]) -> Request:
        return Request.of(*spec) | services.request()

    def compare(self, spec: dict[str, Entry[str]], files: Files) -> Outcome:
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
                missing = current is None and path not in files.errors
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
                    said = missing_note(said, item) if missing else said
                    outcome.notes.append(Note(said, f"sysfs:{path}"))
        return outcome

    def step(self, spec: dict[str, Entry[str]], change: Change, files: Files) -> Step:
        return attribute_step(change, change.target, files, Read.CHOICE)

    def persist(self, spec: dict[str, Entry[str]], files: Files) -> list[Persisted]:
        # tmpfiles.d `w` lines take globs, as the profile does.
        return [tmpfiles_write(path, str(item.value)) for path, item in spec.items()]


KIND = Sysfs()
