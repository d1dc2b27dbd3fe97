"""A hostile inventory, a hostile neighbour on the controller: values of an Ansible inventory
made to run a command on the controller (ssh_config's `Match exec %h`), to log in as another
user, to exhaust the controller's memory (a key file that is /dev/zero, a FIFO, a YAML alias
bomb), to forge lines on the operator's terminal; a rollout resumed against another machine; a
hook's children that outlive it. Each is refused with one sentence, never exit 70, never a
hang."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import stat
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import BLACKWELL, UNTUNED, run_tune
from ssh_fixture import StartLab, minimal_host, sshd_available
from test_bounds import tune_in_child

from reconciler.cli.remote import RemoteOptions
from reconciler.cli.rollout import _JOB_FIELDS, RolloutOptions, profile_digest
from reconciler.core.changes import Plan
from reconciler.core.errors import HostError, HostKeyError, InventoryError, UsageError
from reconciler.flow.orchestration import ApplyJob
from reconciler.hosts.fleet import HostResult
from reconciler.hosts.inventory import inventory_targets
from reconciler.hosts.ssh import SshSettings, SshSetup
from reconciler.hosts.targets import Target, parse_host
from reconciler.profile.load import load_profile
from reconciler.render import RENDERERS
from reconciler.render import fleet as fleet_render
from reconciler.rollout import journal
from reconciler.rollout.hooks import HookContext, run_hook

lab_only = pytest.mark.skipif(
    not sshd_available(), reason="needs root and openssh-server (.ci/run installs it)"
)
# A run of tune that reads no key of 20 GB: what the interpreter and its libraries take.
PEAK_KB = 300_000


def inventory(tmp_path: Path, text: str, name: str = "hosts.yml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def one_host(tmp_path: Path, variables: dict[str, str], name: str = "gpu1") -> Path:
    lines = "".join(f"      {key}: {value}\n" for key, value in variables.items())
    return inventory(tmp_path, f"all:\n  hosts:\n    {name}:\n{lines}")


# 5. Values that reach a shell or fabric's own parsing of a host string.


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        ({"ansible_host": "'x;touch pwned'"}, "holds ';', which OpenSSH refuses"),
        ({"ansible_host": "'x$(id)'"}, "holds '$'"),
        ({"ansible_host": "'-oProxyCommand=id'"}, "starts with '-'"),
        ({"ansible_host": "'a b'"}, "holds ' '"),
        ({"ansible_host": '"a\\e[2Jb"'}, "holds '\x1b'"),
        ({"ansible_host": "root@victim"}, "holds a user (USER@HOST)"),
        ({"ansible_host": "victim:2222"}, "holds a port (HOST:PORT)"),
        ({"ansible_user": "'-oProxyCommand=id'"}, "user name '-oProxyCommand=id' starts with"),
        ({"ansible_user": "'u;id'"}, "holds ';', which OpenSSH refuses in a user name"),
        ({"ansible_user": "'u -x'"}, "a word that starts with '-'"),
        ({"ansible_port": "'22;id'"}, "ansible_port '22;id' is not a number"),
        ({"ansible_port": "true"}, "ansible_port 'True' is not a number"),
        ({"ansible_port": "'+22'"}, "ansible_port '+22' is not a number"),
    ],
)
def test_an_inventory_value_made_to_reach_a_shell_is_refused(
    tmp_path: Path, variables: dict[str, str], said: str
) -> None:
    path = one_host(tmp_path, variables)
    with pytest.raises(InventoryError) as refused:
        inventory_targets(path)
    assert str(refused.value).startswith(f"{path}: gpu1:")
    assert said in str(refused.value)


def test_an_inventory_name_made_to_be_an_option_is_refused(tmp_path: Path) -> None:
    path = inventory(tmp_path, "[gpu]\n-oProxyCommand=id\n", "hosts.ini")
    with pytest.raises(InventoryError, match="the inventory name: the host name '-oProxy"):
        inventory_targets(path)


def test_ordinary_names_users_and_addresses_still_connect(tmp_path: Path) -> None:
    path = inventory(
        tmp_path,
        "all:\n  hosts:\n"
        "    gpu-01.example.com:\n      ansible_user: first.last@corp\n"
        "    v6:\n      ansible_host: 'fd00::1'\n      ansible_port: '2222'\n"
        "    win:\n      ansible_user: 'DOMAIN\\ops'\n",
    )
    assert inventory_targets(path) == [
        Target("gpu-01.example.com", "gpu-01.example.com", "first.last@corp"),
        Target("v6", "fd00::1", port=2222),
        Target("win", "win", "DOMAIN\\ops"),
    ]


def test_a_host_given_with_h_is_held_to_the_same_rules() -> None:
    with pytest.raises(UsageError, match="holds ';'"):
        parse_host("root@x;id")
    with pytest.raises(UsageError, match="starts with '-'"):
        parse_host("-oProxyCommand=id")
    assert parse_host("ops@[fd00::1]:2200") == Target("ops@[fd00::1]:2200", "fd00::1", "ops", 2200)


def test_match_exec_never_runs_an_inventory_value_on_the_controller(tmp_path: Path) -> None:
    """paramiko runs `Match exec` through the shell with the host name for `%h`, as ssh does;
    the host is refused before the ssh_config is looked at."""
    pwned = tmp_path / "pwned"
    config = tmp_path / "ssh_config"
    config.write_text('Match exec "true %h"\n  User nobody\n')
    path = one_host(tmp_path, {"ansible_host": f"'x;touch {pwned}'"})
    result = run_tune(
        "plan", BLACKWELL, "-i", path, "--ssh-config", config, "--connect-timeout", "1"
    )
    assert not pwned.exists()
    assert result.code == 64, result.err
    assert result.err == (
        f"{path}: gpu1: ansible_host: the host name 'x;touch {pwned}' holds ';', which OpenSSH "
        "refuses in a host name; tune refuses the host.\n"
    )


def test_fabric_never_reads_a_user_or_a_port_out_of_the_host(tmp_path: Path) -> None:
    from reconciler.hosts.ssh import SshSettings, SshSetup

    config = tmp_path / "ssh_config"
    config.write_text("")
    setup = SshSetup(SshSettings(ssh_config=str(config)))
    connection = setup.host(Target("h", "root@victim:2200", "ops", 22))._connection()
    assert (connection.host, connection.user, connection.port) == ("root@victim:2200", "ops", 22)


# 6. Values that would exhaust the controller.


def alias_bomb() -> str:
    """Each anchor repeats the one before nine times: 9**9 strings from a few hundred bytes."""
    lines = ['l0: &l0 ["x","x","x","x","x","x","x","x","x"]']
    for n in range(1, 9):
        lines.append(f"l{n}: &l{n} [{','.join([f'*l{n - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def merge_bomb() -> str:
    """Each mapping merges the one before twice: the merge walks 2**40 keys."""
    lines = ["m0: &m0 {a: 1}"]
    lines += [f"m{n}: &m{n} {{<<: [*m{n - 1}, *m{n - 1}]}}" for n in range(1, 41)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("bomb", [alias_bomb, merge_bomb])
@pytest.mark.parametrize("where", ["host_vars/gpu1.yml", "group_vars/all/bomb.yaml", "hosts.yml"])
def test_a_yaml_bomb_in_an_inventory_is_refused_before_it_is_expanded(
    tmp_path: Path, no_hang: None, bomb: Callable[[], str], where: str
) -> None:
    hosts = inventory(tmp_path, "all:\n  hosts:\n    gpu1:\n")
    planted = tmp_path / where
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(
        ("all:\n  vars:\n" + textwrap.indent(bomb(), "    ")) if where == "hosts.yml" else bomb()
    )
    with pytest.raises(InventoryError) as refused:
        inventory_targets(hosts)
    assert str(refused.value).startswith(f"{planted}:")
    assert "more than 1,000,000 keys, values and list items" in str(refused.value)


def zero_device(directory: Path) -> Path:
    """A character device that reads as zeros for ever (1,5, the kernel's /dev/zero), made in a
    temporary directory: tests run as root and never read the machine's own /dev."""
    path = directory / "zero"
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    return path


def key_file(tmp_path: Path, kind: str) -> Path:
    if kind == "device":
        return zero_device(tmp_path)
    path = tmp_path / "id_key"
    if kind == "fifo":
        os.mkfifo(path)
    else:  # a sparse file of 20 GiB
        with open(path, "wb") as handle:
            handle.truncate(20 << 30)
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("device", "a character device is not a regular file"),
        ("fifo", "a FIFO is not a regular file"),
        ("sparse", "larger than 256 KiB, the most tune reads for a private key"),
    ],
)
def test_an_identity_file_that_never_ends_is_refused_before_it_is_read(
    tmp_path: Path, kind: str, why: str
) -> None:
    key = key_file(tmp_path, kind)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # a port nothing listens on: the key is read before connecting
    port = closed.getsockname()[1]
    path = one_host(
        tmp_path,
        {
            "ansible_host": "127.0.0.1",
            "ansible_port": str(port),
            "ansible_private_key_file": str(key),
        },
    )
    config = tmp_path / "ssh_config"
    config.write_text("")
    result, peak = tune_in_child(
        "plan", BLACKWELL, "-i", path, "--ssh-config", config, "--format", "json"
    )
    closed.close()
    assert result.code == 1, result.err
    (document,) = json.loads(result.out)
    assert document["error"] == f"gpu1: cannot read the identity file {key}: {why}."
    assert peak < PEAK_KB


