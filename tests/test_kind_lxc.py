"""lxc: a container's memlock limit and its NVIDIA device allow lines, main section only.

Cases of a host's files in and a plan out are data, in tests/kinds/lxc/ (`test_kinds_data`);
what stays here are tables of values, the example hosts and behaviour.
"""

from __future__ import annotations

from pathlib import Path

from conftest import TUNED, UNTUNED, by_id, plan_json

BOTH = "name: t\nlxc:\n  - container: '101'\n    memlock: unlimited\n    nvidia_devices: true\n"
ALLOW = "lxc:101:lxc.cgroup2.devices.allow"
MOUNT = "lxc:101:lxc.mount.entry"
MEMLOCK = "lxc:101:lxc.prlimit.memlock"


def mount(node: str, create: str = "file") -> str:
    return f"/dev/{node} dev/{node} none bind,optional,create={create}"


def test_example_hosts(tmp_path: Path) -> None:
    # The untuned container lacks the nvidia-modeset node the loaded nvidia_modeset created.
    plan = plan_json(tmp_path, UNTUNED, BOTH)
    assert sorted(by_id(plan)) == [ALLOW, MOUNT, MEMLOCK]
    added = set(by_id(plan)[MOUNT]["desired"]) - set(by_id(plan)[MOUNT]["current"])
    assert added == {mount("nvidia-modeset")}
    assert plan_json(tmp_path, TUNED, BOTH)["code"] == 0
