"""The JSON carries everything the text shows (Terraform's plan JSON is the model: a consumer
never needs the text). Each view is rebuilt here from the JSON documents alone, by a consumer
that knows only tune's words and layout, never its plan model or registry, and compared with
the real view, byte for byte: a fact the text shows that the JSON lacks makes a rebuild fail.
The views are the plan's text and Markdown (bundled profiles on the example hosts, and plans
made to reach every branch) and `tune check`'s text (drift injected into the tuned host)."""

from __future__ import annotations

import difflib
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from applied_state import write_applied
from conftest import BLACKWELL, PROFILES, TUNED, UNTUNED, profile, run_tune, write

from reconciler.core.changes import (
    Change,
    CheckResult,
    HostFacts,
    Note,
    Pending,
    Phase,
    Plan,
    Priority,
)
from reconciler.core.printable import printable
from reconciler.render import RENDERERS, md
from reconciler.render.schemas import SCHEMAS

Doc = dict[str, Any]

PHASES = ("runtime", "reboot")
PRIORITIES = ("P0", "P1", "P2")
# The text's layout: a list longer than this shows as the lines it adds and removes.
LONG_LIST = 4


def escaped(value: Any, key: str = "") -> Any:
    """A document as a terminal may show it: each string made printable (a host's ESC as
    `\\x1b`), but for `label` and `shown`, which the JSON gives as shown already."""
    if key in ("label", "shown"):
        return value
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [escaped(item) for item in value]
    if isinstance(value, dict):
        return {k: escaped(v, k) for k, v in value.items()}
    return value


def folded(changes: list[Doc]) -> list[list[Doc]]:
    """Changes in lines: those of one `label` together, where the first of them is."""
    lines: dict[str, list[Doc]] = {}
    for change in changes:
        lines.setdefault(change["label"], []).append(change)
    return list(lines.values())


def pending_counts(pending: list[Doc]) -> str:
    restarts = sum("restart" in p for p in pending)
    said = f"{len(pending) - restarts} pending reboot"
    return said + (f", {restarts} pending restart" if restarts else "")


def size(value: list[str] | str | None) -> str:
    return "(absent)" if value is None else f"{len(value)} lines"


def diff(change: Doc) -> list[str]:
    """A whole file's change as `diff -u` shows it; `target` is the file's path."""
    before, after, path = change["current"], change["desired"], change["target"]
    return list(
        difflib.unified_diff(
            before or [],
            after or [],
            fromfile="/dev/null" if before is None else f"a{path}",
            tofile="/dev/null" if after is None else f"b{path}",
            lineterm="",
        )
    )


def change_lines(change: Doc) -> list[str]:
    """The text plan's line of a folded change, and the lines under it."""
    lists = [v for v in (change["current"], change["desired"]) if isinstance(v, list)]
    long = change["whole_file"] or max(map(len, lists), default=0) > LONG_LIST
    if long:
        added, removed = change["lines"]["added"], change["lines"]["removed"]
        arrow = (
            f"{size(change['current'])} -> {size(change['desired'])} "
            f"(+{len(added)} -{len(removed)})"
        )
    else:
        arrow = f"{change['shown']['current']} -> {change['shown']['desired']}"
    out = [f"    ~ {change['label']}: {arrow}"]
    if change["whole_file"]:
        out += [f"        {line}" for line in diff(change)]
    elif long:
        out += [f"        + {line}" for line in added] + [f"        - {line}" for line in removed]
    if change["reason"]:
        out.append(f"        {change['reason']}")
    return out


