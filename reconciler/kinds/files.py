"""tune's own boot-time files, as changes of kind `file`: derived from the whole profile (not a
profile section), planned after every knob and applied after them.

```
file:/etc/sysctl.d/90-tune.conf    file:/etc/modules-load.d/tune.conf
file:/etc/modprobe.d/tune.conf     file:/etc/tmpfiles.d/tune.conf
file:/etc/udev/rules.d/90-tune-pci.rules
```
A file with no line to hold is removed (tune owns it entirely).
"""

from __future__ import annotations

from typing import Any

from ..core.changes import Change, Outcome, Phase, Priority
from ..core.errors import HostError
from ..core.files import Files, Request
from ..steps.ops import Step
from ..steps.persist import OWNED, SYSCTL, SYSCTL_DIRS, WHY, contents, later_sysctl_files
from .base import Kind, Meta, file_step


def _lines(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(text.splitlines())


class Persistence(Kind[Any]):
    """Not a profile section: derived from the whole profile, applied after the live knobs."""

    section = ""
    spec_type = None
    kind = "file"
    phase = Phase.RUNTIME
    persistence = True
    whole_file = True

    def request(self, spec: Any) -> Request:
        return Request.of(*(f"{d}/*.conf" for d in SYSCTL_DIRS), edited=OWNED)

    def compare(
        self, spec: Any, files: Files, leaving_out: frozenset[str] = frozenset()
    ) -> Outcome:
        """`leaving_out`: the ids of changes a run skips (`contents`)."""
        outcome = Outcome()
        wanted = contents(spec, files, leaving_out)
        for path in OWNED:
            current, desired = _lines(files.text(path)), _lines(wanted.get(path))
            if current is None and desired is None:
                continue
            meta = Meta(priority=Priority.P1, reason=WHY[path])
            outcome.changes.append(self.change(path, current, desired, meta))
        if SYSCTL in wanted:
            outcome.notes.extend(later_sysctl_files(wanted[SYSCTL], files))
        return outcome

    def step(
        self, spec: Any, change: Change, files: Files, leaving_out: frozenset[str] = frozenset()
    ) -> Step:
        """`leaving_out`: the ids of changes the run skips (`contents`)."""
        path = change.target
        prior = files.read(path)
        desired = contents(spec, files, leaving_out).get(path)
        data = None if desired is None else desired.encode()
        if path in files.errors:
            raise HostError(f"{change.id}: {path} cannot be read ({files.errors[path]}).")
        return file_step(change, path, prior, data, ())


KIND = Persistence()
