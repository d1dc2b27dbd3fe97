"""SSH hosts: one connection and one exec request per observation, host keys verified.

Only remote runs import this module (and with it fabric and paramiko); local and snapshot runs
never pay for them. fabric resolves `~/.ssh/config` (HostName, User, Port, IdentityFile,
ProxyJump) as ssh does; the bytes travel over a raw paramiko channel, because fabric's `run`
decodes output as text and PCI config space is binary.

fabric accepts unknown host keys silently and never reads known_hosts; here every connection,
jump hosts included, checks the keys in the user's and the system's known_hosts files (or the
`UserKnownHostsFile`/`GlobalKnownHostsFile` that ssh_config names) and refuses unknown or
changed keys, unless `--accept-new-host-keys` (ssh's `StrictHostKeyChecking=accept-new`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shlex
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
from fabric import Config, Connection
from paramiko.hostkeys import HostKeyEntry
from paramiko.pkey import UnknownKeyType

from ..core.bounded import MAX_KEY_BYTES, Unreadable, read_bounded
from ..core.errors import ConnectError, HostError, HostKeyError, reason
from ..core.printable import printable
from .known_hosts import CERT_AUTHORITY, REVOKED, KnownKey, Parsed, matches, parse
from .shell import ScriptResult, ShellHost
from .targets import Identity, Target

# paramiko logs its transport thread's failures with tracebacks; tune reports each failure as
# one sentence, so nothing of paramiko's log may reach the terminal.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

USER_KNOWN_HOSTS = "~/.ssh/known_hosts ~/.ssh/known_hosts2"
GLOBAL_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"


@dataclass(frozen=True)
class SshSettings:
    """How to reach every host of a run (the command line's SSH options)."""

    ssh_config: str | None = None  # like `ssh -F`; None reads ~/.ssh/config and the system's
    sudo: bool = False  # run the remote shell through `sudo -n`
    accept_new_host_keys: bool = False
    connect_timeout: float = 10.0
    command_timeout: float = 60.0


class _HostKeys(paramiko.HostKeys):
    """paramiko's table of host keys, with OpenSSH's matching (wildcards, `!negation`, hashed
    names); a key `@revoked` for a host never matches it."""

    def __init__(self, revoked: list[KnownKey]) -> None:
        super().__init__()
        self.revoked = revoked

    def _hostname_matches(self, hostname: str, entry: HostKeyEntry) -> bool:
        return matches(tuple(entry.hostnames), hostname) and not revoked(
            self.revoked, hostname, entry.key
        )


def revoked(lines: list[KnownKey], hostname: str, key: paramiko.PKey) -> KnownKey | None:
    blob = key.asbytes()
    return next((line for line in lines if line.key == blob and line.matches(hostname)), None)


class KnownHosts:
    """known_hosts files parsed once, as OpenSSH reads them (`reconciler.known_hosts`), and
    shared by every connection of a run."""

    def __init__(self, paths: list[Path], write_to: Path, hash_names: bool) -> None:
        self.revoked: list[KnownKey] = []
        self.authorities: list[KnownKey] = []
        self.keys = _HostKeys(self.revoked)
        self.write_to = write_to
        self.hash_names = hash_names
        self._lock = threading.Lock()
        for path in paths:
            if path.is_file():
                try:
                    text = path.read_bytes().decode("utf-8", "surrogateescape")
                except OSError as exc:
                    raise HostError(f"{path}: cannot read known hosts ({exc.strerror}).") from exc
                self._load(parse(text, str(path)))

    def _load(self, parsed: Parsed) -> None:
        skipped = list(parsed.skipped)
        for line in parsed.keys:
            if line.marker == REVOKED:
                self.revoked.append(line)
            elif line.marker == CERT_AUTHORITY:
                self.authorities.append(line)
            else:
                try:
                    key = paramiko.PKey.from_type_string(line.key_type, line.key)
                except UnknownKeyType:
                    continue  # a type this SSH library never negotiates (ssh-dss, sk-*)
                except (paramiko.SSHException, ValueError, TypeError) as exc:
                    skipped.append(f"{line.where}: not a valid {line.key_type} key ({exc})")
                    continue
                # One entry a line, its patterns together (a negation rules the line out);
                # paramiko's `add` takes one name.
                self.keys._entries.append(HostKeyEntry(list(line.patterns), key))  # type: ignore[attr-defined]
        # As ssh does, a line it cannot read is skipped, with a word on stderr.
        for why in skipped:
            sys.stderr.write(f"tune: known hosts {printable(why)}: line ignored.\n")

    def refuse_revoked(self, label: str, hostname: str, key: paramiko.PKey) -> None:
        line = revoked(self.revoked, hostname, key)
        if line is not None:
            raise HostKeyError(
                f"{label}: the host key of {hostname} ({_describe(key)}) is REVOKED "
                f"({line.where}); tune never connects with a revoked key, whatever else "
                "known_hosts says: the host needs a new key."
            )

    def authority(self, hostname: str) -> KnownKey | None:
        return next((line for line in self.authorities if line.matches(hostname)), None)

    def add(self, name: str, key: paramiko.PKey) -> None:
        """Remember a new key, as ssh's accept-new does: append one line, keep the rest."""
        entry = paramiko.HostKeys.hash_host(name) if self.hash_names else name
        line = f"{entry} {key.get_name()} {key.get_base64()}\n"
        with self._lock:
            self.write_to.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(self.write_to, "a") as handle:
                handle.write(line)
            self.keys.add(name, key.get_name(), key)


class _Transport(paramiko.Transport):
    """paramiko's transport with AES-GCM first among its ciphers (SSH uses the first of the
    client's list the server also offers; every OpenSSH since 6.2 has it): an AEAD cipher that
    cryptography runs in C, where paramiko's first choice, CTR with an HMAC, checks each
    packet's MAC in Python (~0.7 ms of controller CPU per host)."""

    _preferred_ciphers = (
        "aes128-gcm@openssh.com",
        "aes256-gcm@openssh.com",
        *(c for c in paramiko.Transport._preferred_ciphers if "-gcm@" not in c),  # type: ignore[attr-defined]
    )


class _Connection(Connection):  # type: ignore[misc]
    """fabric's Connection, given the host name as it is: fabric reads a `user@` and a
    `:port` out of the host string it is given, which would log in as another user, or at
    another port, than the target says. The target's host holds neither (`targets`), and
    its user and port are passed apart."""

    def derive_shorthand(self, host_string: str) -> dict[str, Any]:
        return {"user": None, "host": host_string, "port": None}


class _Policy(paramiko.MissingHostKeyPolicy):
    """Called by paramiko only for a host with no key at all in known_hosts."""

    def __init__(self, label: str, known: KnownHosts, accept_new: bool) -> None:
        self.label = label
        self.known = known
        self.accept_new = accept_new

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        self.known.refuse_revoked(self.label, hostname, key)
        if self.accept_new:
            self.known.add(hostname, key)
            return
        host, port = _split_known_name(hostname)
        scan = f"ssh-keyscan{f' -p {port}' if port != 22 else ''} {host}"
        authority = self.known.authority(hostname)
        only_ca = (
            f" (known_hosts vouches for it only through @cert-authority ({authority.where}); "
            "tune checks plain host keys, not certificates)"
            if authority
            else ""
        )
        raise HostKeyError(
            f"{self.label}: unknown host key for {hostname} ({_describe(key)}){only_ca}; tune "
            f"refuses unknown keys: check the fingerprint with the host's owner, then add it "
            f"with `{scan} >> {self.known.write_to}`, or pass --accept-new-host-keys."
        )


class SshSetup:
    """The parsed ssh configuration and known_hosts shared by every host of one run."""

    def __init__(self, settings: SshSettings) -> None:
        self.settings = settings
        timeout = settings.connect_timeout
        overrides: dict[str, Any] = {
            "timeouts": {"connect": timeout},
            # Jump hosts get these too: their connections are built from this configuration.
            "connect_kwargs": {"banner_timeout": timeout, "auth_timeout": timeout},
        }
        if settings.ssh_config is not None:
            self.config = Config(overrides=overrides, runtime_ssh_path=settings.ssh_config)
        else:
            self.config = Config(overrides=overrides)
        self._known: dict[tuple[str, str], KnownHosts] = {}
        self._keys: dict[str, paramiko.PKey | None] = {}
        self._files: dict[str, bytes | OSError] = {}
        self._lock = threading.Lock()
        self.building = threading.Lock()  # held while a Connection is built from `config`

    def host(self, target: Target) -> SshHost:
        return SshHost(target, self)

    def known_hosts(self, ssh_config: dict[str, Any]) -> KnownHosts:
        user = ssh_config.get("userknownhostsfile", USER_KNOWN_HOSTS)
        system = ssh_config.get("globalknownhostsfile", GLOBAL_KNOWN_HOSTS)
        with self._lock:
            if (user, system) not in self._known:
                users = [Path(os.path.expanduser(p)) for p in shlex.split(user)]
                systems = [Path(os.path.expanduser(p)) for p in shlex.split(system)]
                hashed = str(ssh_config.get("hashknownhosts", "no")).lower() == "yes"
                self._known[(user, system)] = KnownHosts(users + systems, users[0], hashed)
            return self._known[(user, system)]

    def key_file(self, path: str) -> bytes:
        """An identity file's bytes, read once per run: a regular file of at most
        MAX_KEY_BYTES. An inventory names it (ansible_private_key_file): /dev/zero there was
        read until the kernel killed tune, a FIFO for ever. Raises OSError (`Unreadable`)."""
        with self._lock:
            if path not in self._files:
                try:
                    self._files[path] = read_bounded(path, MAX_KEY_BYTES, "a private key")
                except OSError as exc:
                    self._files[path] = exc
            found = self._files[path]
        if isinstance(found, OSError):
            raise found
        return found

    def private_key(self, path: str) -> paramiko.PKey | None:
        """An identity file's key, read once per run. paramiko reads the file again for every
        connection, trying one key type after the other; across a fleet that is ~1.5 ms of
        CPU per host. None when it cannot be loaded here (a passphrase; an unknown type; a file
        that cannot be read): then paramiko tries the file itself and says why."""
        try:
            text = self.key_file(path).decode("utf-8", "replace")
        except OSError:
            return None
        with self._lock:
            if path not in self._keys:
                self._keys[path] = _key_of(text)
            key = self._keys[path]
        # As paramiko's own loading does, a certificate beside the key goes with it; with none,
        # or one that does not fit the key, the key goes alone.
        with contextlib.suppress(OSError, ValueError, paramiko.SSHException):
            if key is not None:
                key.load_certificate(self.key_file(f"{path}-cert.pub").decode("utf-8", "replace"))
        return key

    def accept_new(self, ssh_config: dict[str, Any]) -> bool:
        strict = str(ssh_config.get("stricthostkeychecking", "")).lower()
        return self.settings.accept_new_host_keys or strict == "accept-new"


@dataclass
class _Open:
    connection: Connection
    hops: list[Connection] = field(default_factory=list)


class SshHost(ShellHost):
    """A host reached over SSH. Connects on first use; `close` ends the connection."""

    def __init__(self, target: Target, setup: SshSetup) -> None:
        self.target = target
        self.setup = setup
        self.name = target.name
        self._open: _Open | None = None
        self._lock = threading.Lock()
        self._pinned: Identity | None = None

    def describe(self) -> str:
        return f"ssh {self.name}"

    def identity(self) -> Identity:
        """Where the connection goes, ssh_config resolved (nothing connects for it), and the
        host key it presented once it is open."""
        with self._lock:
            opened = self._open
        connection = opened.connection if opened is not None else self._connection()
        transport = connection.client.get_transport() if opened is not None else None
        key = transport.get_remote_server_key() if transport is not None else None
        return Identity(
            str(connection.host),
            int(connection.port),
            str(connection.user),
            None if key is None else str(key.fingerprint),
        )

    def pin(self, identity: Identity) -> None:
        self._pinned = identity

    def _refuse_another(self, now: Identity) -> None:
        changed = [] if self._pinned is None else self._pinned.changes(now)
        if changed:
            raise HostKeyError(
                f"{self.name} is not the machine this rollout pinned when it started: "
                f"{'; '.join(changed)}; tune reaches no other machine under its name "
                "(restore the inventory or ssh_config, or see `tune rollout status`)."
            )

    @property
    def command(self) -> str:
        """What the login shell runs: a POSIX sh that reads tune's script on standard input,
        so the user's login shell (bash, zsh, fish) never parses the script itself."""
        sudo = self.target.sudo
        # The inventory's ansible_become wins over --sudo, as Ansible's variables win over
        # its command line.
        return "sudo -n -- sh" if (self.setup.settings.sudo if sudo is None else sudo) else "sh"

    def run_script(self, script: str, timeout: float | None = None) -> ScriptResult:
        transport = self._transport()
        settings = self.setup.settings
        limit = settings.command_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        try:
            channel = transport.open_session(timeout=settings.connect_timeout)
            channel.exec_command(self.command)
            channel.sendall(script.encode("utf-8", "surrogateescape"))  # names as read
            channel.shutdown_write()
            stdout = []
            while True:
                channel.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = channel.recv(1 << 16)
                if not chunk:
                    break
                stdout.append(chunk)
            if not channel.status_event.wait(max(0.01, deadline - time.monotonic())):
                raise TimeoutError
            stderr = []
            while channel.recv_stderr_ready():
                stderr.append(channel.recv_stderr(1 << 16))
            status = channel.recv_exit_status()
        except TimeoutError as exc:
            self.close()
            raise ConnectError(
                f"{self.name}: no complete answer within {limit:g} s "
                f"({'command timeout' if timeout is None else 'the time this script is allowed'})."
            ) from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.close()
            raise ConnectError(
                f"{self.name}: the connection broke ({exc or type(exc).__name__})."
            ) from exc
        return ScriptResult(b"".join(stdout), b"".join(stderr), status)

    def close(self) -> None:
        """End the connection; safe from another thread (Ctrl-C closes every host)."""
        with self._lock:
            opened, self._open = self._open, None
            self.library = None  # the next connection sends it again, or finds it stored
        if opened is not None:
            for connection in [opened.connection, *opened.hops]:
                connection.close()

    def _transport(self) -> paramiko.Transport:
        with self._lock:
            opened = self._open
        if opened is None:
            # Connect outside the lock, so that `close` from another thread never waits for it.
            opened = self._connect()
            with self._lock:
                self._open = opened
        client: paramiko.SSHClient = opened.connection.client
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectError(f"{self.name}: the connection is closed.")
        return transport

    def _connection(self, kwargs: dict[str, Any] | None = None) -> Connection:
        """The target's fabric Connection, ssh_config resolved, not opened."""
        target = self.target
        # One fabric Config serves every thread; reading it while another thread builds a
        # Connection from it once failed with "No attribute or config key found for 'user'"
        # (seen in the fleet benchmark's bare fabric baseline). Building takes ~1 ms.
        with self.setup.building:
            return _Connection(
                target.host,
                user=target.user,
                port=target.port,
                config=self.setup.config,
                connect_timeout=self.setup.settings.connect_timeout,
                connect_kwargs=kwargs or {},
            )

    def _connect(self) -> _Open:
        target = self.target
        kwargs: dict[str, Any] = {
            "banner_timeout": self.setup.settings.connect_timeout,
            "auth_timeout": self.setup.settings.connect_timeout,
            "transport_factory": _Transport,
        }
        if target.identity_file:
            kwargs["key_filename"] = [os.path.expanduser(target.identity_file)]
        connection = self._connection(kwargs)
        self._refuse_another(
            Identity(str(connection.host), int(connection.port), str(connection.user))
        )
        self._preload_key(connection)
        opened = _Open(connection, _hops(connection))
        self._verify_keys(connection, self.name)
        for hop in opened.hops:
            self._verify_keys(hop, f"{self.name} (jump host {hop.original_host})")
        try:
            connection.open()
        except BaseException as exc:
            # paramiko's transport thread keeps the first cause (a banner timeout, a reset);
            # what connect() raises afterwards is often only "No existing session".
            transport = connection.client.get_transport()
            cause = (transport.get_exception() if transport is not None else None) or exc
            for hop in [connection, *opened.hops]:
                hop.close()
            raise self._explain(cause, connection) from exc
        transport = connection.client.get_transport()
        key = transport.get_remote_server_key() if transport is not None else None
        if key is not None and self._pinned is not None:
            now = Identity(
                str(connection.host), int(connection.port), str(connection.user), key.fingerprint
            )
            try:
                self._refuse_another(now)
            except HostKeyError:
                for hop in [connection, *opened.hops]:
                    hop.close()
                raise
        return opened

    def _preload_key(self, connection: Connection) -> None:
        """Hand paramiko the first identity file's key already loaded; it tries `pkey` first,
        then the other files, in ssh's order. Every file, and the certificate beside it, is
        first read here within bounds: paramiko reads whatever it is given to its end. One it
        cannot open at all it skips, as ssh does, and so does tune."""
        kwargs = connection.connect_kwargs
        files = kwargs.get("key_filename") or []
        files = [files] if isinstance(files, str) else list(files)
        if not files:
            return
        for path in files:
            for each in (path, f"{path}-cert.pub"):
                try:
                    self.setup.key_file(each)
                except Unreadable as exc:
                    raise ConnectError(
                        f"{self.name}: cannot read the identity file {each}: {exc}."
                    ) from None
                except OSError:
                    pass  # paramiko cannot open it either
        key = None if "pkey" in kwargs else self.setup.private_key(files[0])
        if key is not None:
            kwargs["pkey"] = key
            kwargs["key_filename"] = files[1:]

    def _verify_keys(self, connection: Connection, label: str) -> None:
        known = self.setup.known_hosts(connection.ssh_config)
        client = connection.client
        # paramiko has no public way to share one parsed known_hosts between clients; its
        # "system" table is only read during connect, which is all sharing needs.
        client._system_host_keys = known.keys
        accept_new = self.setup.accept_new(connection.ssh_config)
        client.set_missing_host_key_policy(_Policy(label, known, accept_new))

    def _explain(self, exc: BaseException, connection: Connection) -> BaseException:
        where = f"{connection.host}:{connection.port}"
        timeout = self.setup.settings.connect_timeout
        if isinstance(exc, HostKeyError | KeyboardInterrupt):
            return exc
        if isinstance(exc, paramiko.BadHostKeyException):
            name = (
                connection.host
                if connection.port == 22
                else f"[{connection.host}]:{connection.port}"
            )
            known = self.setup.known_hosts(connection.ssh_config)
            try:
                known.refuse_revoked(self.name, name, exc.key)
            except HostKeyError as refused:
                return refused
            return HostKeyError(
                f"{self.name}: the host key of {name} CHANGED: it presents "
                f"{_describe(exc.key)}, known_hosts has {_describe(exc.expected_key)}; this "
                "could be an attack, or the host was reinstalled: if you can confirm that, "
                f"remove the old key with `ssh-keygen -f {known.write_to} -R '{name}'` and "
                "connect again."
            )
        if isinstance(exc, paramiko.AuthenticationException):
            return ConnectError(
                f"{self.name}: {where} refused authentication as {connection.user} ({exc})."
            )
        if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
            return ConnectError(f"{self.name}: cannot connect to {where}: connection refused.")
        if isinstance(exc, TimeoutError):
            return ConnectError(
                f"{self.name}: no connection to {where} within {timeout:g} s (connect timeout)."
            )
        if isinstance(exc, socket.gaierror):
            return ConnectError(f"{self.name}: cannot resolve the host name {connection.host}.")
        if isinstance(exc, paramiko.SSHException) and _unfinished_handshake(exc):
            return ConnectError(
                f"{self.name}: {where} accepted the connection but the SSH handshake did not "
                f"finish within {timeout:g} s (connect timeout)."
            )
        if isinstance(exc, paramiko.SSHException):
            return ConnectError(f"{self.name}: SSH handshake with {where} failed: {exc}.")
        if isinstance(exc, OSError):
            return ConnectError(f"{self.name}: cannot connect to {where}: {reason(exc)}.")
        return exc


def _key_of(text: str) -> paramiko.PKey | None:
    """The private key in `text`, None when paramiko cannot load it without help (a
    passphrase, a type it does not know)."""
    for kind in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return kind.from_private_key(io.StringIO(text))
        except (paramiko.SSHException, ValueError, TypeError):
            continue
    return None


def _hops(connection: Connection) -> list[Connection]:
    """ProxyJump hosts, nearest first, as fabric built them from ssh_config."""
    hops = []
    gateway = connection.gateway
    while isinstance(gateway, Connection):
        hops.append(gateway)
        gateway = gateway.gateway
    return hops


def _unfinished_handshake(exc: Exception) -> bool:
    """paramiko's words for a server that connects but does not speak SSH in time; which one
    it raises depends on which of its timers runs out first."""
    text = str(exc)
    return any(t in text for t in ("banner", "No existing session", "Negotiation"))


def _describe(key: paramiko.PKey) -> str:
    return f"{key.get_name()} key {key.fingerprint}"


def _split_known_name(name: str) -> tuple[str, int]:
    if name.startswith("[") and "]:" in name:
        host, _, port = name[1:].partition("]:")
        return host, int(port)
    return name, 22
