"""Real container configs nobody here wrote (tests/corpus/pve-container, tests/corpus/lxc; see
their SOURCE.md), through both engines: a plan adds NVIDIA allow and mount lines, apply writes
them in the file's own syntax and touches only the main section, the plan is then in sync, and
rollback gives back every byte. LXC itself (`lxc-info`) reads each plain LXC config before and
after."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write
from lxc_oracle import lxc_refuses
from small_host import tree

from reconciler.facts import lxc as fmt
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile

from .drive import Engine

CORPUS = Path(__file__).resolve().parent.parent / "corpus"


def configs(source: str) -> list[Path]:
    """The corpus's configs, one per distinct content (pve-container's expected outputs often
    repeat its inputs)."""
    found: dict[bytes, Path] = {}
    for path in sorted((CORPUS / source).rglob("*")):
        if path.is_file() and path.suffix != ".md":
            found.setdefault(path.read_bytes(), path)
    return sorted(found.values())


PVE = configs("pve-container")
LXC = configs("lxc")
DEVICES = "Character devices:\n  1 mem\n195 nvidia-frontend\n509 nvidia-uvm\n510 nvidia-caps\n"
NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")
PROXMOX_CONFIG = "/etc/pve/lxc/101.conf"
PLAIN_CONFIG = "/var/lib/lxc/corpus/config"


def lxc_changes(root: Path, profile: Path) -> list[str]:
    loaded = load_profile(profile)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, False), False)
    return sorted(c.id for c in plan.changes if c.kind == "lxc")


@pytest.mark.parametrize("source", PVE + LXC, ids=[str(p.relative_to(CORPUS)) for p in PVE + LXC])
def test_corpus_config_applies_in_its_syntax_and_rolls_back(
    engine: Engine, scratch: Path, source: Path
) -> None:
    plain = source in LXC
    path = PLAIN_CONFIG if plain else PROXMOX_CONFIG
    original = source.read_bytes()
    if plain:
        assert lxc_refuses(original, scratch) is None
    root = scratch / "host"
    write(root, path, original)
    write(root, fmt.PROC_DEVICES, DEVICES)
    for node in NODES:
        write(root, node, "")
    profile = scratch / "p.yaml"
    which = f"path: {path}" if plain else "container: '101'"
    profile.write_text(f"name: c\nlxc:\n  - {which}\n    nvidia_devices: true\n")
    before = tree(root)
    name = path if plain else "101"
    assert lxc_changes(root, profile) == [f"lxc:{name}:{fmt.ALLOW}", f"lxc:{name}:{fmt.MOUNT}"]

    assert engine.apply(root, profile, phase="reboot", runtime_only=False, reboot_phase=True)
    assert lxc_changes(root, profile) == []
    written = (root / path.lstrip("/")).read_text()
    syntax = fmt.syntax_of(path, written)
    assert syntax is (fmt.Syntax.LXC if plain else fmt.Syntax.PROXMOX)
    now, then = fmt.parse(written, syntax), fmt.parse(original.decode(), syntax)
    assert now.lines[now.main_end :] == then.lines[then.main_end :]  # snapshots, pending
    # Every line of the original is still there, byte for byte (a last line gains the newline
    # that separates it from what follows), and what came is the wanted lines in this syntax.
    kept = [line.rstrip("\n") for line in then.lines]
    came = [line for line in now.lines if line.rstrip("\n") not in kept]
    assert [line.rstrip("\n") for line in now.lines if line not in came] == kept
    assert came == [
        syntax.line(key, value)
        for key, values in (
            (fmt.ALLOW, [fmt.allow_line(m) for m in (195, 509, 510)]),
            (fmt.MOUNT, fmt.mount_lines(NODES)),
        )
        for value in values
    ]
    said = lxc_refuses(written, scratch)
    if plain:
        assert said is None
    else:  # LXC refuses Proxmox's `lxc.key: value` lines, and tune knows it does
        (first, *_) = fmt.parse(written, fmt.Syntax.LXC).unreadable
        assert first.message in (said or "")

    engine.rollback(root)
    assert tree(root) == before
