"""Host strings and Ansible inventories as operators already write them."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.core.errors import InventoryError, UsageError
from reconciler.hosts.inventory import inventory_targets
from reconciler.hosts.targets import Target, parse_host


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("gpu-node-1", Target("gpu-node-1", "gpu-node-1")),
        ("root@gpu-node-1", Target("root@gpu-node-1", "gpu-node-1", "root")),
        ("ops@10.0.0.7:2222", Target("ops@10.0.0.7:2222", "10.0.0.7", "ops", 2222)),
        ("[fd00::7]:22", Target("[fd00::7]:22", "fd00::7", None, 22)),
        ("admin@[fd00::7]", Target("admin@[fd00::7]", "fd00::7", "admin")),
    ],
)
def test_host_strings(spec: str, expected: Target) -> None:
    assert parse_host(spec) == expected


@pytest.mark.parametrize("spec", ["", "a@", "host:port", "host:70000", "a b", "u@h@x"])
def test_bad_host_strings_are_usage_errors(spec: str) -> None:
    with pytest.raises(UsageError):
        parse_host(spec)


INI = """\
# GPU fleet
bastion ansible_host=203.0.113.5

[gpu]
gpu[01:03].dc1 ansible_user=ops
gpu-big ansible_host=10.0.0.9 ansible_port=2222 ansible_ssh_private_key_file=~/.ssh/big

[gpu:vars]
ansible_user=root
ansible_port=22

[blackwell]
gpu-big

[blackwell:vars]
ansible_port=2200

[prod:children]
gpu

[all:vars]
ansible_user=nobody
"""


def test_ini_inventory_groups_ranges_and_variable_precedence(tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text(INI)
    targets = {t.name: t for t in inventory_targets(path)}
    assert list(targets) == ["bastion", "gpu01.dc1", "gpu02.dc1", "gpu03.dc1", "gpu-big"]
    assert targets["bastion"] == Target("bastion", "203.0.113.5", "nobody")
    # The host's own variable beats its group's.
    assert targets["gpu02.dc1"] == Target("gpu02.dc1", "gpu02.dc1", "ops", 22)
    # The host's ansible_port wins over every group; a child group's vars beat its parent's.
    assert targets["gpu-big"] == Target("gpu-big", "10.0.0.9", "root", 2222, "~/.ssh/big")


def test_limit_takes_hosts_groups_patterns_and_exclusions(tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text(INI)

    def names(limit: str) -> list[str]:
        return [t.name for t in inventory_targets(path, limit)]

    assert names("blackwell") == ["gpu-big"]
    assert names("prod") == ["gpu01.dc1", "gpu02.dc1", "gpu03.dc1", "gpu-big"]
    assert names("prod:!blackwell") == ["gpu01.dc1", "gpu02.dc1", "gpu03.dc1"]
    assert names("gpu0*,bastion") == ["bastion", "gpu01.dc1", "gpu02.dc1", "gpu03.dc1"]
    assert names("all:&blackwell") == ["gpu-big"]
    with pytest.raises(InventoryError, match="'nothing' matches no host or group"):
        inventory_targets(path, "nothing")


YAML_INVENTORY = """\
all:
  vars:
    ansible_user: root
  hosts:
    lab-1:
      ansible_host: 127.0.0.2
  children:
    gpu:
      vars:
        ansible_port: 2222
      hosts:
        node[a:c]:
        node-x:
          ansible_user: ops
      children:
        blackwell:
          hosts:
            node-x:
          vars:
            ansible_port: 2200
"""


def test_yaml_inventory_is_read_like_ansible(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(YAML_INVENTORY)
    targets = {t.name: t for t in inventory_targets(path)}
    assert list(targets) == ["lab-1", "nodea", "nodeb", "nodec", "node-x"]
    assert targets["lab-1"] == Target("lab-1", "127.0.0.2", "root")
    assert targets["nodeb"] == Target("nodeb", "nodeb", "root", 2222)
    assert targets["node-x"] == Target("node-x", "node-x", "ops", 2200)
    assert [t.name for t in inventory_targets(path, "blackwell")] == ["node-x"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[gpu\nhost\n", "unclosed section"),
        ("[gpu:weird]\n", "unknown section kind"),
        ("[gpu]\nhost novalue\n", "expected key=value"),
        ("[gpu]\nhost ansible_port=ssh\n", "not a number"),
        ("all:\n  hosts: [a, b]\n", "hosts of group 'all' must be a mapping"),
        ("all:\n  members: {}\n", "unknown keys members"),
    ],
)
def test_broken_inventories_say_where(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "inventory"
    path.write_text(text)
    with pytest.raises(InventoryError, match=message):
        inventory_targets(path)
