"""Ansible inventories read as Ansible reads them: group_vars/ and host_vars/ beside them,
directories of sources, the JSON of `ansible-inventory --list`, and --limit patterns. Where
ansible-core is installed (the test extras install it), `ansible-inventory` itself is the oracle
for every host's variables and for which hosts a --limit selects."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import BLACKWELL, TUNED, UNTUNED, run_tune
from ssh_fixture import StartLab, sshd_available

from reconciler.core.errors import InventoryError
from reconciler.hosts.inventory import inventory_targets, load_inventory
from reconciler.hosts.inventory.values import Unknowable
from reconciler.hosts.targets import Target

ANSIBLE_INVENTORY = shutil.which(
    "ansible-inventory", path=str(Path(sys.executable).parent)
) or shutil.which("ansible-inventory")
needs_ansible = pytest.mark.skipif(
    ANSIBLE_INVENTORY is None, reason="needs ansible-core (pip install -e '.[test]')"
)

VAULTED = "!vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  62313365396662343061393464336163\n"

# Each inventory: relative path -> text. `inventory` is what -i names.
INVENTORIES: dict[str, dict[str, str]] = {
    "ini-with-vars-directories": {
        "hosts.ini": (
            "lone ansible_host=127.0.0.9\n"
            "[gpu]\n"
            "g[1:2] ansible_user=ops\n"
            "g3:2200\n"
            "[blackwell]\n"
            "g2\n"
            "[gpu:vars]\n"
            "ansible_become=yes\n"
            "[prod:children]\n"
            "gpu\n"
        ),
        "group_vars/all.yml": f"ansible_port: 5\nansible_user: nobody\ndb_password: {VAULTED}",
        "group_vars/gpu/10-port.yml": "ansible_port: 7\n",
        "group_vars/gpu/20-user": "ansible_user: root\nansible_port: 8\n",
        "group_vars/gpu/notes.txt": "ansible_port: 1\n",
        "group_vars/prod.yaml": "ansible_port: 6\ntier: prod\n",
        "group_vars/blackwell.json": '{"ansible_ssh_private_key_file": "~/.ssh/bw"}',
        "group_vars/ungrouped.yml": "ansible_user: lonely\n",
        "host_vars/g2.yaml": "ansible_port: 9\n",
        "host_vars/lone/main.yml": "ansible_host: 127.0.0.10\n",
    },
    "yaml-children-and-priority": {
        "inventory.yml": (
            "all:\n"
            "  vars:\n"
            "    ansible_user: root\n"
            "  hosts:\n"
            "    lab-1:\n"
            "      ansible_host: 127.0.0.2\n"
            "  children:\n"
            "    gpu:\n"
            "      vars:\n"
            "        ansible_port: 2222\n"
            "      hosts:\n"
            "        node[a:c]:\n"
            "      children:\n"
            "        blackwell:\n"
            "          hosts:\n"
            "            nodeb:\n"
            "    rack1:\n"
            "      vars:\n"
            "        ansible_port: 3333\n"
            "        ansible_group_priority: 10\n"
            "      hosts:\n"
            "        nodea:\n"
            "    rack2:\n"
            "      vars:\n"
            "        ansible_port: 4444\n"
            "      hosts:\n"
            "        nodea:\n"
        ),
        "group_vars/blackwell.yml": "ansible_port: 2200\n",
        "group_vars/rack2.yml": "ansible_user: rack2\n",
    },
    "directory": {
        "inventory/10-hosts.ini": "[gpu]\ng1\ng2 ansible_port=2202\n",
        "inventory/20-more.yml": "cpu:\n  hosts:\n    c1:\n      ansible_host: 127.0.0.5\n",
        "inventory/README.md": "[not]\nan inventory\n",
        "inventory/nested/30-edge.ini": "[edge]\ne1\n",
        "inventory/group_vars/gpu.yml": "ansible_port: 7\n",
        "inventory/group_vars/all.yml": "ansible_user: ops\n",
        "inventory/host_vars/e1.yml": "ansible_user: edge\n",
    },
}
ENTRY = {
    "ini-with-vars-directories": "hosts.ini",
    "yaml-children-and-priority": "inventory.yml",
    "directory": "inventory",
}


def lay_out(base: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = base / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return base


def ansible_inventory(tmp_path: Path, *args: str | Path) -> dict[str, Any]:
    assert ANSIBLE_INVENTORY is not None
    home = tmp_path / "ansible-home"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_CONFIG": str(home / "none.cfg"),
        "ANSIBLE_HOST_PATTERN_MISMATCH": "ignore",
    }
    done = subprocess.run(
        [ANSIBLE_INVENTORY, *map(str, args), "--list"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    listing: dict[str, Any] = json.loads(done.stdout)
    return listing


def comparable(value: Any) -> Any:
    """Ansible's INI values are Python literals, tune's are the text; a vaulted value is
    {"__ansible_vault": ...} there and a templated one its text, where tune has `Unknowable`."""
    if isinstance(value, Unknowable) or (isinstance(value, dict) and "__ansible_vault" in value):
        return "<unknowable>"
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        return "<unknowable>"
    if isinstance(value, dict):
        return {str(k): comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return str(value)


def listed_hosts(listing: dict[str, Any]) -> set[str]:
    return {h for name, g in listing.items() if name != "_meta" for h in g.get("hosts", [])}


@needs_ansible
@pytest.mark.parametrize("case", list(INVENTORIES))
def test_every_host_s_variables_are_those_ansible_inventory_lists(
    tmp_path: Path, case: str
) -> None:
    source = lay_out(tmp_path, INVENTORIES[case]) / ENTRY[case]
    expected = ansible_inventory(tmp_path, "-i", source)["_meta"]["hostvars"]
    inventory = load_inventory(source)
    assert set(inventory.hosts) == set(expected)
    for host, variables in expected.items():
        ours = {k: comparable(v) for k, v in inventory.variables(host).items()}
        assert ours == {k: comparable(v) for k, v in variables.items()}, host


KUBESPRAY = Path(__file__).parent / "corpus/kubespray/inventory/sample"


def kubespray(tmp_path: Path) -> Path:
    """kubespray's sample inventory, its example nodes uncommented."""
    copy = tmp_path / "kubespray"
    shutil.copytree(KUBESPRAY, copy)
    ini = copy / "inventory.ini"
    lines = ini.read_text().splitlines()
    ini.write_text(
        "\n".join(line.removeprefix("# ") if line.startswith("# node") else line for line in lines)
        + "\n"
    )
    return ini


