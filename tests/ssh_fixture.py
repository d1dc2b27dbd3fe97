"""Private OpenSSH servers on loopback, each address presenting a different host state.

`SshLab` starts real `sshd` processes (own config, host key, authorized key, pid file and log,
all in a temporary directory), listening only on 127.0.0.x: one sshd takes at most 16
addresses, so larger fleets start several. A `Match LocalAddress` block per address sets
`TUNE_ROOT` to that host's snapshot directory, which tune's remote script reads as its root.
Servers are stopped by their pid, always. The lab writes an ssh config (one alias per host) and a
known_hosts file that tune reads, so nothing touches the user's own ~/.ssh.

Used by tests and by benchmarks/fleet.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab import LIBRARY as LAB

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
# One sshd per host: its log then attributes every session to that host. (sshd's session lines
# name only the client's port, and two clients may share a port when they reach different
# loopback addresses, so a log shared by several hosts can count a session for the wrong one.)
PER_SSHD = 1
# A fixture must not hang a test run when sshd cannot start; this is a failure, not a timing.
STARTUP_LIMIT_S = 30.0


def sshd_available() -> bool:
    return os.path.exists(SSHD) and os.geteuid() == 0 and shutil.which("ssh-keygen") is not None


def keygen(path: Path) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tune-test", "-f", str(path)],
        check=True,
    )
    return path


def _free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


@dataclass
class Sshd:
    """One sshd process and the addresses it serves."""

    addresses: list[str]
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.directory / "sshd.log"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, 15)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, 9)
                self.process.wait()


@dataclass
class SshLab:
    """Hosts named h1..hN on 127.0.0.(first)..: an alias each in `config`."""

    base: Path
    roots: dict[str, Path]
    first: int = 2
    # More variables for every host's sessions (an engine's test puts its `tune` on PATH).
    env: dict[str, str] = field(default_factory=dict)
    servers: list[Sshd] = field(default_factory=list)
    address: dict[str, str] = field(default_factory=dict)
    port: dict[str, int] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        return self.base / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.base / "known_hosts"

    @property
    def client_key(self) -> Path:
        return self.base / "id_ed25519"

    def start(self) -> SshLab:
        self.base.mkdir(parents=True, exist_ok=True)
        keygen(self.client_key)
        host_key = keygen(self.base / "ssh_host_ed25519_key")
        names = list(self.roots)
        for n, name in enumerate(names):
            self.address[name] = f"127.0.0.{self.first + n}"
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        for start in range(0, len(names), PER_SSHD):
            group = names[start : start + PER_SSHD]
            directory = self.base / f"sshd{start // PER_SSHD}"
            directory.mkdir()
            server = Sshd([self.address[n] for n in group], 0, directory)
            self.servers.append(server)
            self._launch(server, group, host_key)
            for name in group:
                self.port[name] = server.port
        self._write_client_files(host_key)
        return self

    def _launch(self, server: Sshd, group: list[str], host_key: Path) -> None:
        for _attempt in range(5):
            server.port = _free_port(server.addresses[0])
            config = server.directory / "sshd_config"
            config.write_text(self._sshd_config(server, group, host_key))
            server.process = subprocess.Popen(
                [SSHD, "-D", "-f", str(config), "-E", str(server.log)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            if self._wait_listening(server):
                return
            server.stop()
        raise RuntimeError(f"sshd did not start: {server.log.read_text(errors='replace')}")

    def _sshd_config(self, server: Sshd, group: list[str], host_key: Path) -> str:
        authorized = self.base / "authorized_keys"
        shutil.copy(self.client_key.with_suffix(".pub"), authorized)
        lines = [f"ListenAddress {a}:{server.port}" for a in server.addresses]
        lines += [
            f"HostKey {host_key}",
            f"PidFile {server.directory / 'sshd.pid'}",
            f"AuthorizedKeysFile {authorized}",
            "AuthenticationMethods publickey",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "MaxStartups 200",
            "LogLevel VERBOSE",  # logs "Starting session: command ..." per exec request
        ]
        extra = "".join(f" {k}={v}" for k, v in self.env.items())
        for name in group:
            lines += [
                f"Match LocalAddress {self.address[name]}",
                # SHLVL=1: bash (root's login shell here) then skips ~/.bashrc, which it
                # otherwise sources for every ssh command; this machine's runs pyenv (~200 ms).
                f"    SetEnv TUNE_ROOT={self.roots[name]} TUNE_LAB={LAB} SHLVL=1{extra}",
            ]
        return "\n".join(lines) + "\n"

    def _wait_listening(self, server: Sshd) -> bool:
        assert server.process is not None
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                return False
            text = server.log.read_text(errors="replace") if server.log.exists() else ""
            if "Bind to port" in text and "failed" in text:
                return False
            if text.count("Server listening on") >= len(server.addresses):
                return True
            time.sleep(0.02)
        return False

    def _write_client_files(self, host_key: Path) -> None:
        public = host_key.with_suffix(".pub").read_text().split()
        entries, hosts = [], []
        for name in self.roots:
            known = f"[{self.address[name]}]:{self.port[name]}"
            entries.append(f"{known} {public[0]} {public[1]}")
            hosts.append(
                f"Host {name}\n"
                f"    HostName {self.address[name]}\n"
                f"    Port {self.port[name]}\n"
                "    User root\n"
                f"    IdentityFile {self.client_key}\n"
                f"    UserKnownHostsFile {self.known_hosts}\n"
                f"    GlobalKnownHostsFile {self.base / 'no_global_known_hosts'}\n"
                "    StrictHostKeyChecking yes\n"
            )
        # Addresses given directly (-H 127.0.0.2:PORT, an inventory's ansible_host) still use
        # the lab's key and known_hosts, never the user's own.
        hosts.append(
            "Host 127.0.0.*\n"
            f"    IdentityFile {self.client_key}\n"
            f"    UserKnownHostsFile {self.known_hosts}\n"
            f"    GlobalKnownHostsFile {self.base / 'no_global_known_hosts'}\n"
        )
        self.known_hosts.write_text("\n".join(entries) + "\n")
        self.config.write_text("\n".join(hosts))

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def log_text(self) -> str:
        return "".join(s.log.read_text(errors="replace") for s in self.servers if s.log.exists())

    def exec_requests(self) -> Counter[str]:
        """Exec requests ("Starting session: command") per host name, from each host's own
        sshd log."""
        counts: Counter[str] = Counter()
        by_address = {a: n for n, a in self.address.items()}
        for server in self.servers:
            text = server.log.read_text(errors="replace") if server.log.exists() else ""
            (address,) = server.addresses
            found = len(re.findall(r"Starting session: command for ", text))
            if found:
                counts[by_address[address]] += found
        return counts

    def connections(self) -> Counter[str]:
        by_address = {a: n for n, a in self.address.items()}
        found = re.findall(r"Connection from \S+ port \d+ on (\S+) port", self.log_text())
        return Counter(by_address[a] for a in found)


@contextlib.contextmanager
def ssh_lab(base: Path, roots: dict[str, Path], first: int = 2) -> Iterator[SshLab]:
    lab = SshLab(base, roots, first)
    try:
        yield lab.start()
    finally:
        lab.stop()


def minimal_host(source: Path, profile: Path, target: Path) -> Path:
    """A snapshot with only the files `profile` reads from `source` (fast to copy 50 times)."""
    from reconciler.hosts import recorded
    from reconciler.hosts.directory import SnapshotHost
    from reconciler.plan.observe import request
    from reconciler.profile.load import load_profile

    wanted = request(load_profile(profile).profile)
    files = SnapshotHost(source).fetch(wanted)
    paths = set(files.contents) | {p for listed in files.listings.values() for p in listed}
    nodes = {p for found in files.nodes.values() for p in found}
    for directory in (p for p in nodes if p.endswith("/")):
        (target / directory.strip("/")).mkdir(parents=True, exist_ok=True)
    for path in paths | {p for p in nodes if not p.endswith("/")}:
        destination = target / path.lstrip("/")
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / path.lstrip("/"), destination)
    for argv, answer in files.commands.items():  # what the snapshot recorded of its commands
        for path, data in recorded.record(argv, answer).items():
            destination = target / path.lstrip("/")
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(data)
    return target


def clone_host(template: Path, target: Path) -> Path:
    """A copy that shares file data with `template` (hard links): write with `replace_file`."""
    shutil.copytree(template, target, copy_function=os.link)
    return target


def replace_file(root: Path, path: str, content: str | bytes) -> None:
    """Write a file in a cloned host without touching the template's shared inode."""
    destination = root / path.lstrip("/")
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.unlink(missing_ok=True)
    if isinstance(content, bytes):
        destination.write_bytes(content)
    else:
        destination.write_text(content)


StartLab = Callable[..., SshLab]


# What differs between two runs of the same apply: compared without them.
RUN_FIELDS = ("run_id", "started", "finished")


def journal_records(root: Path) -> list[dict[str, Any]]:
    """Every journal record of a snapshot host's runs, without what differs between runs: an
    apply over SSH must leave the records a local apply leaves."""
    from reconciler.apply.journal import read_run, run_ids
    from reconciler.hosts.directory import SnapshotHost

    host = SnapshotHost(root)
    out = []
    for run_id in run_ids(host):
        run = read_run(host, run_id)
        assert run is not None
        out += [{k: v for k, v in r.to_json().items() if k not in RUN_FIELDS} for r in run.records]
    return out
