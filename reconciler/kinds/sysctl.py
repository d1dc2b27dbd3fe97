"""Kernel parameters under /proc/sys.

```yaml
sysctl:
  kernel.numa_balancing: {value: 0, priority: P0, reason: "page migrations break GPU locality"}
  vm.swappiness: 10
  net.ipv4.tcp_rmem: "4096 87380 268435456"
```
Keys are named as sysctl.conf names them: dotted, where a `/` stands for a dot inside one
component (`net.ipv4.conf.eth0/100.rp_filter`), or as a path below /proc/sys, where dots are part
of names (`net/ipv4/conf/eth0.100/rp_filter`).
"""

from __future__ import annotations

import difflib
import shlex

from ..core.changes import Change, Note, Outcome, Phase
from ..core.files import Files, Request
from ..facts import services
from ..facts.sysctl import ROOT, key_of, path_of
from ..steps.ops import Read, Step, normalize_words
from ..steps.persist import SYSCTL, Persisted
from .base import (
    Entry,
    KernelValue,
    Kind,
    attribute_step,
    entry,
    missing_note,
    safe,
)

# Dotted (a component never starts with `/`: `kernel.//` would be the path /proc/sys/kernel/..)
# or a path (a component never starts with `.`, so none is `.` or `..`).
SysctlKey = safe(
    r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-][A-Za-z0-9_/-]*)+"
    r"|[A-Za-z0-9_-]+(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)+",
    "sysctl name",
    "kernel.numa_balancing",
)
SysctlEntry = entry(KernelValue)
SysctlSpec = dict[SysctlKey, SysctlEntry]  # type: ignore[valid-type]


class Sysctl(Kind[dict[str, Entry[str]]]):
    section = "sysctl"
    spec_type = SysctlSpec
    kind = "sysctl"
    phase = Phase.RUNTIME
    reads = "`/proc/sys/a/b/c`"
    compared = (
        "whitespace collapsed, integers as the kernel parses them (`0x10` and the quoted `'020'` "
        "are 16; an unquoted `020` is refused as ambiguous, YAML reads 20); a missing key names "
        "the closest existing one"
    )

    def request(self, spec: dict[str, Entry[str]]) -> Request:
        # The names of all sysctls, for "did you mean", only when a key names no file.
        paths = [path_of(k) for k in spec]
        own = Request.of(*paths, listings_if_no_file=[(ROOT, p) for p in paths])
        return own | services.request()

    def compare(self, spec: dict[str, Entry[str]], files: Files) -> Outcome:
        outcome = Outcome()
        daemons = services.managers(files)
        for key, item in spec.items():
            path = path_of(key)
            outcome.notes.extend(
                Note(d.note(key), f"sysctl:{key}") for d in daemons if d.sets_sysctl(key)
            )
            current = normalize_words(files.value(path))
            fix = f"sysctl -w {shlex.quote(f'{key}={item.value}')}"
            # Unreadable is not missing: the key is there, and a write may still be made. A
            # key close to one that exists is a typo more likely than a knob this host lacks:
            # it stays a change, which apply refuses.
            close = None if current is not None else closest(key, files)
            missing = current is None and path not in files.errors and close is None
            desired = normalize_words(str(item.value))
            outcome.changes.append(
                self.change(key, current, desired, item, fix=fix, missing=missing)
            )
            if current is None:
                said = missing_message(key, path, files, close)
                said = missing_note(said, item) if missing else said
                outcome.notes.append(Note(said, about=f"sysctl:{key}"))
        return outcome

    def step(self, spec: dict[str, Entry[str]], change: Change, files: Files) -> Step:
        return attribute_step(change, path_of(change.target), files, Read.WORDS)

    def persist(self, spec: dict[str, Entry[str]], files: Files) -> list[Persisted]:
        # A key the host lacks (`missing`) is left out by its id: systemd-sysctl fails on it.
        return [
            Persisted(SYSCTL, f"{key} = {item.value}", f"{self.kind}:{key}")
            for key, item in spec.items()
        ]


def closest(key: str, files: Files) -> str | None:
    """The existing sysctl name closest to `key`, if one is close."""
    names = [key_of(p) for p in files.listing(ROOT)]
    close = difflib.get_close_matches(key_of(path_of(key)), names, n=1, cutoff=0.75)
    return close[0] if close else None


def missing_message(key: str, path: str, files: Files, close: str | None) -> str:
    if path in files.errors:
        return f"{key} exists but cannot be read: {files.errors[path]}."
    hint = f"; did you mean {close}?" if close else "."
    return f"{key} does not exist on this host (no {path}){hint}"


KIND = Sysctl()
