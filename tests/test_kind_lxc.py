"""lxc: a container's memlock limit and its NVIDIA device allow lines, main section only.

Cases of a host's files in and a plan out are data, in tests/kinds/lxc/ (`test_kinds_data`);
what stays here are tables of values, the example hosts and behaviour.
"""

from __future__ import annotations

from pathlib import Path

from conftest import TUNED, UNTUNED, by_id, notes, plan_json, write

DEVICES = """\
Character devices:
  1 mem
195 nvidia-frontend
226 drm
509 nvidia-uvm
510 nvidia-caps

Block devices:
  8 sd
511 blkext
"""
MOUNTS = """\
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
"""
BOTH = "name: t\nlxc:\n  - container: '101'\n    memlock: unlimited\n    nvidia_devices: true\n"
ALLOW = "lxc:101:lxc.cgroup2.devices.allow"
MOUNT = "lxc:101:lxc.mount.entry"
MEMLOCK = "lxc:101:lxc.prlimit.memlock"


NODES = ("nvidia0", "nvidia-uvm")


def host(
    tmp_path: Path, config: str, devices: str = DEVICES, nodes: tuple[str, ...] = NODES
) -> Path:
    """A snapshot host; each of `nodes` is a /dev entry (an empty file, a directory for a name
    ending in /), as `tune snapshot` captures device nodes."""
    root = tmp_path / "host"
    write(root, "/proc/devices", devices)
    write(root, "/etc/pve/lxc/101.conf", config)
    for node in nodes:
        write(root, f"/dev/{node}" + ("nvidia-cap1" if node.endswith("/") else ""), "")
    return root


def allow(*majors: int) -> str:
    return "".join(f"lxc.cgroup2.devices.allow: c {m}:* rwm\n" for m in majors)


def test_other_allow_lines_are_not_nvidias(tmp_path: Path) -> None:
    # 226 is drm (an iGPU or a BMC's VGA), 10:200 is /dev/net/tun, b 8:* block: all stay.
    config = (
        "lxc.prlimit.memlock: unlimited\n"
        + allow(195, 226, 509, 510)
        + "lxc.cgroup2.devices.allow: c 10:200 rwm\nlxc.cgroup2.devices.allow: b 8:* rwm\n"
        + "lxc.cgroup2.devices.allow: a\n"
        + MOUNTS
    )
    assert plan_json(tmp_path, host(tmp_path, config), BOTH)["code"] == 0


def test_a_free_dynamic_major_is_only_stale_in_a_container_that_mounts_nvidia(
    tmp_path: Path,
) -> None:
    config = "lxc.prlimit.memlock: unlimited\n" + allow(195, 509, 510, 240)
    unmounted = host(tmp_path, config.replace("240", "250"), nodes=())
    assert plan_json(tmp_path, unmounted, BOTH)["code"] == 0
    config = "lxc.prlimit.memlock: unlimited\n" + allow(195, 509, 510, 250) + MOUNTS
    change = by_id(plan_json(tmp_path, host(tmp_path, config), BOTH))[ALLOW]
    assert change["current"] == ["c 195:* rwm", "c 250:* rwm", "c 509:* rwm", "c 510:* rwm"]


def test_a_block_major_of_the_same_number_does_not_keep_an_allow_line(tmp_path: Path) -> None:
    # 511 is listed, but as a block device: the char allow line is still stale.
    config = "lxc.prlimit.memlock: unlimited\n" + allow(195, 509, 510, 511) + MOUNTS
    change = by_id(plan_json(tmp_path, host(tmp_path, config), BOTH))[ALLOW]
    assert "c 511:* rwm" in change["current"]


def test_only_the_main_section_counts(tmp_path: Path) -> None:
    config = (
        "arch: amd64\n"
        + allow(195, 509, 510)
        + MOUNTS
        + "\n[pre-upgrade]\nlxc.prlimit.memlock: unlimited\n"
        + allow(511)
        + "\n[pve:pending]\nlxc.prlimit.memlock: unlimited\n"
    )
    plan = plan_json(tmp_path, host(tmp_path, config), BOTH)
    assert sorted(by_id(plan)) == [MEMLOCK]
    assert by_id(plan)[MEMLOCK]["current"] is None


def test_memlock_last_line_wins_and_comments_are_ignored(tmp_path: Path) -> None:
    config = (
        "lxc.prlimit.memlock: 65536\n#lxc.prlimit.memlock: unlimited\nlxc.prlimit.memlock: 1024\n"
    )
    text = "name: t\nlxc:\n  - container: '101'\n    memlock: unlimited\n"
    change = by_id(plan_json(tmp_path, host(tmp_path, config), text))[MEMLOCK]
    assert (change["current"], change["desired"]) == ("1024", "unlimited")


