"""The output contract every command keeps: `--format json` as one versioned document a host,
valid against the schema `tune schema --KIND` publishes; `-o FILE` (`-` standard output) takes
exactly what standard output would have had; `--color`, NO_COLOR and TERM=dumb."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
from conftest import BLACKWELL, PROJECT, TUNED, UNTUNED, copy_host, profile, run_tune
from small_host import SmallHost, build

from reconciler.cli.main import cli
from reconciler.cli.output import wants_color
from reconciler.core.errors import HostError
from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.fleet import HostResult
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile
from reconciler.render import fleet
from reconciler.render.documents import FORMAT_VERSION, KINDS
from reconciler.render.schemas import SCHEMAS

SMALL = """
name: small
sysctl:
  vm.swappiness: 10
  kernel.numa_balancing: 0
probes:
  swappiness:
    run: [sh, -c, 'echo "value: $(cat "$TUNE_ROOT/proc/sys/vm/swappiness")"']
    metric: 'value: ([0-9]+)'
    repeat: 3
"""


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """Each kind's documents, from the commands themselves on one applied snapshot (and a
    fleet's, from the renderers the fleet commands use)."""
    tmp = tmp_path_factory.mktemp("outputs")
    root = copy_host(UNTUNED, tmp / "host")
    small = profile(tmp, SMALL)
    bad = profile(tmp, "name: bad\nsysctl: 3\n", "bad.yaml")
    found: dict[str, list[Any]] = {kind: [] for kind in KINDS}

    def run(*args: object, codes: tuple[int, ...] = (0, 2)) -> None:
        result = run_tune(*args, "--format", "json")
        assert result.code in codes, result.err
        found[str(args[0])].append(json.loads(result.out))

    run("plan", BLACKWELL, "--root", root, "--save", tmp / "saved.json")
    run("check", BLACKWELL, "--root", root)
    run("audit", "--root", root)
    run("probe", small, "--root", root)
    run("validate", small)
    run("validate", bad, codes=(65,))
    run("snapshot", small, "--root", root, "-o", tmp / "s.tar.gz")
    apply = ("apply", small, "--runtime-only", "--no-persist", "--no-probes", "--root", root)
    run(*apply, "--dry-run")
    run(*apply, "-y")
    run("history", "--root", root)
    run("report", "--root", root)
    run("status", "--root", root)  # status.json as the apply left it
    run("verify", "--root", root)
    run("rollback", "--yes", "--root", root)
    run("check", small, "--root", root)
    # No status yet: every field null or false.
    run("status", "--root", copy_host(UNTUNED, tmp / "never-applied"))
    run("profiles")
    run("config")
    run("rollout", "status")  # none journaled
    found["rollout"] += _rollout_documents(root)

    loaded = load_profile(BLACKWELL)
    plans = [
        HostResult(name, value=make_plan(loaded, observe(SnapshotHost(where), loaded.profile)))
        for name, where in (("tuned-1", TUNED), ("untuned-1", UNTUNED))
    ]
    plans.append(HostResult("down-1", error=HostError("down-1: cannot connect.")))
    found["plan"].append(json.loads(fleet.as_json(plans)))
    found["apply"].append(json.loads(fleet.applied_json([], plans)))
    return found


def _rollout_documents(root: Path) -> list[Any]:
    """A rollout journaled with a host in each state: `tune rollout status` and the lines of a
    rollout's own output."""
    from reconciler.render.rollout import host_document, summary_document
    from reconciler.rollout.journal import STATES, HostEntry, Rollout, new_rollout_id

    hosts = {f"h{n}": HostEntry(wave=n, state=state) for n, state in enumerate(STATES)}
    hosts["h2"].why = "did not come back"
    saved = Rollout(new_rollout_id(), str(BLACKWELL), "0" * 64, {}, [[n] for n in hosts], hosts)
    saved.save()
    status = run_tune("rollout", "status", "--format", "json")
    assert status.code == 0, status.err
    listed = run_tune("rollout", "list", "--format", "json")
    assert listed.code == 0, listed.err
    lines = [host_document(saved, name) for name in hosts] + [summary_document(saved)]
    return [json.loads(status.out), json.loads(listed.out), *lines]