# 9 and 13. The hooks around a host's reboot.


def many_changes(count: int) -> tuple[dict[str, str], ...]:
    """`count` changes of a host's PCI power control, as a plan names them."""
    paths = [
        f"/sys/bus/pci/devices/0000:{n >> 8:02x}:{n & 0xFF:02x}.0/power/control"
        for n in range(count)
    ]
    return tuple({"id": f"sysfs:{path}", "kind": "sysfs", "target": path} for path in paths)


def test_a_hook_for_a_host_of_1100_changes_starts_and_reads_them_from_a_private_file(
    tmp_path: Path,
) -> None:
    """Linux refuses an environment string past 128 KiB (E2BIG): the changes come in a file."""
    context = HookContext("gpu1", "10.0.0.1", 1, "r", "run", many_changes(1100))
    assert len(context.document()) > 128 << 10
    seen = tmp_path / "seen"
    command = (
        f'stat -c %a "$TUNE_HOST_JSON_FILE" > {seen}.mode; cp "$TUNE_HOST_JSON_FILE" {seen}; '
        f'echo "$TUNE_HOST_JSON_FILE" > {seen}.path; echo "${{TUNE_HOST_JSON-unset}}" > {seen}.env'
    )
    run_hook("--before-reboot", command, context, 30)
    described = json.loads(seen.read_text())
    assert len(described["changes"]) == 1100 and described["host"] == "gpu1"
    assert (tmp_path / "seen.mode").read_text() == "600\n"
    assert not Path((tmp_path / "seen.path").read_text().strip()).exists()  # removed after
    assert (tmp_path / "seen.env").read_text() == "unset\n"  # too large for the environment