def plan_text(doc: Doc) -> str:
    doc = escaped(doc)
    host = doc["host"]
    out = [
        f"tune plan: {doc['profile']} on {host['name']} "
        f"({host['source']}, kernel {host['kernel'] or 'unknown'})",
        "",
    ]
    for phase in PHASES:
        changes = [c for c in doc["changes"] if c["phase"] == phase]
        if not changes:
            continue
        out.append(f"{phase.capitalize()} phase ({changes[0]['how']})")
        for priority in PRIORITIES:
            lines = folded([c for c in changes if c["priority"] == priority])
            if lines:
                out.append(f"  {priority}")
            for line in lines:
                out += change_lines(line[0])
        out.append("")
    pending = doc["pending"]
    if pending:
        if all("restart" in p for p in pending):
            out.append("Pending restart (configured; a running service keeps its old limits)")
        else:
            out.append("Pending reboot (configured for the next boot)")
        out += [
            f"    {p['id']}: running {p['shown']['running']}, {p['until']} "
            f"{p['shown']['configured']}"
            for p in pending
        ]
        out.append("")
    if doc["checks"]:
        out.append("Checks (reported, never changed by tune)")
        for c in doc["checks"]:
            line = f"    {'ok  ' if c['ok'] else 'FAIL'} {c['id']}: {c['observed'] or '(absent)'}"
            line += f" (want {c['expected']})" + ("" if c["ok"] else f"; {c['remedy']}")
            out.append(line)
        out.append("")
    if doc["notes"]:
        out += ["Notes", *(f"    - {n['message']}" for n in doc["notes"]), ""]
    summary, entries = doc["summary"], doc["summary"]["entries"]
    if doc["status"] == "in-sync":
        head = "In sync: nothing to change"
    else:
        changed = summary["changes"]  # profile entries: the runtime ones and the reboot ones
        assert changed == summary["runtime"] + summary["reboot"] == entries["changes"]
        total = summary["writes"]["total"]
        writes = f"; {total} writes" if total != changed else ""
        head = (
            f"Plan: {changed} to change ({summary['runtime']} runtime, "
            f"{summary['reboot']} reboot{writes})"
        )
    passed = summary["checks"] - summary["failed_checks"]
    out.append(
        f"{head}, {entries['in_sync']} in sync; {passed} of {summary['checks']} checks pass; "
        f"{pending_counts(pending)}."
    )
    return "\n".join(out) + "\n"


def entry_of(change: Doc) -> tuple[str, ...]:
    """The profile entry a change comes from: its kind and setting where it is one of a CPU
    or device (`subject`), else the knob itself."""
    return (change["kind"], change["setting"]) if change["subject"] else (change["id"],)


