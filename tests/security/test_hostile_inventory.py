"""A hostile inventory, a hostile neighbour on the controller: values of an Ansible inventory
made to run a command on the controller (ssh_config's `Match exec %h`), to log in as another
user, to exhaust the controller's memory (a key file that is /dev/zero, a FIFO, a YAML alias
bomb), to forge lines on the operator's terminal; a rollout resumed against another machine; a
hook's children that outlive it. Each is refused with one sentence, never exit 70, never a
hang."""

from __future__ import annotations

import json
import os
import socket
import stat
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import BLACKWELL, run_tune
from test_bounds import tune_in_child

from reconciler.errors import InventoryError, UsageError
from reconciler.hosts.inventory import inventory_targets
from reconciler.hosts.targets import Target, parse_host

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