def test_a_small_description_is_in_the_environment_too(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    context = HookContext("gpu1", "10.0.0.1", 2, "r", "run", many_changes(3))
    run_hook("--after-verify", f'printf %s "$TUNE_HOST_JSON" > {seen}', context, 30)
    assert json.loads(seen.read_text()) == json.loads(context.document())


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_a_hook_past_its_time_is_killed_with_what_it_started(tmp_path: Path, no_hang: None) -> None:
    pid_file = tmp_path / "child.pid"
    context = HookContext("gpu1", "10.0.0.1", 1, "r", "run")
    command = f"sleep 300 & echo $! > {pid_file}; wait"
    with pytest.raises(HostError, match=r"^--before-reboot for gpu1 ran past 1 s\.$"):
        run_hook("--before-reboot", command, context, 1)
    child = int(pid_file.read_text())
    for _ in range(50):
        if not alive(child):
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the hook's child outlived its timeout")


def test_a_hooks_output_reaches_the_terminal_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    context = HookContext("gpu1", "10.0.0.1", 1, "r", "run")
    run_hook("--after-verify", r"printf 'drained \033]0;owned\007\n'", context, 30)
    assert capsys.readouterr().err == "drained \\x1b]0;owned\\x07\n"


# 14. Host names on the operator's terminal.

HOSTILE_NAME = "gpu1\x1b[2J\nRollout 1: 9 applied, 0 rolled back\u202e"


def assert_escaped(text: str) -> None:
    assert "\x1b" not in text and "\u202e" not in text
    assert "\nRollout 1: 9 applied" not in text
    assert "gpu1\\x1b[2J\\nRollout 1: 9 applied, 0 rolled back\\u202e" in text


def test_a_rollouts_host_names_reach_the_terminal_escaped() -> None:
    hosts = {HOSTILE_NAME: journal.HostEntry(0), "gpu2": journal.HostEntry(0)}
    saved = journal.Rollout(journal.new_rollout_id(), str(BLACKWELL), "0", {}, [list(hosts)], hosts)
    saved.save()
    shown = run_tune("rollout", "status", saved.rollout_id)
    assert shown.code == 0, shown.err
    assert_escaped(shown.out)
    assert shown.out.count("\n") == 5  # header, two hosts, the counts, one configuration


def test_a_fleets_host_names_reach_the_terminal_escaped() -> None:
    results: list[HostResult[Plan]] = [HostResult(HOSTILE_NAME, error=HostError("unreachable"))]
    assert_escaped(fleet_render.text(results, False, RENDERERS["text"]))
    assert_escaped(fleet_render.applied([HostResult(HOSTILE_NAME, error=HostError("x"))], False))


# Low: input nested too deep, a journal of fields tune never writes.


def test_an_inventory_listing_nested_too_deep_is_one_sentence(tmp_path: Path) -> None:
    deep = inventory(
        tmp_path, '{"all": {"vars": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}}", "hosts.json"
    )
    result = run_tune("plan", BLACKWELL, "-i", deep)
    assert (result.code, result.err) == (64, f"{deep}: JSON nested too deep for tune to read.\n")


def saved_rollout() -> journal.Rollout:
    loaded = load_profile(BLACKWELL)
    hosts = {"gpu1": journal.HostEntry(0)}
    options = {
        "job": {"reboot": True, "reboot_timeout": 60.0},
        "remote": {"hosts": ["gpu1"]},
        "rollout": {"serial": "1", "canary": []},
    }
    saved = journal.Rollout(
        journal.new_rollout_id(), str(BLACKWELL), profile_digest(loaded), options, [["gpu1"]], hosts
    )
    saved.save()
    return saved


def rewritten(
    saved: journal.Rollout, change: Callable[[dict[str, Any]], object], line: str = ""
) -> Path:
    assert saved.path is not None
    first = json.loads(saved.path.read_text().splitlines()[0])
    change(first)
    saved.path.write_text(json.dumps(first) + "\n" + line)
    return saved.path


@pytest.mark.parametrize(
    ("change", "line", "why"),
    [
        (lambda d: d["hosts"]["gpu1"].update(wave="1"), "", "wave of host gpu1 is not int"),
        (
            lambda d: d["hosts"]["gpu1"].update(owner="x"),
            "",
            "a field of host gpu1 tune does not know: owner",
        ),
        (
            lambda d: d["hosts"]["gpu1"].update(configuration="sideways"),
            "",
            "host gpu1 has a configuration or wave tune never writes",
        ),
        (
            lambda d: d.update(waves=[["gpu1", "gpu2"]]),
            "",
            "its waves and its hosts do not name the same hosts once each",
        ),
        (lambda d: d.update(hosts=[]), "", "hosts is not dict"),
        (
            lambda d: None,
            '{"host": "gpu1", "set": {"changes": "many"}}\n',
            "changes of host gpu1 is not int | None",
        ),
        (
            lambda d: None,
            '{"host": "gpu1", "set": {"writes": "many", "changes": 1}}\n',
            "writes of host gpu1 is not int",
        ),
        (
            lambda d: None,
            '{"host": "gpu9", "set": {}}\n',
            "a transition of a host not in the rollout",
        ),
        (lambda d: None, "[" * 100_000 + "]" * 100_000 + "\n{}\n", "a line nested too deep"),
    ],
)
def test_a_rollout_journal_tune_never_wrote_is_one_sentence_and_exit_6(
    change: Callable[[dict[str, Any]], object], line: str, why: str
) -> None:
    path = rewritten(saved_rollout(), change, line)
    for command in ("status", "resume"):
        result = run_tune("rollout", command, "-y" if command == "resume" else "--format=text")
        assert (result.code, result.err) == (
            6,
            f"{path}: a rollout journal tune cannot read ({why}).\n",
        )


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"job": {"reboot_timeout": "soon"}}, "reboot_timeout of job is not float"),
        ({"job": {"loaded": "x"}}, "a field of job tune does not know: loaded"),
        ({"remote": {"forks": True}}, "forks of remote is not int | None"),
        ({"rollout": "1"}, "rollout of options is not dict"),
        ({"extra": {}}, "a field of options tune does not know: extra"),
    ],
)
def test_a_rollout_journals_options_of_another_type_are_refused_on_resume(
    options: dict[str, Any], why: str
) -> None:
    saved = saved_rollout()
    path = rewritten(saved, lambda d: d["options"].update(options))
    result = run_tune("rollout", "resume", "-y")
    assert (result.code, result.err) == (
        6,
        f"{path}: a rollout journal tune cannot read ({why}).\n",
    )