@pytest.mark.parametrize("kind", KINDS)
def test_every_command_writes_json_its_published_schema_accepts(
    kind: str, outputs: dict[str, list[Any]]
) -> None:
    published = json.loads(run_tune("schema", f"--{kind}").out)
    assert published == SCHEMAS[kind]
    assert outputs[kind], f"no `tune {kind} --format json` output was checked"
    for output in outputs[kind]:
        jsonschema.validate(output, published)
        for document in output if isinstance(output, list) else [output]:
            assert (document["format_version"], document["kind"]) == (FORMAT_VERSION, kind)


def test_a_fleet_is_a_list_of_the_one_host_documents(outputs: dict[str, list[Any]]) -> None:
    one, many = outputs["plan"][0], outputs["plan"][-1]
    assert isinstance(many, list) and [d["target"] for d in many] == [
        "tuned-1",
        "untuned-1",
        "down-1",
    ]
    assert set(one) | {"target"} == set(many[1])
    assert many[1]["summary"] == one["summary"]
    # Each knob is an item of `changes`; the summary counts them as writes, its changes entries.
    assert one["summary"]["writes"]["total"] == len(one["changes"]) == 368
    assert one["summary"]["changes"] == len({c["entry"] for c in one["changes"]}) == 29


def test_a_schema_refuses_what_it_does_not_describe(outputs: dict[str, list[Any]]) -> None:
    document = dict(outputs["plan"][0])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document | {"format_version": FORMAT_VERSION + 1}, SCHEMAS["plan"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in document.items() if k != "summary"}, SCHEMAS["plan"])


def test_the_profile_schema_stays_the_default() -> None:
    assert "$defs" in json.loads(run_tune("schema").out)
    assert run_tune("schema").out == run_tune("schema", "--profile").out


def small_host(root: Path) -> Path:
    """A host of the few files SMALL reads and writes: what the tests of output options need."""
    return build(root, SmallHost(sysctls={"vm.swappiness": "60", "kernel.numa_balancing": "1"}))


