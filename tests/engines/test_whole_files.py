"""Files tune rewrites are read whole, through both engines: a Proxmox container config far
past the 64 KiB that observation reads of a kernel file (a long description, many snapshot
sections) is applied with its tail intact and rolled back to the same bytes; one past the bound
tune reads of a file it edits is refused with its name and size, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write
from small_host import tree
from test_shell_read import LocalShellHost

from reconciler.apply.sh_engine import apply_remote
from reconciler.apply.work import not_read_whole, prepare
from reconciler.core.changes import Change, Phase
from reconciler.core.errors import HostChanged, HostError
from reconciler.core.files import MAX_EDITED_BYTES, MAX_FILE_BYTES, Request
from reconciler.facts import lxc as fmt
from reconciler.hosts.directory import SnapshotHost
from reconciler.profile.load import load_profile
from reconciler.steps.ops import Probe, PutFile, Read, Step

from .drive import Engine

CONFIG = "/etc/pve/lxc/101.conf"
DEVICES = "Character devices:\n  1 mem\n195 nvidia-frontend\n509 nvidia-uvm\n"
NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")


def proxmox_config(size: int) -> bytes:
    """A container config of at least `size` bytes: its main section, then as many snapshot
    sections as it takes, each with its own description (Proxmox's `#` lines)."""
    parts = ["arch: amd64\ncores: 8\nhostname: infer\nmemory: 65536\nostype: debian\n"]
    length = len(parts[0])
    while length < size:
        n = len(parts)
        parts.append(
            f"\n[snap{n:05d}]\n#before the driver upgrade {n}\narch: amd64\ncores: 8\n"
            f"hostname: infer\nmemory: 65536\nsnaptime: {1700000000 + n}\n"
        )
        length += len(parts[-1])
    return "".join(parts).encode()


def _host(scratch: Path, config: bytes) -> tuple[Path, Path]:
    root = scratch / "host"
    write(root, CONFIG, config)
    write(root, fmt.PROC_DEVICES, DEVICES)
    for node in NODES:
        write(root, node, "")
    profile = scratch / "p.yaml"
    profile.write_text(
        "name: big\nlxc:\n  - container: '101'\n    memlock: unlimited\n    nvidia_devices: true\n"
    )
    return root, profile


def test_a_config_past_the_read_cap_is_applied_whole_and_rolled_back_byte_for_byte(
    engine: Engine, scratch: Path
) -> None:
    original = proxmox_config(3 * MAX_FILE_BYTES)
    root, profile = _host(scratch, original)
    before = tree(root)

    assert engine.apply(root, profile, phase="reboot", runtime_only=False, reboot_phase=True)
    written = (root / CONFIG.lstrip("/")).read_bytes()
    # Every snapshot section is still there, after the main section that gained the lines.
    assert written.endswith(original[original.index(b"\n[snap00001]") :])
    assert b"lxc.prlimit.memlock: unlimited" in written.split(b"\n[snap00001]")[0]

    engine.rollback(root)
    assert tree(root) == before


def test_a_config_past_the_edit_bound_is_refused_with_its_name_and_size(
    engine: Engine, scratch: Path
) -> None:
    original = proxmox_config(MAX_EDITED_BYTES + 1)
    root, profile = _host(scratch, original)
    before = tree(root)

    with pytest.raises(HostError) as refused:
        engine.apply(root, profile, phase="reboot", runtime_only=False, reboot_phase=True)
    said = str(refused.value)
    assert f"{CONFIG} is {len(original):,} bytes" in said
    assert "snap00001" not in said and len(said) < 400
    assert tree(root) == before
    assert not (root / "var/lib/tune/runs").exists() or not any(
        (root / "var/lib/tune/runs").iterdir()
    )


def test_a_push_names_a_large_config_that_changed_since_the_read_without_printing_it(
    scratch: Path,
) -> None:
    """The push's check before its first write compares the whole text it read: a config that
    another run changed meanwhile stops it (exit 9), named with the size read, not quoted."""
    original = proxmox_config(3 * MAX_FILE_BYTES)
    root, profile = _host(scratch, original)
    shell = LocalShellHost(root)
    loaded = load_profile(profile)
    work = prepare(shell, loaded, runtime_only=False, reboot_phase=True, preflight_here=False)
    changed = original + b"\n[pulled]\nsnaptime: 1\n"
    (root / CONFIG.lstrip("/")).write_bytes(changed)  # a pull, between the read and the apply
    with pytest.raises(HostChanged) as stopped:
        apply_remote(shell, work, loaded, phase="reboot", timeout=30, interval=0.02)
    said = str(stopped.value)
    assert f"{CONFIG} no longer holds the {len(original):,} bytes read" in said
    assert "snap00001" not in said and len(said) < 400
    assert (root / CONFIG.lstrip("/")).read_bytes() == changed


def test_a_step_that_rewrites_a_file_read_in_part_is_refused_as_tunes_own_error(
    scratch: Path,
) -> None:
    """The one check before any run, whatever kind made the step: a file read at the usual
    cap (a kind that did not ask it whole) is never rewritten from its prefix."""
    root, _ = _host(scratch, proxmox_config(2 * MAX_FILE_BYTES))
    host = SnapshotHost(root)
    asked = Request.of(CONFIG)
    files = host.fetch(asked)
    prefix = files.read(CONFIG) or b""
    step = Step.of(
        Change("lxc", "101:x", "a", "b", Phase.REBOOT),
        probe=Probe(CONFIG, Read.TEXT),
        expect="b",
        restored=prefix.decode(),
        do=(PutFile(CONFIG, b"b"),),
        undo=(PutFile(CONFIG, prefix),),
    )
    (said,) = not_read_whole(host, asked, files, [step])
    assert said.startswith(f"{CONFIG} was read only in part (its first 64 KiB)")
    whole = Request.of(edited=[CONFIG])
    assert not_read_whole(host, whole, host.fetch(whole), [step]) == []