@needs_ansible
def test_kubespray_s_sample_inventory_reads_as_ansible_reads_it(tmp_path: Path) -> None:
    source = kubespray(tmp_path)
    expected = ansible_inventory(tmp_path, "-i", source)["_meta"]["hostvars"]
    inventory = load_inventory(source)
    assert set(inventory.hosts) == set(expected) == {f"node{n}" for n in range(1, 7)}
    for host, variables in expected.items():
        ours = {k: comparable(v) for k, v in inventory.variables(host).items()}
        assert ours == {k: comparable(v) for k, v in variables.items()}, host


def test_kubespray_s_templates_do_not_stop_tune_where_it_connects(tmp_path: Path) -> None:
    targets = {t.name: t for t in inventory_targets(kubespray(tmp_path), "etcd:kube_node[0]")}
    assert targets == {
        "node1": Target("node1", "95.54.0.12"),
        "node2": Target("node2", "95.54.0.13"),
        "node3": Target("node3", "95.54.0.14"),
        "node4": Target("node4", "95.54.0.15"),
    }


def test_group_vars_and_host_vars_decide_where_tune_connects(tmp_path: Path) -> None:
    case = "ini-with-vars-directories"
    source = lay_out(tmp_path, INVENTORIES[case]) / ENTRY[case]
    targets = {t.name: t for t in inventory_targets(source)}
    assert targets == {
        "lone": Target("lone", "127.0.0.10", "lonely", 5),
        # The inventory's own host variable beats group_vars; host_vars beat both.
        "g1": Target("g1", "g1", "ops", 8, sudo=True),
        "g2": Target("g2", "g2", "ops", 9, "~/.ssh/bw", sudo=True),
        "g3": Target("g3", "g3", "root", 2200, sudo=True),
    }


LIMITS = [
    "gpu",
    "gpu:!blackwell",
    "prod:&blackwell",
    "!gpu",
    "g*",
    "~g[12]$",
    "gpu[0]",
    "gpu[1:]",
    "gpu[-1]",
    "lone,g3",
    "all",
    "*",
    "ungrouped",
    "@limit.txt",
]


@needs_ansible
@pytest.mark.parametrize("limit", LIMITS)
def test_limit_selects_the_hosts_ansible_selects(tmp_path: Path, limit: str) -> None:
    case = "ini-with-vars-directories"
    source = lay_out(tmp_path, INVENTORIES[case]) / ENTRY[case]
    (tmp_path / "limit.txt").write_text("g1\nblackwell\n")  # the working directory's
    expected = listed_hosts(ansible_inventory(tmp_path, "-i", source, "--limit", limit))
    assert {t.name for t in inventory_targets(source, limit)} == expected