def plan_markdown(doc: Doc) -> str:
    """The Markdown report; `md` escapes host text for Markdown, as any consumer must."""
    doc = escaped(doc)
    host, changes, pending = doc["host"], doc["changes"], doc["pending"]
    counts = ", ".join(
        f"{p}: {n}"
        for p in PRIORITIES
        if (n := len({entry_of(c) for c in changes if c["priority"] == p}))
    )
    status = "in sync" if doc["status"] == "in-sync" else "not in sync"
    made = f"{doc['summary']['changes']} change" + "s" * (doc["summary"]["changes"] != 1)
    if doc["summary"]["writes"]["total"] != doc["summary"]["changes"]:
        made += f" ({doc['summary']['writes']['total']} writes)"
    summary = (
        f"**The host is {status}.** {made} to make"
        + (f" ({counts})" if counts else "")
        + f", {doc['summary']['failed_checks']} failed checks, {pending_counts(pending)}."
    )
    out = [
        f"# Plan: {md.text(host['name'])} against profile {md.code(doc['profile'])}",
        "",
        "| | |",
        "|---|---|",
        f"| Host | {md.text(host['name'])} |",
        f"| Kernel | {md.text(host['kernel'] or 'unknown')} |",
        f"| Observed from | {md.text(host['source'])} |",
        f"| Boot id | {md.text(host['boot_id'] or 'unknown')} |",
        "",
        summary,
        "",
        "## Confirmed good",
        "",
    ]
    good = [
        f"- {md.text(line[0]['label'])}: {md.code(line[0]['shown']['current'])}"
        for line in folded(doc["in_sync_knobs"])
    ]
    good += [
        f"- check {md.text(c['id'].removeprefix('check:'))}: {md.text(c['observed'])} "
        f"(want {md.text(c['expected'])})"
        for c in doc["checks"]
        if c["ok"]
    ]
    out += good or ["Nothing in this profile holds on the host yet."]
    out += ["", "## Actionable", ""]
    if not changes:
        out.append("Nothing: every setting in the profile holds.")
    for priority in PRIORITIES:
        lines = folded([c for c in changes if c["priority"] == priority])
        if lines:
            out += [f"### {priority}", ""]
        for line in lines:
            c = line[0]
            out += [f"#### {md.text(c['label'])}: {arrow(c)}", ""]
            if c["reason"]:
                out.append(f"Why: {md.text(c['reason'])}.".replace("..", "."))
            out.append(f"Takes effect: {c['takes_effect']}.")
            fixes = list(dict.fromkeys(x["fix"] for x in line if x["fix"]))
            if fixes:
                out += ["", *md.fence(fixes, "sh")]
            out.append("")
    reboot = [c for c in changes if c["phase"] == "reboot"]
    boots = [p for p in pending if "restart" not in p]
    if reboot or boots:
        out += ["## Needs a reboot", ""]
        out += [f"- {md.text(line[0]['label'])}: {arrow(line[0])}" for line in folded(reboot)]
        out += pending_items(boots)
    restarts = [p for p in pending if "restart" in p]
    if restarts:
        out += ["## Needs a service restart", "", *pending_items(restarts)]
    failed = [c for c in doc["checks"] if not c["ok"]]
    if failed:
        out += [
            "## Needs BIOS, a kernel or a driver change",
            "",
            "tune reports these and does not change them.",
            "",
        ]
        out += [
            f"- **{md.text(c['id'].removeprefix('check:'))}**: "
            f"observed {md.code(c['observed'] or 'absent')}, expected {md.code(c['expected'])}. "
            f"Remedy: {md.text(c['remedy'])}."
            for c in failed
        ]
        out.append("")
    if doc["notes"]:
        out += ["## Notes", "", *(f"- {md.text(n['message'])}" for n in doc["notes"]), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def arrow(change: Doc) -> str:
    return f"{md.code(change['shown']['current'])} -> {md.code(change['shown']['desired'])}"


def pending_items(pending: list[Doc]) -> list[str]:
    return [
        f"- {md.text(p['id'])}: configured ({md.code(p['shown']['configured'])}), not yet "
        f"running ({md.code(p['shown']['running'])}): {p['action']}"
        for p in pending
    ] + [""]


def check_text(doc: Doc) -> str:
    doc = escaped(doc)
    host, last, drift = doc["host"], doc["last_apply"], doc["drift"]
    out = [
        f"tune check: {doc['profile'] or 'no profile'} on {host['name']} "
        f"({host['source']}, kernel {host['kernel'] or 'unknown'})",
        f"Last apply: {last['finished']} (run {last['run_id']}, phase {last['phase']})"
        if last
        else "Last apply: none in effect on this host",
        "",
    ]
    changed = doc["changed_after_apply"] or []
    written = {c["id"]: c["shown"]["written"] for c in changed}
    # Lines of knobs changed after apply come after the others.
    lines = sorted(folded(drift), key=lambda line: line[0].get("since_apply") == CHANGED)
    body = []
    for line in lines:
        c = line[0]
        text = f"DRIFT {c['label']}: {c['shown']['current']} (want {c['shown']['desired']})"
        text += since(line)
        if c.get("since_apply") == CHANGED:
            text += f"; changed after apply (tune wrote {written[c['id']]})"
        body.append(text)
    drifted = {c["id"] for c in drift}
    body += [
        f"CHANGED {c['kind']} {c['target']}: {c['shown']['current']} "
        f"(tune wrote {c['shown']['written']})" + since([c])
        for c in changed
        if c["id"] not in drifted
    ]
    body += [
        f"FAIL check {c['name']}{' ' + c['subject'] if c['subject'] else ''}: "
        f"{c['observed'] or '(absent)'} (want {c['expected']})" + since([c])
        for c in doc["failed_checks"]
    ]
    body += [
        f"NOT APPLIED {c['label']}: {c['shown']['current']} (want {c['shown']['desired']}; "
        f"{c['how']})"
        for c in (line[0] for line in folded(doc["not_applied"]))
    ]
    body += [
        f"PENDING {p['kind']} {p['target']}: running {p['shown']['running']}, {p['until']} "
        f"{p['shown']['configured']} ({p['action']})"
        for p in doc["pending"]
    ]
    if body:
        out += [*body, ""]
    if doc["notes"]:
        out += ["Notes", *(f"    - {n['message']}" for n in doc["notes"]), ""]
    out.append(check_summary(doc))
    return "\n".join(out) + "\n"


CHANGED = "changed-after-apply"


def since(items: list[Doc]) -> str:
    seen = [i["first_seen"] for i in items if i.get("first_seen")]
    return f" since {min(seen)}" if seen else ""


def check_summary(doc: Doc) -> str:
    counts, entries = doc["summary"], doc["summary"]["entries"]
    if not doc["compared"]:
        return (
            "Not applied: no run of tune is in effect on this host, and no profile is stored "
            "to compare it with; give PROFILE to see what is not applied."
        )

    def said(entry: int, knobs: int, of: tuple[int, int] | None = None) -> str:
        text = f"{entry}{f' of {of[0]}' if of else ''} entries"
        wider = knobs != entry or (of is not None and of[1] != of[0])
        return f"{text} ({knobs}{f' of {of[1]}' if of else ''} knobs)" if wider else text

    checks = counts["checks"]
    passed = f"{checks - counts['failed_checks']} of {checks} checks pass"
    not_applied = counts["not_applied"]
    later = f"{said(entries['not_applied'], not_applied)} not applied; " if not_applied else ""
    changed = doc["changed_after_apply"]
    tail = f"{later}{passed}; {pending_counts(doc['pending'])}"
    tail += f"; {len(changed)} changed after apply." if changed is not None else "."
    if doc["undone"]:
        return f"Not applied: no run of tune is in effect on this host; {tail}"
    if not doc["drift"] and not changed:
        return f"In sync: {said(entries['in_sync'], counts['in_sync'])}; {tail}"
    compared = (entries["compared"], counts["in_sync"] + counts["drift"])
    return f"Drift: {said(entries['drift'], counts['drift'], compared)}; {tail}"


def assert_rebuilt(plan: Plan) -> None:
    doc = json.loads(RENDERERS["json"](plan, False))
    jsonschema.validate(doc, SCHEMAS["plan"])
    assert plan_text(doc) == RENDERERS["text"](plan, False)
    assert plan_markdown(doc) == RENDERERS["markdown"](plan, False)


@pytest.mark.parametrize("host", [UNTUNED, TUNED], ids=["untuned", "tuned"])
@pytest.mark.parametrize("bundled", sorted(PROFILES.glob("*.yaml")), ids=lambda p: p.stem)
@pytest.mark.parametrize("args", [(), ("--no-persist",), ("--reboot-phase",)], ids=str)
def test_the_bundled_plans_rebuild_from_their_json(
    bundled: Path, host: Path, args: tuple[str, ...]
) -> None:
    shown = {
        fmt: run_tune("plan", bundled, "--root", host, "--format", fmt, *args)
        for fmt in ("json", "text", "markdown")
    }
    assert len({r.code for r in shown.values()}) == 1
    doc = json.loads(shown["json"].out)
    jsonschema.validate(doc, SCHEMAS["plan"])
    assert plan_text(doc) == shown["text"].out
    assert plan_markdown(doc) == shown["markdown"].out


HOST = HostFacts("gpu-node-9", "snapshot /srv/gpu-node-9", None, None)


def knob(
    kind: str,
    target: str,
    current: str | tuple[str, ...] | None,
    desired: str | tuple[str, ...] | None,
    **more: Any,
) -> Change:
    more.setdefault("phase", Phase.RUNTIME)
    return Change(kind, target, current, desired, **more)


def cpu(n: int, current: str, desired: str = "performance", **more: Any) -> Change:
    return knob(
        "cpu",
        f"cpu{n}:governor",
        current,
        desired,
        setting="governor",
        subject=f"cpu{n}",
        reason="frequency ramps late",
        fix="cpupower frequency-set -g performance",
        **more,
    )


def device(address: str) -> Change:
    return knob(
        "pci",
        f"{address}:max_read_request",
        "512",
        "4096",
        setting="max_read_request",
        subject=address,
        priority=Priority.P0,
        fix=f"setpci -s {address} CAP_EXP+8.w=5000:7000",
    )


MOUNTS = tuple(f"/dev/nvidia{n} dev/nvidia{n} none bind,optional,create=file" for n in range(6))
EVERY_BRANCH = Plan(
    "lab",
    HOST,
    (
        knob("sysctl", "vm.swappiness", "60", "10", reason="keep weights in RAM", fix="sysctl"),
        # Values a plain `1 -> 2` would hide: edged with blanks, empty, absent.
        knob("sysctl", "kernel.x", " 1", "", priority=Priority.P2, reason="ends in a dot."),
        knob("sysfs", "/sys/y", None, "madvise", optional=True),
        # One profile entry in two lines (the CPUs differ in what they run now), interleaved.
        *(cpu(n, "schedutil" if n % 3 else "powersave") for n in range(8)),
        *(device(f"0000:{n:02x}:00.0") for n in range(1, 7)),
        *(
            knob(
                "irq_affinity",
                f"irq{n}",
                "0-127",
                "32-63",
                setting="IRQs of mlx5",
                subject=f"irq{n}",
            )
            for n in (120, 121, 122, 130)
        ),
        knob(
            "file", "/etc/sysctl.d/90-tune.conf", ("# tune", "a = 1", "b = 2"), ("# tune", "b = 3")
        ),
        knob("file", "/etc/modules-load.d/tune.conf", None, ("# tune", "nvidia_peermem")),
        knob("file", "/etc/tmpfiles.d/tune.conf", ("# tune", "w /x"), None),
        knob(
            "lxc",
            "101:lxc.cgroup2.devices.allow",
            ("c 195:* rwm",),
            ("c 195:* rwm", "c 509:* rwm"),
            phase=Phase.REBOOT,
            priority=Priority.P0,
            setting="lxc.cgroup2.devices.allow",
            subject="101",
        ),
        knob(
            "lxc",
            "101:lxc.mount.entry",
            MOUNTS[:5],
            MOUNTS[1:],
            phase=Phase.REBOOT,
            priority=Priority.P0,
            reason="CUDA fails inside",
        ),
        knob("cmdline", "amd_pstate", None, "active", phase=Phase.REBOOT),
        # In sync: the Markdown report confirms them; a knob the host lacks is neither.
        knob("sysctl", "vm.dirty_ratio", "10", "10"),
        *(cpu(n, "performance") for n in (9, 10)),
        knob("sysctl", "net.x", None, "1", missing=True),
    ),
    (
        Pending("cmdline", "iommu", None, "pt"),
        Pending("services", "ollama:LimitMEMLOCK", "8M", "infinity", restart="ollama"),
    ),
    (
        CheckResult("kernel", False, "6.8.12", ">=6.14", "install a newer kernel"),
        CheckResult("iommu", False, None, "passthrough", "boot with iommu=pt"),
        CheckResult("pci_link", True, "32GT/s x16", "32GT/s x16", "reseat it", "0000:01:00.0"),
    ),
    (Note("irqbalance is not installed."),),
)


ESC, BIDI = "\x1b[2J", "\u202e"
# Host text that would act on a terminal or a Markdown reader, where every view puts it.
HOSTILE = Plan(
    f"lab{ESC}",
    HostFacts(f"gpu{ESC}", f"snapshot /srv/{BIDI}", f"6.8{ESC}", f"boot{BIDI}"),
    (
        knob("sysctl", f"kernel.{ESC}", f"\n1{ESC}", "2 ", reason=f"why{ESC}\nnot", fix=f"x{ESC}"),
        knob("sysctl", "a\\", "1\\", "\\n", priority=Priority.P0),
        *(
            knob("cpu", f"cpu{n}{BIDI}:governor", f"s{ESC}", "p", setting="g", subject=f"c{n}{ESC}")
            for n in range(6)
        ),
        *(cpu(n, f"p{ESC}", f"p{ESC}") for n in range(2)),
        knob("file", f"/etc/{ESC}.conf", (f"a{ESC}", "b"), (f"a{ESC}", f"c{BIDI}")),
        knob(
            "lxc",
            f"1{ESC}:lxc.mount.entry",
            tuple(f"m{n}{ESC}" for n in range(5)),
            tuple(f"m{n}{ESC}" for n in range(1, 6)),
            phase=Phase.REBOOT,
        ),
    ),
    (Pending("cmdline", f"x{ESC}", f"\t{ESC}", f"{BIDI}y"),),
    (CheckResult(f"k{ESC}", False, f"o{ESC}", f"e{BIDI}", f"r{ESC}", f"s{ESC}"),),
    (Note(f"n{ESC}\nm"),),
)


@pytest.mark.parametrize(
    "plan",
    [
        EVERY_BRANCH,
        HOSTILE,
        # In sync but for a restart; nothing at all.
        Plan("lab", HOST, (knob("sysctl", "a", "1", "1"),), EVERY_BRANCH.pending[1:], (), ()),
        Plan("lab", HOST, (), (), (), ()),
    ],
    ids=["every-branch", "hostile", "restart-only", "empty"],
)
def test_plans_rebuild_from_their_json(plan: Plan) -> None:
    assert_rebuilt(plan)


NOW = datetime(2025, 6, 2, 6, 30, tzinfo=UTC)
CPUS = "/sys/devices/system/cpu"


def governor(root: Path, cpus: range, value: str = "schedutil") -> None:
    for n in cpus:
        write(root, f"{CPUS}/cpu{n}/cpufreq/scaling_governor", f"{value}\n")


@pytest.mark.parametrize(
    ("applied", "drift", "args"),
    [
        (False, False, ()),
        (True, False, ()),
        (True, True, ()),
        (True, True, ("--since-apply",)),
        (True, True, ("--since-apply", "--strict")),
        (False, True, ()),
        (False, True, ("--no-persist",)),
    ],
)
def test_check_reports_rebuild_from_their_json(
    tuned: Path, monkeypatch: pytest.MonkeyPatch, applied: bool, drift: bool, args: tuple[str, ...]
) -> None:
    monkeypatch.setattr(time, "time", NOW.timestamp)
    if applied:
        write_applied(tuned)
    if drift:
        governor(tuned, range(4))  # one entry on four CPUs
        governor(tuned, range(6, 8), "powersave")  # the same entry, another value
        write(tuned, "/proc/sys/kernel/numa_balancing", "1\n")
        write(tuned, "/proc/sys/kernel/osrelease", "6.8.12-9-pve\n")  # a failed check
        # Configured for the next boot, not running yet.
        cmdline = tuned / "proc/cmdline"
        cmdline.write_text(cmdline.read_text().replace(" amd_pstate=active", ""))
    text = run_tune("check", BLACKWELL, "--root", tuned, *args)
    doc = json.loads(run_tune("check", BLACKWELL, "--root", tuned, "--format", "json", *args).out)
    jsonschema.validate(doc, SCHEMAS["check"])
    assert check_text(doc) == text.out


def test_a_rolled_back_host_check_rebuilds_from_its_json(
    tuned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", NOW.timestamp)
    write_applied(tuned, outcome="rolled-back")
    governor(tuned, range(2))
    text = run_tune("check", BLACKWELL, "--root", tuned)
    doc = json.loads(run_tune("check", BLACKWELL, "--root", tuned, "--format", "json").out)
    assert doc["undone"]
    assert doc["not_applied"]
    assert check_text(doc) == text.out


def test_a_knob_changed_after_apply_that_the_profile_agrees_with_rebuilds(
    tuned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CHANGED line: someone set the knob back and edited the profile to match."""
    monkeypatch.setattr(time, "time", NOW.timestamp)
    write_applied(tuned)
    write(tuned, "/proc/sys/kernel/numa_balancing", "1\n")
    edited = profile(
        tmp_path,
        BLACKWELL.read_text().replace("extends: base-gpu-inference.yaml", "")
        + "sysctl:\n  kernel.numa_balancing: 1\n",
    )
    args = ("check", edited, "--root", tuned, "--since-apply", "--no-persist")
    text = run_tune(*args)
    doc = json.loads(run_tune(*args, "--format", "json").out)
    assert "CHANGED sysctl kernel.numa_balancing" in text.out
    assert check_text(doc) == text.out


def test_a_check_with_no_profile_to_compare_rebuilds(
    tuned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rolled back, and the rollback took the stored profile away: nothing compared."""
    monkeypatch.setattr(time, "time", NOW.timestamp)
    write_applied(tuned, outcome="rolled-back")
    (tuned / "var/lib/tune/profile.yaml").unlink()
    text = run_tune("check", "--root", tuned)
    doc = json.loads(run_tune("check", "--root", tuned, "--format", "json").out)
    assert not doc["compared"]
    assert check_text(doc) == text.out