@pytest.fixture
def applied(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    root = small_host(tmp_path / "host")
    small = profile(tmp_path, SMALL)
    apply = ("apply", small, "--runtime-only", "--no-persist", "-y", "--no-probes")
    done = run_tune(*apply, "--root", root)
    assert done.code == 0, done.err
    yield root, small


COMMANDS = {
    "plan": ("plan", BLACKWELL, "--root", UNTUNED),
    "check": ("check", BLACKWELL, "--root", UNTUNED),
    "audit": ("audit", "--root", UNTUNED),
    "validate": ("validate", BLACKWELL),
    "history": ("history", "--root", "{root}"),
    "report": ("report", "--root", "{root}"),
    "verify": ("verify", "--root", "{root}"),
    "probe": ("probe", "{small}", "--root", "{root}"),
    "apply": ("apply", "{small}", "--dry-run", "--no-probes", "--root", "{root}"),
    "schema": ("schema", "--plan"),
}


def _args(command: str, root: Path, small: Path) -> list[str]:
    return [str(a).format(root=root, small=small) for a in COMMANDS[command]]


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("command", COMMANDS)
def test_dash_o_writes_what_stdout_would_have_had(
    command: str,
    fmt: str,
    applied: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A check of a host tune keeps no state on stamps each drift with its own time: one clock
    # for the three runs, or a second boundary between them tells them apart.
    if command == "check":
        now = time.time()
        monkeypatch.setattr(time, "time", lambda: now)
    if fmt == "text":  # a report's text is Markdown; a schema is JSON only
        fmt = {"report": "markdown", "schema": "json"}.get(command, fmt)
    args = [*_args(command, *applied), "--format", fmt]
    printed = run_tune(*args)
    target = tmp_path / "out.md"  # the suffix says nothing: --format does
    written = run_tune(*args, "-o", target)
    assert written.code == printed.code, written.err
    assert written.out == ""
    assert target.read_text() == printed.out
    dash = run_tune(*args, "-o", "-")
    assert (dash.code, dash.out) == (printed.code, printed.out)
    assert not Path("-").exists()


def test_plan_saves_for_apply_where_save_says(tmp_path: Path) -> None:
    result = run_tune("plan", BLACKWELL, "--root", UNTUNED, "--save", tmp_path / "p.json")
    assert result.code == 2
    assert json.loads((tmp_path / "p.json").read_text())["plan"]["profile"] == "blackwell-8x"
    assert not Path(".tune/plan.json").exists()
    run_tune("plan", BLACKWELL, "--root", UNTUNED, "-o", tmp_path / "plan.txt")
    assert Path(".tune/plan.json").is_file(), "-o is the output; the saved plan stays"
    assert (tmp_path / "plan.txt").read_text().startswith("tune plan: blackwell-8x on")


def test_a_command_that_fails_leaves_the_output_file_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "plan.txt"
    target.write_text("yesterday's plan\n")
    result = run_tune("plan", BLACKWELL, "--root", tmp_path / "missing", "-o", target)
    assert result.code == 1
    assert target.read_text() == "yesterday's plan\n"


def test_an_output_file_that_cannot_be_written_is_one_sentence(tmp_path: Path) -> None:
    target = tmp_path / "no-such-directory" / "plan.txt"
    result = run_tune("plan", BLACKWELL, "--root", UNTUNED, "-o", target)
    assert result.code == 1
    # After the line saying where the plan for `tune apply` was saved: that still happened.
    assert result.err.splitlines()[-1] == (
        f"{target}: cannot write the output (No such file or directory)."
    )


def _tune(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    environment = {**os.environ, "PYTHONPATH": str(PROJECT), **(env or {})}
    argv = [sys.executable, "-m", "reconciler.cli", *map(str, args)]
    return subprocess.run(argv, env=environment, capture_output=True, check=False)


def test_snapshot_dash_o_is_the_archive_on_stdout_and_the_summary_on_stderr(
    tmp_path: Path,
) -> None:
    small = profile(tmp_path, SMALL)
    done = _tune("snapshot", small, "--root", UNTUNED, "-o", "-", "--format", "json")
    assert done.returncode == 0, done.stderr
    with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r:gz") as archive:
        assert "proc/sys/vm/swappiness" in archive.getnames()
        files = sum(not member.isdir() for member in archive.getmembers())
    summary = json.loads(done.stderr)
    assert (summary["kind"], summary["archive"], summary["files"]) == ("snapshot", "-", files)
    assert not (tmp_path / "-").exists()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("choice", "env", "tty", "colored"),
    [
        ("auto", {}, True, True),
        ("auto", {}, False, False),
        ("auto", {"NO_COLOR": "1"}, True, False),
        ("auto", {"NO_COLOR": ""}, True, True),  # no-color.org: set and not empty
        ("auto", {"TERM": "dumb"}, True, False),
        ("always", {"NO_COLOR": "1"}, False, True),
        ("never", {}, True, False),
    ],
)
def test_colour_follows_the_option_then_the_environment_then_the_terminal(
    choice: str, env: dict[str, str], tty: bool, colored: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert wants_color(choice, Terminal() if tty else io.StringIO()) is colored


@pytest.mark.parametrize("command", ["plan", "check", "audit"])
def test_color_always_colours_a_pipe_and_never_a_file(command: str, tmp_path: Path) -> None:
    args = [command, *([BLACKWELL] if command != "audit" else []), "--root", UNTUNED]
    assert "\x1b[" in run_tune(*args, "--color", "always").out
    assert "\x1b[" not in run_tune(*args).out
    run_tune(*args, "--color", "always", "-o", tmp_path / "out")
    assert "\x1b[" not in (tmp_path / "out").read_text()


def _on_a_terminal(*args: object, env: dict[str, str]) -> str:
    """What tune prints when its standard output is a terminal (a pseudo-terminal here)."""
    leader, follower = pty.openpty()
    environment = {**os.environ, "PYTHONPATH": str(PROJECT), "TERM": "xterm", **env}
    argv = [sys.executable, "-m", "reconciler.cli", *map(str, args)]
    with subprocess.Popen(
        argv, env=environment, stdout=follower, stderr=follower, stdin=subprocess.DEVNULL
    ) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        process.wait()
    os.close(leader)
    return b"".join(chunks).decode()


@pytest.mark.parametrize("command", ["apply", "plan"])
def test_no_color_is_honoured_on_a_terminal(command: str, tmp_path: Path) -> None:
    root = small_host(tmp_path / "host")
    small = profile(tmp_path, SMALL)
    args = [command, small, "--root", root, "--no-persist"]
    args += ["--runtime-only", "-y", "--no-probes"] if command == "apply" else []
    plain = _on_a_terminal(*args, env={"NO_COLOR": "1"})
    assert "vm.swappiness" in plain and "\x1b[" not in plain
    if command == "apply":
        run_tune("rollback", "--yes", "--root", root)
    assert "\x1b[" in _on_a_terminal(*args, env={"NO_COLOR": ""})


def test_probes_show_progress_on_a_terminal_only(tmp_path: Path) -> None:
    probed = profile(tmp_path, SMALL)
    seen = _on_a_terminal("probe", probed, "--root", UNTUNED, env={})
    last = "Probe swappiness: run 3 of 3"
    assert f"\r{last}" in seen
    cleared = "\r" + " " * len(last) + "\r"  # before the table, which follows whole
    assert "swappiness" in seen.split(cleared)[1]
    as_json = _on_a_terminal("probe", probed, "--root", UNTUNED, "--format", "json", env={})
    assert "Probe swappiness: run" not in as_json
    piped = run_tune("probe", probed, "--root", UNTUNED)
    assert "Probe swappiness: run" not in piped.err + piped.out


def test_the_suffix_of_the_output_file_does_not_choose_the_format(tmp_path: Path) -> None:
    target = tmp_path / "audit.json"
    run_tune("audit", "--root", UNTUNED, "-o", target)
    assert target.read_text() == run_tune("audit", "--root", UNTUNED).out, "text, the default"


def test_every_command_with_json_has_a_published_schema_and_the_output_options() -> None:
    context = click.Context(cli)
    with_json = set()
    # What prints a text for a shell, a pager or a file, not a report: a script, a manual page,
    # an example unit file; and the programs Slurm runs, whose reader is slurmd's log and whose
    # answer is the exit code (docs/engines/slurm.md).
    texts = {"completion", "man", "examples", "slurm"}
    for name in sorted(set(cli.list_commands(context)) - texts):
        command = cli.get_command(context, name)
        assert command is not None
        # A group's subcommands (`tune rollout status`) report under the group's kind.
        subcommands = (
            [command.get_command(context, sub) for sub in command.list_commands(context)]
            if isinstance(command, click.Group)
            else [command]
        )
        for one in subcommands:
            assert one is not None
            options = {flag: p for p in one.params for flag in getattr(p, "opts", [])}
            assert {"-o", "--color", "--format"} <= set(options), f"tune {name} {one.name}"
            fmt = options.get("--format")
            if isinstance(fmt, click.Option) and "json" in getattr(fmt.type, "choices", ()):
                with_json.add(name)
    assert with_json - {"schema"} == set(KINDS)


def test_history_writes_its_table_to_the_file_before_a_damaged_journal_exits_6(
    applied: tuple[Path, Path], tmp_path: Path
) -> None:
    root, _ = applied
    (journal,) = (root / "var/lib/tune/runs").glob("*.jsonl")
    journal.write_bytes(journal.read_bytes() + b'{"type": "wri\n{"type": "end"}\n')
    target = tmp_path / "history.txt"
    result = run_tune("history", "--root", root, "-o", target)
    assert result.code == 6, result.err
    assert "damaged" in target.read_text()


def test_an_interrupted_command_leaves_no_half_written_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt  # after the plan was rendered, while it is being saved

    monkeypatch.setattr("reconciler.plan.saved.save", interrupted)
    target = tmp_path / "plan.txt"
    result = run_tune("plan", BLACKWELL, "--root", UNTUNED, "-o", target)
    assert result.code == 130
    assert not target.exists()


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_an_output_file_gets_the_mode_the_umask_gives_a_new_file(
    tmp_path: Path, umask: int
) -> None:
    """Written whole through a temporary file, yet with the mode a plain write would give it:
    a report is not made readable to others when the umask says it is not."""
    target = tmp_path / "plan.txt"
    before = os.umask(umask)
    try:
        result = run_tune("plan", BLACKWELL, "--root", UNTUNED, "-o", target)
    finally:
        os.umask(before)
    assert result.code == 2, result.err
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".plan.txt")]