def test_limit_patterns_without_ansible(tmp_path: Path) -> None:
    case = "ini-with-vars-directories"
    source = lay_out(tmp_path, INVENTORIES[case]) / ENTRY[case]
    (tmp_path / "limit.txt").write_text("g1\n\nblackwell\n")

    def names(limit: str) -> list[str]:
        return [t.name for t in inventory_targets(source, limit)]

    assert names("gpu:!blackwell") == ["g1", "g3"]
    assert names("prod:&blackwell") == ["g2"]
    assert names("~g[12]$") == ["g1", "g2"]
    assert names("gpu[1:]") == ["g2", "g3"]
    assert names(f"@{tmp_path / 'limit.txt'}") == ["g1", "g2"]
    with pytest.raises(InventoryError, match="'gpu-typo' matches no host or group"):
        names("gpu,gpu-typo")
    with pytest.raises(InventoryError, match="not a valid pattern"):
        names("~g[")


@needs_ansible
def test_the_json_of_ansible_inventory_list_reads_like_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = "ini-with-vars-directories"
    source = lay_out(tmp_path / "src", INVENTORIES[case]) / ENTRY[case]
    listing = json.dumps(ansible_inventory(tmp_path, "-i", source))
    (tmp_path / "hosts.json").write_text(listing)
    expected = {t.name: t for t in inventory_targets(source)}
    assert {t.name: t for t in inventory_targets(tmp_path / "hosts.json")} == expected
    monkeypatch.setattr(sys, "stdin", io.StringIO(listing))
    assert {t.name: t for t in inventory_targets("-")} == expected


