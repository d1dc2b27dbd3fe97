"""The LXC config editor under hypothesis: for random configs (comments, blank lines, duplicate
keys, snapshot sections) and random sets of /dev/nvidia* nodes, apply's edits then their undo
give back the original bytes, and an edit changes nothing outside the lines it owns (memlock,
NVIDIA allow lines, NVIDIA mount entries). Pure: the steps run on in-memory text."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from lxc_oracle import lxc_refuses

from reconciler.core.files import Files
from reconciler.core.schema import validate
from reconciler.facts import lxc as fmt
from reconciler.kinds.lxc import KIND, LxcEntry
from reconciler.steps.ops import PutFile

CONFIG = "/etc/pve/lxc/101.conf"
PLAIN = "/var/lib/lxc/infer/config"
DEVICES = (
    "Character devices:\n  1 mem\n195 nvidia-frontend\n226 drm\n509 nvidia-uvm\n510 nvidia-caps\n"
)
NODES = st.sets(
    st.sampled_from(["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm", "/dev/nvidia-caps/"])
)

# `{=}` is the file's own separator (`: ` in Proxmox's, ` = ` in LXC's); `{x}` the other one.
MAIN_LINES = st.sampled_from(
    [
        "# a comment\n",
        "\n",
        "arch: amd64\n",
        "cores: 8\n",
        "lxc.prlimit.memlock{=}65536\n",
        "lxc.prlimit.memlock = 1024:2048\n",
        "lxc.cgroup2.devices.allow{=}c 195:* rwm\n",
        "lxc.cgroup2.devices.allow{=}c 195:* mrw # the frontend\n",
        "lxc.cgroup2.devices.allow{=}c 511:* rwm\n",
        "lxc.cgroup2.devices.allow{=}c 226:0 rwm\n",
        "lxc.cgroup2.devices.allow{=}c 10:200 rwm\n",
        "# lxc.cgroup2.devices.allow{=}c 195:* rwm\n",
        "lxc.mount.entry{=}/dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n",
        "lxc.mount.entry{=}/dev/nvidia0  dev/nvidia0\tnone bind,optional,create=file 0 0\n",
        "lxc.mount.entry{=}/dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n",
        "lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,create=file\n",
        "lxc.mount.entry{=}/dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir\n",
        "lxc.mount.entry{=}/dev/nvidia-caps/nvidia-cap1 dev/nvidia-caps/nvidia-cap1 none bind\n",
        "lxc.mount.entry{=}/srv/models srv/models none bind,create=dir\n",
        "# lxc.mount.entry{=}/dev/nvidia2 dev/nvidia2 none bind,optional,create=file\n",
        "lxc.mount.entry{x}/dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n",
        "unknown.key: value with  spaces  \n",
    ]
)
SNAPSHOT_LINES = st.sampled_from(
    [
        "lxc.prlimit.memlock: 1\n",
        "lxc.cgroup2.devices.allow: c 500:* rwm\n",
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n",
        "snaptime: 1700000000\n",
        "\n",
        "# snapshot comment\n",
    ]
)
SEPARATORS = {CONFIG: (": ", " = "), PLAIN: (" = ", ": ")}


@st.composite
def configs(draw: st.DrawFn, path: str) -> str:
    """A Proxmox config with snapshot sections, or a plain LXC one (in which a `[name]` line is
    one more line LXC skips) that LXC reads whole: no line in Proxmox's syntax."""
    own, other = SEPARATORS[path]
    lines = draw(st.lists(MAIN_LINES, max_size=12))
    if path == PLAIN:
        lines = [line for line in lines if "{x}" not in line and "65536" not in line]
    text = "".join(line.replace("{=}", own).replace("{x}", other) for line in lines)
    if path == CONFIG:
        for index in range(draw(st.integers(0, 2))):
            text += f"[snap{index}]\n" + "".join(draw(st.lists(SNAPSHOT_LINES, max_size=4)))
    if text and draw(st.booleans()):
        text = text.rstrip("\n")  # a file without its final newline
    return text


def entries(path: str, memlock: bool, devices: bool) -> list[LxcEntry]:
    data: dict[str, object] = {"container": "101"} if path == CONFIG else {"path": path}
    if memlock:
        data["memlock"] = "unlimited"
    if devices:
        data["nvidia_devices"] = True
    return [validate(LxcEntry, data)]


def owned(line: str, syntax: fmt.Syntax) -> bool:
    """Whether an edit may touch `line`: memlock, any allow line, an NVIDIA node's mount."""
    config = fmt.parse(line, syntax)
    keys = {i.key for i in config.items}
    return bool(keys & {fmt.MEMLOCK, fmt.ALLOW}) or bool(fmt.nvidia_mount_lines(config))


def outside(text: str, syntax: fmt.Syntax) -> tuple[list[str], str]:
    """The main-section lines no edit owns, and everything from the first snapshot section."""
    config = fmt.parse(text, syntax)
    main = config.lines[: config.main_end]
    kept = [line.rstrip("\n") for line in main if not owned(line, syntax)]
    return kept, "".join(config.lines[config.main_end :])


def observed(path: str, config: str, nodes: set[str]) -> Files:
    return Files(
        contents={fmt.PROC_DEVICES: DEVICES.encode(), path: config.encode()},
        nodes={fmt.NVIDIA_NODES: tuple(sorted(nodes))},
    )


@settings(max_examples=80, deadline=None)
@given(st.data(), st.sampled_from([CONFIG, PLAIN]), NODES, st.booleans(), st.booleans())
def test_edit_then_undo_is_byte_identical_and_touches_only_owned_keys(
    data: st.DataObject, path: str, nodes: set[str], memlock: bool, devices: bool
) -> None:
    config = data.draw(configs(path))
    syntax = fmt.syntax_of(path, config)
    spec = entries(path, memlock, devices)
    files = observed(path, config, nodes)
    changes = [c for c in KIND.compare(spec, files).changes if c.current != c.desired]
    steps = [KIND.step(spec, change, files) for change in changes]
    text = config
    for step in steps:
        assert step.restored == text
        (op,) = step.do
        assert isinstance(op, PutFile)
        text = op.data.decode()
        assert step.expect == text
    after = KIND.compare(spec, observed(path, text, nodes))
    assert all(c.current == c.desired for c in after.changes)
    assert outside(text, syntax) == outside(config, syntax)
    # Every line the edit wrote, the file's own reader takes; none is read twice.
    wrote = fmt.parse(text, syntax)
    refused = [u.message for u in fmt.parse(config, syntax).unreadable]
    assert [u.message for u in wrote.unreadable] == refused
    for key in (fmt.ALLOW, fmt.MOUNT):
        read = [fmt.meaning(key, v) for v in wrote.values(key)]
        before = [fmt.meaning(key, v) for v in fmt.parse(config, syntax).values(key)]
        assert len(read) - len(set(read)) <= len(before) - len(set(before))
    if path == PLAIN:  # LXC itself reads what tune wrote
        with tempfile.TemporaryDirectory() as scratch:
            assert lxc_refuses(config, Path(scratch)) is None
            assert lxc_refuses(text, Path(scratch)) is None
    for step in reversed(steps):
        (op,) = step.undo
        assert isinstance(op, PutFile)
        text = op.data.decode()
        assert step.restored == text
    assert text == config