def test_every_field_a_rollout_journal_keeps_has_a_type_its_reader_knows() -> None:
    for cls, only in (
        (ApplyJob, _JOB_FIELDS),
        (RemoteOptions, None),
        (RolloutOptions, None),
        (journal.HostEntry, None),
    ):
        for name, annotation in journal.dataclass_fields(cls, only).items():
            assert all(part.strip() in journal._ADMITS for part in annotation.split("|")), name


# 10. A rollout resumed after its inventory changed.


def test_resume_refuses_a_host_that_is_another_machine_now(tmp_path: Path) -> None:
    """The rollout pins each host's address, port and user when it starts; a host in flight
    whose inventory now points elsewhere is named, and nothing reaches the new machine."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # nothing listens: the rollout's hosts fail to connect
    port = closed.getsockname()[1]
    config = tmp_path / "ssh_config"
    config.write_text("")
    hosts = one_host(tmp_path, {"ansible_host": "127.0.0.1", "ansible_port": str(port)}, "h1")
    started = run_tune(
        "apply", BLACKWELL, "--reboot", "-i", hosts, "--ssh-config", config,
        "--connect-timeout", "1", "-y",
    )  # fmt: skip
    assert started.code == 1, started.err
    rollout = journal.load(None)
    entry = rollout.hosts["h1"]
    assert (entry.address, entry.port, entry.user) == ("127.0.0.1", port, "root")
    # As if the controller died with h1 in flight.
    rollout.update("h1", state=journal.IN_FLIGHT, run_id="20260101T000000Z-abcdef")
    one_host(tmp_path, {"ansible_host": "127.0.0.2", "ansible_port": str(port + 1)}, "h1")
    resumed = run_tune("rollout", "resume", "-y")
    closed.close()
    assert resumed.code == 64, resumed.err
    assert resumed.err == (
        f"host h1 of rollout {rollout.rollout_id} is not the machine it started on: its address "
        f"was 127.0.0.1, now 127.0.0.2; its port was {port}, now {port + 1}; resume reaches no "
        "other machine under its name (restore the inventory or ssh_config as it was).\n"
    )
    assert journal.load(rollout.rollout_id).hosts["h1"].state == journal.IN_FLIGHT


@lab_only
def test_a_pinned_host_that_presents_another_key_is_refused(
    start_lab: StartLab, tmp_path: Path
) -> None:
    lab = start_lab({"h1": minimal_host(UNTUNED, BLACKWELL, tmp_path / "h1")})
    setup = SshSetup(SshSettings(ssh_config=str(lab.config)))
    first = setup.host(Target("h1", "h1"))
    first.run_script("true")
    known = first.identity()
    first.close()
    assert known.host_key is not None and known.host_key.startswith("SHA256:")
    again = setup.host(Target("h1", "h1"))
    again.pin(known)
    assert again.run_script("echo same").stdout == b"same\n"
    again.close()
    other = setup.host(Target("h1", "h1"))
    other.pin(dataclasses.replace(known, host_key="SHA256:another"))
    with pytest.raises(HostKeyError, match="its host key was SHA256:another, now SHA256:"):
        other.run_script("true")
    moved = setup.host(Target("h1", "h1"))
    moved.pin(dataclasses.replace(known, port=known.port + 1))
    with pytest.raises(HostKeyError, match=f"its port was {known.port + 1}, now {known.port}"):
        moved.run_script("true")


def test_a_hook_whose_description_file_cannot_be_written_fails_its_host_in_a_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full or missing temporary directory raised a bare OSError past the rollout's
    handling: the host's boot configuration stayed staged and the rollout ended in exit 70."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    context = HookContext("gpu1", "10.0.0.1", 1, "r", "run", many_changes(3))
    with pytest.raises(HostError) as refused:
        run_hook("--before-reboot", "true", context, 30)
    assert str(refused.value) == (
        "--before-reboot for gpu1: cannot write TUNE_HOST_JSON_FILE (No such file or directory)."
    )


@pytest.mark.parametrize("name", ["hosts.yml", "hosts.json"])
def test_an_inventory_number_of_thousands_of_digits_is_one_sentence(
    tmp_path: Path, name: str
) -> None:
    """Python builds no integer of more than 4,300 digits from text: the YAML reader raised a
    bare ValueError (exit 70)."""
    huge = "1" * 5000
    text = (
        f"all:\n  hosts:\n    gpu1:\n      ansible_port: {huge}\n"
        if name.endswith("yml")
        else '{"all": {"hosts": ["gpu1"]}, "_meta": {"hostvars": {"gpu1": {"ansible_port": '
        + huge
        + "}}}}"
    )
    result = run_tune("plan", BLACKWELL, "-i", inventory(tmp_path, text, name))
    assert result.code == 64, result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert "internal error" not in result.err and "4300" not in result.err
