"""`--restart-containers`: after the boot is verified, restart each container of the profile and
check that it sees the host's `/dev/nvidia*` nodes.

A container starts with what its config binds at that moment: one that came up at boot before
the driver created a node (nvidia-uvm is made on first use) runs without it until restarted,
and a config edit (allow or mount lines) takes effect only at its next start. Proxmox restarts a
container with `pct reboot ID`, plain LXC with `lxc-stop` then `lxc-start`; what the container
sees is `ls /dev` run inside it. Every command is an argv list run through the host's engine
(over SSH, lib.sh's `run_argv` on the target), and each one is recorded in the run's journal; on
a snapshot the host emulates them (`reconciler.hosts.emulate`; the test lab's tests/lab.sh).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..apply.journal import Journal
from ..apply.pending import PendingBoot
from ..core.files import Request
from ..facts import lxc as fmt
from ..hosts.base import Completed, Host
from ..steps.records import ContainerRan
from .verify import BootVerdict

# How a command reaches the host: `Host.run` here or on a snapshot, the engine's over SSH.
Run = Callable[[Sequence[str]], Completed]

_PROXMOX = re.compile(r"/etc/pve/lxc/([0-9]+)\.conf")
LIST_DEV = ("ls", "/dev")


@dataclass(frozen=True)
class Container:
    """A container by its config path: Proxmox's `/etc/pve/lxc/ID.conf`, or LXC's
    `LXCPATH/NAME/config`."""

    config: str

    @property
    def proxmox_id(self) -> str | None:
        match = _PROXMOX.fullmatch(self.config)
        return match.group(1) if match else None

    @property
    def name(self) -> str:
        return self.proxmox_id or posixpath.basename(posixpath.dirname(self.config))

    def _lxc(self, tool: str) -> tuple[str, ...]:
        lxcpath = posixpath.dirname(posixpath.dirname(self.config))
        return (tool, "-n", self.name, "-P", lxcpath)

    def restart(self) -> list[tuple[str, ...]]:
        """The commands that restart it, in order; each must succeed before the next."""
        if self.proxmox_id is not None:
            return [("pct", "reboot", self.proxmox_id)]
        return [self._lxc("lxc-stop"), self._lxc("lxc-start")]

    def list_dev(self) -> tuple[str, ...]:
        """The command that lists `/dev` inside it."""
        if self.proxmox_id is not None:
            return ("pct", "exec", self.proxmox_id, "--", *LIST_DEV)
        return (*self._lxc("lxc-attach"), "--", *LIST_DEV)


def restart_after_boot(
    host: Host, pending: PendingBoot, verdict: BootVerdict, run: Run | None = None
) -> None:
    """Restart the containers of `pending`'s run once its boot is verified; what held and what
    failed goes into `verdict`, the commands into the run's journal, which then ends `applied`
    again unless something failed (a failure rolls the boot configuration back). Nothing is
    restarted after a boot that already failed its checks: the shape of an after-boot hook."""
    if verdict.failed or not pending.containers:
        return
    journal = Journal(host, pending.run_id)
    restarted = restart_containers(host, pending.containers, journal, run)
    verdict.held += restarted.held
    verdict.failed += restarted.failed
    if not restarted.failed:
        journal.end("applied")  # its container records follow the end the apply wrote


def restart_containers(
    host: Host, configs: list[str], journal: Journal, run: Run | None = None
) -> BootVerdict:
    """Restart each container and check that one that mounts NVIDIA nodes sees every
    `/dev/nvidia*` node of the host; the commands (through `run`, by default `host.run`) and
    what they printed go to `journal`."""
    run = run or host.run
    files = host.fetch(Request.of(*configs, nodes=[fmt.NVIDIA_NODES]))
    nodes = [posixpath.basename(n.rstrip("/")) for n in files.node_paths(fmt.NVIDIA_NODES)]
    done = BootVerdict()
    for config in configs:
        container = Container(config)
        failure = _restart(run, container, journal)
        if failure is not None:
            done.failed.append(failure)
            continue
        if not fmt.mounts_nvidia(fmt.read(config, files.text(config) or "")):
            done.held.append(f"container {container.name} restarted")
            continue
        listed = _run(run, container, container.list_dev(), journal)
        if listed.returncode != 0:
            done.failed.append(_failed(container, container.list_dev(), listed.said))
            continue
        missing = [f"/dev/{n}" for n in nodes if n not in listed.stdout.split()]
        if missing:
            done.failed.append(
                f"container {container.name} does not see {', '.join(missing)} after its restart"
            )
        else:
            done.held.append(
                f"container {container.name} restarted and sees {len(nodes)} NVIDIA nodes"
            )
    return done


def _run(run: Run, container: Container, argv: tuple[str, ...], journal: Journal) -> Completed:
    done = run(argv)
    journal.record(ContainerRan(container.name, argv, done.returncode, done.stdout, done.stderr))
    return done


def _restart(run: Run, container: Container, journal: Journal) -> str | None:
    for argv in container.restart():
        ran = _run(run, container, argv, journal)
        if ran.returncode != 0:
            return _failed(container, argv, ran.said)
    return None


def _failed(container: Container, argv: tuple[str, ...], output: str) -> str:
    return f"container {container.name}: `{shlex.join(argv)}` failed: {output}"