def test_missing_config_is_absent(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/proc/devices", DEVICES)
    write(root, "/dev/nvidia0", "")
    plan = plan_json(tmp_path, root, BOTH)
    assert plan["code"] == 2
    assert by_id(plan)[MEMLOCK]["current"] is None
    assert by_id(plan)[ALLOW]["current"] is None
    assert by_id(plan)[MOUNT]["current"] is None
    assert by_id(plan)[ALLOW]["desired"] == ["c 195:* rwm", "c 509:* rwm", "c 510:* rwm"]
    assert "/etc/pve/lxc/101.conf does not exist on this host." in notes(plan)


def test_no_nvidia_driver_loaded(tmp_path: Path) -> None:
    config = "lxc.prlimit.memlock: unlimited\n" + allow(195) + MOUNTS
    plan = plan_json(
        tmp_path, host(tmp_path, config, devices="Character devices:\n  1 mem\n"), BOTH
    )
    change = by_id(plan)[ALLOW]
    assert (change["current"], change["desired"]) == (["c 195:* rwm"], [])
    assert any("lists no NVIDIA character device" in n for n in notes(plan))


def test_plain_lxc_config_by_path(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/proc/devices", DEVICES)
    write(root, "/var/lib/lxc/infer/config", "lxc.prlimit.memlock = unlimited\n")
    text = "name: t\nlxc:\n  - path: /var/lib/lxc/infer/config\n    memlock: unlimited\n"
    assert plan_json(tmp_path, root, text)["code"] == 0


def mount(node: str, create: str = "file") -> str:
    return f"/dev/{node} dev/{node} none bind,optional,create={create}"


def test_a_mount_entry_per_nvidia_node_directories_with_create_dir(tmp_path: Path) -> None:
    nodes = ("nvidia10", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-caps/", "nvidia-modeset")
    config = "lxc.prlimit.memlock: unlimited\n" + allow(195, 509, 510)
    plan = plan_json(tmp_path, host(tmp_path, config, nodes=nodes), BOTH)
    change = by_id(plan)[MOUNT]
    assert (change["current"], change["phase"]) == ([], "reboot")
    # Numbers as numbers: nvidia2 before nvidia10.
    assert change["desired"] == [
        mount("nvidia2"),
        mount("nvidia10"),
        mount("nvidia-caps", "dir"),
        mount("nvidia-modeset"),
        mount("nvidia-uvm"),
        mount("nvidiactl"),
    ]


def test_stale_mount_goes_other_mounts_stay(tmp_path: Path) -> None:
    # nvidia1 was removed (a GPU went to another host); the NFS and the deeper caps mount are
    # the user's own.
    config = (
        "lxc.prlimit.memlock: unlimited\n"
        + allow(195, 509, 510)
        + "lxc.mount.entry: /srv/models srv/models none bind,create=dir\n"
        + "lxc.mount.entry: /dev/nvidia-caps/nvidia-cap1 dev/nvidia-caps/nvidia-cap1 none bind\n"
        + "".join(f"lxc.mount.entry: {mount(n)}\n" for n in ("nvidia1", "nvidia0", "nvidia-uvm"))
    )
    plan = plan_json(tmp_path, host(tmp_path, config), BOTH)
    change = by_id(plan)[MOUNT]
    assert change["current"] == [mount("nvidia0"), mount("nvidia1"), mount("nvidia-uvm")]
    assert change["desired"] == [mount("nvidia0"), mount("nvidia-uvm")]
    assert (
        "/etc/pve/lxc/101.conf mounts /dev/nvidia1, which does not exist on this host now."
        in notes(plan)
    )


def test_no_node_yet_leaves_mounts_alone(tmp_path: Path) -> None:
    # The driver is loaded but nothing created /dev/nvidia* yet: the entries are not stale.
    config = "lxc.prlimit.memlock: unlimited\n" + allow(195, 509, 510) + MOUNTS
    plan = plan_json(tmp_path, host(tmp_path, config, nodes=()), BOTH)
    assert plan["code"] == 0
    assert any("no /dev/nvidia* node exists yet" in n for n in notes(plan))


def test_example_hosts(tmp_path: Path) -> None:
    # The untuned container lacks the nvidia-modeset node the loaded nvidia_modeset created.
    plan = plan_json(tmp_path, UNTUNED, BOTH)
    assert sorted(by_id(plan)) == [ALLOW, MOUNT, MEMLOCK]
    added = set(by_id(plan)[MOUNT]["desired"]) - set(by_id(plan)[MOUNT]["current"])
    assert added == {mount("nvidia-modeset")}
    assert plan_json(tmp_path, TUNED, BOTH)["code"] == 0
