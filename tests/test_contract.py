"""The contract every `tune` command keeps with the operator (docs/conventions.md), checked on
each command click knows, so that a command added later is held to it without a line here
beyond its row in `CONTRACT`.

A row says what kind of command it is and which promises it keeps today; a promise it does not
keep yet is an `xfail(strict=True)` row naming the part that owns it, so the table stays honest:
when that work lands the row passes, strict xfail fails, and the row is turned green.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from conftest import Result, run_tune
from small_host import SmallHost, build, listing, write_profile

from reconciler.cli.main import cli
from reconciler.core.errors import EXIT_CODES, ExitCode

OUTPUT = "output"  # the part that brings -o/--format/--color to every command (#18)
FLEET = "fleetcli"  # the part that makes fleet options work where they are offered (#18)
FLEET_OPTIONS = ("--inventory", "--limit", "--forks")


@dataclass(frozen=True)
class Row:
    """One command's place in the contract. `argv`: how to run it against the test host
    (`{root}`, `{profile}`, `{probed}` and `{out}` filled in). `writes`: it changes a host, so
    it takes --yes and --dry-run and refuses without a terminal. `reports`: it prints a result
    an operator or a program reads, so it takes --format json, -o FILE and --color.
    `pending`: promise -> the part that owns it, for those not kept yet."""

    argv: tuple[str, ...]
    writes: bool = False
    reports: bool = True
    pending: dict[str, str] = field(default_factory=dict)


ROOT = ("--root", "{root}")
CONTRACT: dict[str, Row] = {
    "plan": Row(("plan", "{profile}", *ROOT)),
    "check": Row(("check", "{profile}", *ROOT)),
    "apply": Row(("apply", "{profile}", "--runtime-only", *ROOT), writes=True),
    "rollback": Row(("rollback", *ROOT), writes=True),
    # verify finishes an apply that was confirmed: it promotes the boot configuration that
    # apply prepared, or rolls it back when the boot did not bring it. Asking there would
    # leave a failed boot configuration in place whenever nobody is at the terminal.
    "verify": Row(("verify", *ROOT)),
    # What tune last left on the host (status.json): it reads only.
    "status": Row(("status", *ROOT)),
    "history": Row(("history", *ROOT)),
    "report": Row(("report", *ROOT)),
    "audit": Row(("audit", *ROOT)),
    "probe": Row(("probe", "{probed}", *ROOT)),
    # -o is the archive here: its JSON (what was captured) is on standard output.
    "snapshot": Row(("snapshot", "{profile}", *ROOT, "-o", "{out}.tar.gz")),
    "validate": Row(("validate", "{profile}")),
    # The profile's JSON Schema: JSON whatever the format, for editors.
    "schema": Row(("schema",), reports=False),
    # What the installed tool prints about itself: texts for a shell, a pager or a file.
    "profiles": Row(("profiles",)),
    "config": Row(("config",)),
    "examples": Row(("examples",), reports=False),
    "completion": Row(("completion", "bash"), reports=False),
    "man": Row(("man",), reports=False),
    # Without a rollout journaled, each says so and exits 0. resume continues a rollout the
    # operator confirmed at `tune apply`; what it asks is the canaries' question.
    "rollout status": Row(("rollout", "status")),
    "rollout resume": Row(("rollout", "resume")),
    "rollout list": Row(("rollout", "list")),
    # What a Kubernetes node agent runs: tune's own files for kured and nfd-worker (as check's
    # metrics are), written every cycle unattended, and documents for kubectl or a package.
    # What slurmd runs (RebootProgram, HealthCheckProgram, the node-features helper): no one to
    # ask and no one to read a document; each says what it did in one line and its exit code,
    # which is all Slurm keeps (docs/engines/slurm.md).
    "slurm reboot-program": Row(("slurm", "reboot-program", *ROOT), reports=False),
    "slurm health-check": Row(("slurm", "health-check", *ROOT), reports=False),
    "slurm features": Row(("slurm", "features", *ROOT), reports=False),
    "kube sentinel": Row(("kube", "sentinel", *ROOT), reports=False),
    "kube features": Row(("kube", "features", *ROOT), reports=False),
    "kube gpu-operator": Row(("kube", "gpu-operator", "{profile}", *ROOT), reports=False),
    "export machineconfig": Row(("export", "machineconfig", "{profile}"), reports=False),
    "export nodewright": Row(("export", "nodewright", "{profile}", "-d", "{out}"), reports=False),
}


def commands(group: click.Group = cli, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    """Every command of the tree, a subgroup's as "group sub", from click itself."""
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from commands(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


COMMANDS = dict(commands())


def option(command: click.Command, flag: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and flag in (*param.opts, *param.secondary_opts):
            return param
    return None


@dataclass(frozen=True)
class Host:
    """A small snapshot host with one run of profile `a` applied, and profile `profile` that
    wants something else: every command has something to read, report, apply or roll back."""

    tmp: Path
    root: Path
    profile: Path
    probed: Path

    def argv(self, row: Row, *extra: str) -> list[str]:
        fill = {
            "root": str(self.root),
            "profile": str(self.profile),
            "probed": str(self.probed),
            "out": str(self.tmp / "out"),
        }
        return [part.format(**fill) for part in row.argv] + list(extra)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    root = build(tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60"}))
    applied = write_profile(tmp_path / "a.yaml", {"sysctl": {"vm.swappiness": 10}})
    done = run_tune("apply", applied, "--runtime-only", "--root", root, "--yes")
    assert done.code == 0, done.err
    wanted = write_profile(tmp_path / "b.yaml", {"sysctl": {"vm.swappiness": 20}})
    probe = {"run": ["echo", "value: 1"], "metric": "value: ([0-9]+)"}
    probed = write_profile(tmp_path / "p.yaml", {"probes": {"echoed": probe}})
    return Host(tmp_path, root, wanted, probed)


def whole_tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry of the host, its journal and stored profile included; not /run, where the
    lock of a refused run records the pid that held it."""
    return {path: entry for path, entry in listing(root).items() if not path.startswith("run")}


class Terminal(io.StringIO):
    """Standard input that is a terminal, with the operator's answers in it."""

    def isatty(self) -> bool:
        return True


# Each promise: (applies to this row?, the check).
Check = Callable[[str, click.Command, Row, Host, pytest.MonkeyPatch], None]


def _writer_options(name: str, command: click.Command, row: Row, host: Host, _: object) -> None:
    yes, dry_run = option(command, "--yes"), option(command, "--dry-run")
    assert yes is not None and yes.is_flag and "-y" in yes.opts, f"{name} has no --yes/-y"
    assert dry_run is not None and dry_run.is_flag, f"{name} has no --dry-run"


def _run(
    host: Host, row: Row, monkeypatch: pytest.MonkeyPatch, stdin: io.StringIO, *extra: str
) -> tuple[Result, bool]:
    """The row's command with `stdin` and `extra` arguments; whether the host changed."""
    monkeypatch.setattr("sys.stdin", stdin)
    before = whole_tree(host.root)
    result = run_tune(*host.argv(row, *extra))
    return result, whole_tree(host.root) != before


def _refuses_without_a_terminal(
    name: str, command: click.Command, row: Row, host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused, changed = _run(host, row, monkeypatch, io.StringIO(""))
    assert refused.code == ExitCode.NOT_CONFIRMED, refused.err
    assert "no terminal to confirm on, so nothing was written" in refused.err
    assert f"`tune {name} --yes`" in refused.err
    assert not changed


def _declined_on_a_terminal(
    name: str, command: click.Command, row: Row, host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    declined, changed = _run(host, row, monkeypatch, Terminal("n\n"))
    assert (declined.code, declined.err) == (
        ExitCode.NOT_CONFIRMED,
        "not confirmed: nothing was written.\n",
    )
    assert "? [y/N]" in declined.out
    assert not changed


def _dry_run_writes_nothing(
    name: str, command: click.Command, row: Row, host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown, changed = _run(host, row, monkeypatch, io.StringIO(""), "--dry-run")
    assert shown.code == ExitCode.IN_SYNC, shown.err
    assert "nothing written" in shown.out
    assert not changed


def _yes_goes_ahead(
    name: str, command: click.Command, row: Row, host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    done, changed = _run(host, row, monkeypatch, io.StringIO(""), "--yes")
    assert done.code == ExitCode.IN_SYNC, done.err
    assert changed


def _exit_codes_documented(
    name: str, command: click.Command, row: Row, host: Host, _: object
) -> None:
    shown = run_tune(*name.split(), "--help")
    assert shown.code == 0, shown.err
    helped = " ".join(shown.out.split())
    said = re.search(r"Exit codes: ([^.]*)", helped)
    assert said is not None, f"tune {name} --help lists no exit codes"
    listed = {int(code) for code in re.findall(r"(?<![\w.])(\d+)(?= |,|$)", said.group(1))}
    assert listed, said.group(0)
    assert listed <= set(EXIT_CODES), f"{sorted(listed - set(EXIT_CODES))} are not in the table"


def _json_to_output_file(
    name: str, command: click.Command, row: Row, host: Host, _: object
) -> None:
    fmt = option(command, "--format")
    assert fmt is not None and isinstance(fmt.type, click.Choice), f"{name} has no --format"
    assert "json" in fmt.type.choices, f"{name} --format has no json"
    assert option(command, "-o") is not None, f"{name} has no -o"
    target = host.tmp / "written.json"
    own_output = "-o" in row.argv  # its -o is what it makes (the archive), not its report
    extra = ["--format", "json"] + ([] if own_output else ["-o", str(target)])
    done = run_tune(*host.argv(row, *extra, *(["--yes"] if row.writes else [])))
    assert done.code in EXIT_CODES and done.code not in (ExitCode.USAGE, ExitCode.INTERNAL)
    written = json.loads(done.out if own_output else target.read_text())
    objects = written if isinstance(written, list) else [written]
    assert all("format_version" in one for one in objects), f"{name}: no format_version"


def _color_option(name: str, command: click.Command, row: Row, host: Host, _: object) -> None:
    color = option(command, "--color")
    assert color is not None and isinstance(color.type, click.Choice), f"{name} has no --color"
    assert set(color.type.choices) == {"auto", "always", "never"}


def _fleet_options_work(
    name: str, command: click.Command, row: Row, host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    offered = [flag for flag in FLEET_OPTIONS if option(command, flag) is not None]
    if not offered:
        return  # not offered: nothing to keep
    # Two hosts nobody listens for (port 1 on loopback): a command that works across hosts
    # reports each host's error; one that only offers the options refuses them as usage.
    inventory = host.tmp / "hosts.ini"
    inventory.write_text(
        "[gpu]\na ansible_host=127.0.0.1 ansible_port=1\nb ansible_host=127.0.0.1 ansible_port=1\n"
    )
    argv = [part for part in host.argv(row) if part not in ("--root", str(host.root))]
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    yes = ["--yes"] if row.writes else []
    # A command that reads its hosts elsewhere (`rollout resume`: from its journal) offers
    # --forks alone: that it takes.
    given = (
        ["--inventory", str(inventory), "--connect-timeout", "2"]
        if "--inventory" in offered
        else ["--forks", "2"]
    )
    done = run_tune(*argv, *given, *yes)
    assert done.code != ExitCode.USAGE, f"tune {name} offers {offered} but: {done.err}"


PROMISES: dict[str, tuple[Callable[[Row], bool], Check]] = {
    "--yes and --dry-run": (lambda row: row.writes, _writer_options),
    "refuses without a terminal": (lambda row: row.writes, _refuses_without_a_terminal),
    "declined writes nothing": (lambda row: row.writes, _declined_on_a_terminal),
    "dry run writes nothing": (lambda row: row.writes, _dry_run_writes_nothing),
    "--yes goes ahead": (lambda row: row.writes, _yes_goes_ahead),
    "exit codes documented": (lambda row: True, _exit_codes_documented),
    "json to -o": (lambda row: row.reports, _json_to_output_file),
    "--color": (lambda row: row.reports, _color_option),
    "fleet options work": (lambda row: True, _fleet_options_work),
}


def cases() -> Iterator[object]:
    for name in COMMANDS:
        row = CONTRACT.get(name)
        if row is None:
            continue  # test_every_command_has_a_row names it
        for promise, (applies, _) in PROMISES.items():
            if not applies(row):
                continue
            owner = row.pending.get(promise)
            marks = [pytest.mark.xfail(strict=True, reason=f"#18, part {owner}")] if owner else []
            yield pytest.param(name, promise, marks=marks, id=f"{name}: {promise}")


def test_every_command_has_a_row_and_every_row_a_command() -> None:
    assert set(COMMANDS) == set(CONTRACT)


def test_every_pending_promise_is_one_the_row_makes() -> None:
    for name, row in CONTRACT.items():
        for promise in row.pending:
            assert promise in PROMISES and PROMISES[promise][0](row), (name, promise)


@pytest.mark.parametrize(("name", "promise"), list(cases()))
def test_contract(name: str, promise: str, host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    _, check = PROMISES[promise]
    check(name, COMMANDS[name], CONTRACT[name], host, monkeypatch)