def test_a_vaulted_connection_variable_in_the_json_is_named() -> None:
    listing = {
        "_meta": {"hostvars": {"g1": {"ansible_host": {"__ansible_vault": "$ANSIBLE_VAULT;1.1"}}}},
        "all": {"children": ["gpu"]},
        "gpu": {"hosts": ["g1"]},
    }
    sys_stdin = sys.stdin
    try:
        sys.stdin = io.StringIO(json.dumps(listing))
        with pytest.raises(InventoryError, match="ansible_host of g1 is encrypted"):
            inventory_targets("-")
    finally:
        sys.stdin = sys_stdin


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"group_vars/gpu.yml": f"ansible_host: {VAULTED}"},
            r"group_vars/gpu.yml:1: ansible_host of g1 is encrypted with Ansible Vault",
        ),
        (
            {"group_vars/gpu.yml": "x: 1\nansible_port: '{{ base_port + 1 }}'\n"},
            r"group_vars/gpu.yml:2: ansible_port of g1 is a Jinja template",
        ),
        (
            {"host_vars/g1.yml": "$ANSIBLE_VAULT;1.1;AES256\n6231\n"},
            r"host_vars/g1.yml:1: the file is encrypted with Ansible Vault",
        ),
        (
            {"group_vars/all.yml": "ansible_user: !lookup env USER\n"},
            r"group_vars/all.yml:1: could not determine a constructor for the tag '!lookup'",
        ),
        (
            {"group_vars/gpu.yml": "- a list\n"},
            r"group_vars/gpu.yml: expected variables \(a mapping\)",
        ),
        (
            {"group_vars/gpu.yml": "ansible_ssh_common_args: -o ProxyJump=bastion\n"},
            r"g1: ansible_ssh_common_args is set; tune does not pass options to ssh",
        ),
        (
            {"group_vars/gpu.yml": "ansible_connection: docker\n"},
            r"g1: ansible_connection=docker; tune connects over SSH",
        ),
        (
            {"group_vars/gpu.yml": "ansible_become: true\nansible_become_user: postgres\n"},
            r"g1: ansible_become_user=postgres; tune works as root",
        ),
        (
            {"group_vars/gpu.yml": "ansible_become: maybe\n"},
            r"g1: ansible_become 'maybe' is not a boolean",
        ),
    ],
)
def test_what_tune_cannot_read_is_an_error_naming_file_and_line(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    source = lay_out(tmp_path, {"hosts.ini": "[gpu]\ng1\n", **files}) / "hosts.ini"
    with pytest.raises(InventoryError, match=message):
        inventory_targets(source)


def test_a_vaulted_variable_tune_does_not_use_is_no_obstacle(tmp_path: Path) -> None:
    files = {"hosts.ini": "[gpu]\ng1\n", "group_vars/all.yml": f"db_password: {VAULTED}"}
    source = lay_out(tmp_path, files) / "hosts.ini"
    assert inventory_targets(source) == [Target("g1", "g1")]


def test_scripts_and_plugins_are_never_run_and_say_what_to_do(tmp_path: Path) -> None:
    script = tmp_path / "ec2.py"
    script.write_text("#!/usr/bin/env python3\nprint('{}')\n")
    script.chmod(0o755)
    with pytest.raises(InventoryError, match=r"is executable.*ansible-inventory -i .*--list"):
        inventory_targets(script)
    plugin = tmp_path / "aws_ec2.yml"
    plugin.write_text("plugin: amazon.aws.aws_ec2\nregions: [eu-west-1]\n")
    with pytest.raises(InventoryError, match=r"inventory plugin 'amazon\.aws\.aws_ec2'"):
        inventory_targets(plugin)


def test_cli_takes_i_a_directory_and_names_an_unreadable_inventory(tmp_path: Path) -> None:
    lay_out(tmp_path, {"inv/hosts": "[gpu]\ng1\n", "inv/group_vars/gpu.yml": "ansible_port: x\n"})
    result = run_tune("plan", BLACKWELL, "-i", tmp_path / "inv")
    assert result.code == 64
    assert result.err == f"{tmp_path / 'inv'}: g1: ansible_port 'x' is not a number.\n"


@pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")
def test_an_inventory_with_group_vars_connects_where_ansible_would(
    tmp_path: Path, start_lab: StartLab
) -> None:
    lab = start_lab({"h1": TUNED, "h2": UNTUNED})
    inventory = lay_out(
        tmp_path,
        {
            "inv/hosts.ini": "[gpu]\ngpu-a ansible_host=127.0.0.2\ngpu-b ansible_host=127.0.0.3\n",
            # Each lab host listens on its own port: only group_vars and host_vars say which.
            "inv/group_vars/gpu.yml": f"ansible_port: {lab.port['h1']}\nansible_user: root\n",
            "inv/host_vars/gpu-b.yml": f"ansible_port: {lab.port['h2']}\n",
        },
    )
    result = run_tune(
        "plan", BLACKWELL, "-i", inventory / "inv", "--ssh-config", lab.config, "--format", "json"
    )
    assert result.code == 2, result.err
    assert [(e["target"], e["status"]) for e in json.loads(result.out)] == [
        ("gpu-a", "in-sync"),
        ("gpu-b", "changes"),
    ]
    # The audit works across the same hosts: one object per host, as one host's audit prints.
    audited = run_tune(
        "audit", "-i", inventory / "inv", "--ssh-config", lab.config, "--format", "json"
    )
    assert audited.code == 2, audited.err
    objects = json.loads(audited.out)
    assert [(o["target"], o["status"], o["kind"]) for o in objects] == [
        ("gpu-a", "clean", "audit"),
        ("gpu-b", "actionable", "audit"),
    ]
    assert {"host", "findings", "good", "not_issues"} <= set(objects[1])


def test_a_directory_that_links_back_up_is_named_not_walked_for_ever(tmp_path: Path) -> None:
    source = lay_out(tmp_path, {"inv/hosts": "[gpu]\ng1\n"}) / "inv"
    (source / "loop").symlink_to(source)
    with pytest.raises(InventoryError, match="a link back to a directory of the inventory"):
        inventory_targets(source)


def test_the_ssh_spellings_win_as_in_ansible_s_ssh_connection(tmp_path: Path) -> None:
    """ansible.builtin.ssh lists `vars: [ansible_host, ansible_ssh_host]` (and likewise for
    port, user and key); its config manager lets the last one defined win."""
    files = {
        "hosts.ini": "[gpu]\ng1\n",
        "group_vars/gpu.yml": (
            "ansible_host: 10.0.0.1\nansible_ssh_host: 127.0.0.7\n"
            "ansible_port: 22\nansible_ssh_port: 2207\n"
            "ansible_user: a\nansible_ssh_user: b\n"
            "ansible_ssh_private_key_file: ~/.ssh/ssh\nansible_private_key_file: ~/.ssh/plain\n"
            f"ansible_become_user: {VAULTED}"
        ),
    }
    source = lay_out(tmp_path, files) / "hosts.ini"
    assert inventory_targets(source) == [Target("g1", "127.0.0.7", "b", 2207, "~/.ssh/ssh")]
