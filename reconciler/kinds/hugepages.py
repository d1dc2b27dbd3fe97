"""Huge pages reserved per NUMA node, by page size.

```yaml
hugepages:
  2048kB: {node0: 512, node1: 512}
  1048576kB:
    node*: {value: 4, priority: P0, reason: "one 1 GiB page per GPU for the NCCL buffers"}
```
Sizes and nodes are named as the kernel names their directories
(`/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages`), so each entry is
one file and nothing is converted (`2M` or `2MB` would leave MB against MiB to guess); `node*`
is every node. Size comes first because a host uses one or two sizes and sets each on every
node. The kernel may reserve fewer pages than asked when a node lacks free contiguous memory:
the write's read-back then fails the step and the run rolls back, saying how many it got.
Pages asked at boot (the tmpfiles.d line that persists them) find memory least fragmented.
"""

from __future__ import annotations

import re
from typing import Annotated

from ..core.changes import Change, Note, Outcome, Phase
from ..core.files import Files, Request
from ..core.schema import Constrain
from ..facts.numa import NODES
from ..steps.ops import Read, Step, normalize_words
from ..steps.persist import Persisted, tmpfiles_write
from .base import Entry, Kind, attribute_step, entry, missing_note, safe

EVERY = f"{NODES}/node*/hugepages/hugepages-*/nr_hugepages"

PageSize = safe(r"[1-9][0-9]*kB", "huge page size in kB, as the kernel names it", "2048kB")
NodeName = safe(r"node([0-9]+|\*)", "NUMA node", "node0 (or node* for every node)")
# Strict: YAML `true` is not one page.
Pages = Annotated[int, Constrain(strict=True, ge=0)]
PagesEntry = entry(Pages)
HugepagesSpec = dict[PageSize, dict[NodeName, PagesEntry]]  # type: ignore[valid-type]

Spec = dict[str, dict[str, Entry[int]]]
_FILE = re.compile(r"/(node[0-9]+)/hugepages/hugepages-([0-9]+kB)/nr_hugepages$")


def path_of(node: str, size: str) -> str:
    return f"{NODES}/{node}/hugepages/hugepages-{size}/nr_hugepages"


class Hugepages(Kind[Spec]):
    section = "hugepages"
    spec_type = HugepagesSpec
    kind = "hugepages"
    phase = Phase.RUNTIME
    reads = "`/sys/devices/system/node/node*/hugepages/hugepages-*kB/nr_hugepages`"
    compared = (
        "per NUMA node and page size, as a number; a write the kernel fills only in part (too "
        "little free contiguous memory) fails with the count it reserved"
    )
    noun = "nodes"

    def request(self, spec: Spec) -> Request:
        # Every node and size (a few files), so that a missing one can be told apart.
        return Request.of(EVERY)

    def compare(self, spec: Spec, files: Files) -> Outcome:
        outcome = Outcome()
        for size, nodes in spec.items():
            for node, item in nodes.items():
                pattern = path_of(node, size)
                for path in files.glob(pattern) or (pattern,):
                    name = _node_of(path, node)
                    current = normalize_words(files.value(path))
                    # Unreadable is not missing: the node and size are there.
                    missing = current is None and path not in files.errors
                    outcome.changes.append(
                        self.change(
                            f"{name}:{size}",
                            current,
                            str(item.value),
                            item,
                            setting=size,
                            subject=name,
                            fix=f"echo {item.value} > {path}",
                            missing=missing,
                        )
                    )
                    if current is None:
                        note = _missing(name, size, files, path)
                        note = missing_note(note, item) if missing else note
                        outcome.notes.append(Note(note, f"hugepages:{size}"))
        return outcome

    def step(self, spec: Spec, change: Change, files: Files) -> Step:
        return attribute_step(change, path_of(change.subject, change.setting), files, Read.WORDS)

    def persist(self, spec: Spec, files: Files) -> list[Persisted]:
        return [
            tmpfiles_write(path_of(node, size), str(item.value), f"{self.kind}:{node}:{size}")
            for size, nodes in spec.items()
            for node, item in nodes.items()
        ]

    def read_back_words(self, step: Step) -> tuple[str, str]:
        node, _, size = step.target.partition(":")
        return (
            f"{step.id}: asked for {step.expect} huge pages of {size} on {node}, the kernel "
            "reserved ",
            f" ({node} has too little free contiguous memory; free some, or reserve them at boot)",
        )


def _node_of(path: str, written: str) -> str:
    found = _FILE.search(path)
    return found.group(1) if found else written


def _missing(node: str, size: str, files: Files, path: str) -> str:
    """Why a node's count of `size` pages cannot be read: no such node, no such size there,
    or the file is there and cannot be read."""
    if path in files.errors:
        return f"{path} cannot be read ({files.errors[path]})."
    found = [m.groups() for m in map(_FILE.search, files.glob(EVERY)) if m]
    nodes = sorted({n for n, _ in found}, key=lambda n: int(n[4:]))
    sizes = sorted({s for n, s in found if n == node}, key=lambda s: int(s[:-2]))
    if node == "node*":
        return f"no NUMA node offers {size} huge pages on this host."
    if node not in nodes:
        known = ", ".join(nodes) or "none"
        return f"{node} does not exist on this host (NUMA nodes: {known})."
    return f"{node} offers no {size} huge pages on this host (it offers {', '.join(sizes)})."


KIND = Hugepages()
