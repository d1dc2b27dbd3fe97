"""The oracle itself: LXC accepts what it reads and refuses what tune used to write."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxc_oracle import lxc_refuses

from reconciler.facts import lxc as fmt


def test_lxc_refuses_proxmox_syntax_and_unknown_keys(tmp_path: Path) -> None:
    # What tune wrote into /var/lib/lxc/NAME/config before #17 item 6.
    assert "Invalid configuration line" in (
        lxc_refuses("lxc.prlimit.memlock: unlimited\n", tmp_path) or ""
    )
    refused = lxc_refuses(
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n", tmp_path
    )
    assert "Unsupported config key" in (refused or "")
    assert "Unsupported config key" in (lxc_refuses("lxc.network.type = veth\n", tmp_path) or "")


def test_lxc_and_tune_agree_on_what_lxc_reads(tmp_path: Path) -> None:
    lines = [
        "arch: amd64",  # a Proxmox key: skipped
        "[snapshot]",
        "  # comment",
        "\tlxc.uts.name=infer",
        "lxc.prlimit.memlock = 'unlimited'",
        "lxc.cgroup2.devices.allow = c 195:* rwm # note",
        "lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file 0 0",
        "lxc.sysctl.net.core.somaxconn = 1024",
        "lxc.prlimit.memlock: unlimited",
        "lxc.mount.entry: /dev/x dev/x none bind,create=file",
        "lxc.rootfs = /srv/rootfs",
        "lxc.net.0.type = veth",
        "lxc.cgroup.devices.allow = c 1:3 rwm",
    ]
    for line in lines:
        config = fmt.parse(line + "\n", fmt.Syntax.LXC)
        assert (lxc_refuses(line + "\n", tmp_path) is None) == (not config.unreadable), line


CORPUS = Path(__file__).resolve().parent / "corpus"
# The container configs among the corpora: Proxmox's and LXC's own.
REAL = sorted(
    p
    for source in ("pve-container", "lxc")
    for p in (CORPUS / source).rglob("*")
    if p.is_file() and p.suffix != ".md"
)


@pytest.mark.parametrize("source", REAL, ids=[str(p.relative_to(CORPUS)) for p in REAL])
def test_lxc_and_tune_agree_on_every_real_config(tmp_path: Path, source: Path) -> None:
    # Proxmox's configs too: LXC skips their own keys and refuses their `lxc.key: value` lines.
    text = source.read_text()
    refused = fmt.parse(text, fmt.Syntax.LXC).unreadable
    said = lxc_refuses(text, tmp_path)
    assert (said is None) == (not refused), said
    if refused:
        assert refused[0].message in (said or "")
