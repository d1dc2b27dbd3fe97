"""One meaning of "change" in every command (#33): a change is a profile entry that differs (a
governor on 128 CPUs is one), a write one knob written (that governor is 128). Each command is
run on a host where the two counts cannot be confused, and no text or JSON field may call a count
of writes "changes".

The example host's plan has 29 changes of 30 profile entries and 368 writes: a text that says
"N changes" with N above 30, or a JSON count named `changes` above 30, counts writes. The lab's
small hosts have 4 entries and 12 writes each (a governor on 8 CPUs): 8 and 24 for two."""

from __future__ import annotations

import io
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import BLACKWELL, UNTUNED, copy_host, run_tune, write
from ssh_fixture import StartLab, sshd_available
from test_reboot_phase import reboot
from test_ssh_apply import small, small_profile

# The Blackwell profile's entries on the example host: 29 that differ, 1 in sync.
ENTRIES = 30
SAYS_CHANGES = re.compile(r"(\d+) (?:[\w-]+ )?changes?\b")


def counts_of_changes(text: str) -> Iterator[int]:
    """Every number the text calls changes: "29 changes", "5 boot-configuration changes", and
    the cells of a table's CHANGES column."""
    for match in SAYS_CHANGES.finditer(text):
        yield int(match.group(1))
    lines = text.splitlines()
    for n, line in enumerate(lines):
        header = re.search(r"\bCHANGES\b", line)
        if header is None or line.strip() != line.strip().upper():
            continue
        start, end = header.span()
        for row in lines[n + 1 :]:
            if not row.strip():
                break
            for cell in re.finditer(r"\S+", row):
                if cell.start() < end and cell.end() > start and cell.group().isdigit():
                    yield int(cell.group())


def json_counts_of_changes(data: Any) -> Iterator[int]:
    """Every integer a JSON document names `changes`, wherever it is."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "changes" and isinstance(value, int) and not isinstance(value, bool):
                yield value
            yield from json_counts_of_changes(value)
    elif isinstance(data, list):
        for item in data:
            yield from json_counts_of_changes(item)


class Walk:
    """What the commands said, each text and JSON document kept with the command that said it."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self.texts: list[tuple[str, str]] = []
        self.documents: list[tuple[str, Any]] = []
        self.mismatches: list[str] = []

    def run(self, *args: str | Path, codes: tuple[int, ...] = (0,), asked: bool = False) -> str:
        """Run tune; `asked`: on a terminal that answers no to its question (the question is
        what is read)."""
        if asked:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr("sys.stdin", _Terminal("n\n"))
                result = run_tune(*args)
        else:
            result = run_tune(*args)
        said = " ".join(str(a) for a in args)
        assert result.code in codes, f"tune {said}: exit {result.code}\n{result.out}{result.err}"
        if "json" in args:
            self.documents.append((said, json.loads(result.out)))
            self.texts.append((said, result.err))
            return result.out
        self.texts.append((said, result.out + result.err))
        return result.out + result.err

    def expect(self, what: str, got: object, want: object) -> None:
        """A count that must be so (kept, and told with the others at the end)."""
        if got != want:
            self.mismatches.append(f"{what}: {got!r}, not {want!r}")

    def wrong(self) -> list[str]:
        """Each place a count of writes is called changes."""
        found = list(self.mismatches)
        found += [
            f"tune {said}: says {n} changes: "
            + next(line for line in text.splitlines() if str(n) in line)
            for said, text in self.texts
            for n in counts_of_changes(text)
            if n > self.entries
        ]
        found += [
            f"tune {said}: JSON `changes` is {n}"
            for said, document in self.documents
            for n in json_counts_of_changes(document)
            if n > self.entries
        ]
        return found


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_command_on_one_host_calls_its_writes_changes(scratch: Path) -> None:
    walk = Walk(ENTRIES)
    host = copy_host(UNTUNED, scratch / "host")
    root = ("--root", host)
    walk.run("plan", BLACKWELL, *root, codes=(2,))
    plan = walk.run("plan", BLACKWELL, *root, "--format", "json", codes=(2,))
    summary = json.loads(plan)["summary"]
    counts = (summary["changes"], summary["runtime"], summary["reboot"])
    walk.expect("the plan's summary: changes, runtime, reboot", counts, (29, 24, 5))
    walk.expect("the plan's writes", summary["writes"], {"total": 368, "runtime": 363, "reboot": 5})
    walk.run("apply", BLACKWELL, *root, "--runtime-only", asked=True, codes=(7,))
    walk.run("apply", BLACKWELL, *root, "--dry-run")
    walk.run("apply", BLACKWELL, *root, "--dry-run", "--format", "json")
    said = walk.run("apply", BLACKWELL, *root, "--runtime-only", "-y")
    walk.expect("apply says", "Applied 24 changes (363 writes)" in said, True)
    walk.run("check", BLACKWELL, *root)
    walk.run("check", BLACKWELL, *root, "--format", "json")
    # Every CPU's governor put back: one entry drifted, 128 knobs.
    for governor in host.glob("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"):
        shutil.copyfile(UNTUNED / governor.relative_to(host), governor)
    walk.run("check", BLACKWELL, *root, codes=(2,))
    walk.run("status", *root)
    walk.run("status", *root, "--format", "json")
    walk.run("history", *root)
    history = walk.run("history", *root, "--format", "json")
    (row,) = json.loads(history)["runs"]
    walk.expect("history's changes and writes", (row["changes"], row.get("writes")), (24, 363))
    walk.run("report", *root)
    walk.run("report", *root, "--format", "json")
    walk.run("rollback", *root, "--dry-run")
    walk.run("rollback", *root, asked=True, codes=(7,))
    walk.run("rollback", *root, "-y")

    # An apply the kernel stops at its last sysctl: the writes before it are rolled back.
    failing = copy_host(UNTUNED, scratch / "failing")
    write(failing, "/.tune-emulate/refuses/proc/sys/vm/dirty_background_ratio", "22\n")
    said = walk.run("apply", BLACKWELL, "--root", failing, "--runtime-only", "-y", codes=(3,))
    walk.expect("the failed apply says", "rolled back 358 writes" in said, True)

    # Both phases as JSON, then the boot and its verification.
    both = copy_host(UNTUNED, scratch / "both")
    applied = walk.run("apply", BLACKWELL, "--root", both, "-y", "--format", "json")
    document = json.loads(applied)
    walk.expect("apply's changes and writes", (document["changes"], document["writes"]), (29, 368))
    reboot(both)
    walk.run("verify", "--root", both)
    walk.run("history", "--root", both)
    wrong = walk.wrong()
    assert not wrong, "\n".join(wrong)


@pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")
def test_no_fleet_command_calls_its_writes_changes(tmp_path: Path, start_lab: StartLab) -> None:
    profile = small_profile(tmp_path / "p.yaml")
    lab = start_lab({name: small(tmp_path / name, 8) for name in ("h1", "h2")})
    walk = Walk(8)  # 4 entries on each of 2 hosts
    fleet = ("--ssh-config", str(lab.config), "-H", "h1", "-H", "h2", "--no-persist")
    walk.run("plan", profile, *fleet, codes=(2,))
    walk.run("plan", profile, *fleet, "--format", "json", codes=(2,))
    walk.run("check", profile, *fleet, codes=(1, 2))
    walk.run("apply", profile, "--runtime-only", *fleet, asked=True, codes=(7,))
    walk.run("apply", profile, "--runtime-only", *fleet, "--dry-run")
    walk.run("apply", profile, "--runtime-only", *fleet, "--dry-run", "--format", "json")
    said = walk.run("apply", profile, "--runtime-only", *fleet, "-y")
    rows = [line.split()[:4] for line in said.splitlines() if line.startswith("h")][-2:]
    walk.expect(
        "the fleet's apply", rows, [["h1", "applied", "4", "12"], ["h2", "applied", "4", "12"]]
    )
    walk.run("check", profile, *fleet)
    hosts = ("--ssh-config", str(lab.config), "-H", "h1", "-H", "h2")
    walk.run("history", *hosts)
    walk.run("history", *hosts, "--format", "json")
    walk.run("rollback", "--ssh-config", str(lab.config), "-H", "h1", "-y")
    # In waves (journaled as a rollout), as JSON lines, then the rollout as status tells it.
    rolled = run_tune(
        "apply", profile, "--runtime-only", *fleet, "-y", "--serial", "1", "--no-probes",
        "--format", "json",
    )  # fmt: skip
    assert rolled.code == 0, rolled.out + rolled.err
    lines = [json.loads(line) for line in rolled.out.splitlines() if line.strip()]
    walk.documents.append(("apply --serial 1 --format json", lines))
    h1 = next(line for line in lines if line.get("host", {}).get("name") == "h1")
    walk.expect("the rollout's h1", (h1["changes"], h1.get("writes")), (4, 12))
    walk.run("rollout", "status")
    walk.run("rollout", "status", "--format", "json")
    wrong = walk.wrong()
    assert not wrong, "\n".join(wrong)


def test_a_rollout_journaled_by_tune_0_2_counts_its_writes_as_writes() -> None:
    """tune 0.2 journaled a host's writes as `changes`: read again, they are its writes, and its
    changes are not known (null), whether in the first line or in a transition after it."""
    from reconciler.render import rollout as shown
    from reconciler.render.schemas import SCHEMAS
    from reconciler.rollout import journal

    hosts = {name: journal.HostEntry(0) for name in ("h1", "h2")}
    saved = journal.Rollout(
        journal.new_rollout_id(), str(BLACKWELL), "0", {}, [["h1", "h2"]], hosts
    )
    saved.save()
    assert saved.path is not None
    first = json.loads(saved.path.read_text())
    for fields in first["hosts"].values():
        del fields["writes"]
    first["hosts"]["h1"]["changes"] = 363
    transition = {"host": "h2", "set": {"state": journal.DONE, "changes": 12}}
    saved.path.write_text(json.dumps(first) + "\n" + json.dumps(transition) + "\n")
    read = journal.load(saved.rollout_id)
    assert [(e.changes, e.writes) for e in read.hosts.values()] == [(None, 363), (None, 12)]
    for name in read.hosts:
        document = shown.host_document(read, name)
        assert (document["changes"], document["writes"]) == (None, read.hosts[name].writes)
        jsonschema.validate(document, SCHEMAS["rollout"])
    # This tune journals both: read again, they are as written.
    read.update("h1", changes=4, writes=12)
    again = journal.load(saved.rollout_id).hosts["h1"]
    assert (again.changes, again.writes) == (4, 12)
