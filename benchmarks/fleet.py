"""`tune plan` over N loopback SSH hosts against two baselines measured in the same run.

    python benchmarks/fleet.py N [--forks 20] [--rounds 3] [--no-ansible]

Needs root and openssh-server (as the SSH tests do). Sets up N hosts (copies of the tuned
example host, cut to the files the Blackwell profile reads) behind private sshd servers on
127.0.0.x, then runs, each in its own process:

- tune: `tune plan PROFILE -H h1 ... -H hN --forks F --format json`;
- fabric: the bare baseline, one fabric connection per host and one batched `cat` of the same
  (already expanded) files, F hosts at a time, no host-key check, no globbing, no plan;
- ssh: OpenSSH's client, `ssh hN 'cat ...'` per host, F at a time;
- ansible: `ansible-playbook --check` with the same forks, reading the same files with one
  `shell: cat` task per profile section (plus one for identity, checks and tune's own files),
  `check_mode: false` so that check mode still reads; pipelining and ControlPersist on, facts
  off: Ansible at its fastest;
- ansible/knob: the same, with one task per profile entry (a sysctl key, a module, a PCI
  selector, a container), as a playbook that checks knobs is usually written and as the
  issue's measurement counted it (24 and more commands per host). Installed only into the
  benchmark's own venv:
  `python3 -m venv benchmarks/.venv && benchmarks/.venv/bin/pip install ansible-core`
  (skipped, with a note, when that venv is missing; `--no-ansible` skips it anyway).

For each it prints wall time, controller CPU (the process and its children), peak resident
memory of the largest process, target CPU per host (sshd and everything it ran, from the
servers' reaped-children times) and connections and exec requests per host from the sshd logs.
Controller CPU includes the processes a tool leaves behind (Ansible's ssh control masters):
this process is their subreaper and waits for them.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import pwd
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(PROJECT), str(PROJECT / "tests")]

from ssh_fixture import SshLab, clone_host, minimal_host, sshd_available  # noqa: E402

from reconciler.hosts.directory import SnapshotHost  # noqa: E402
from reconciler.plan.observe import request  # noqa: E402
from reconciler.profile.load import load_profile  # noqa: E402

PROFILE = PROJECT / "profiles" / "blackwell-8x.yaml"
ANSIBLE = PROJECT / "benchmarks" / ".venv" / "bin" / "ansible-playbook"
PR_SET_CHILD_SUBREAPER = 36
# What a login session sets and a bare `sudo` or container shell may not: without it
# getpass.getuser() reads the password database for every Host block of ssh_config that
# paramiko matches (twice per host), which measures the environment, not the tools.
LOGIN = dict.fromkeys(("USER", "LOGNAME"), pwd.getpwuid(os.getuid()).pw_name)
TUNED = PROJECT / "examples" / "hosts" / "rtx6000bw-tuned"

FABRIC_BASELINE = """
import sys, threading
from concurrent.futures import ThreadPoolExecutor
from fabric import Config, Connection
config_path, forks, command, *hosts = sys.argv[1:]
config = Config(runtime_ssh_path=config_path)
# Connections built at once from one shared Config race inside invoke's lazy merging
# ("No attribute or config key found for 'user'"); tune builds them under a lock, and so does
# the floor.
building = threading.Lock()
def read(host):
    with building:
        connection = Connection(host, config=config)
    with connection:
        return len(connection.run(command, hide=True).stdout)
with ThreadPoolExecutor(int(forks)) as pool:
    sizes = list(pool.map(read, hosts))
assert all(sizes), sizes
"""

SSH_BASELINE = """
import subprocess, sys
from concurrent.futures import ThreadPoolExecutor
config_path, forks, command, *hosts = sys.argv[1:]
def read(host):
    done = subprocess.run(["ssh", "-F", config_path, host, command], capture_output=True)
    return len(done.stdout) if done.returncode == 0 else 0
with ThreadPoolExecutor(int(forks)) as pool:
    sizes = list(pool.map(read, hosts))
assert all(sizes), sizes
"""


@dataclass
class Measured:
    name: str
    wall: float
    cpu: float
    rss_mb: float
    target_cpu: float
    connections: float
    execs: float


def target_cpu(lab: SshLab) -> float:
    """CPU seconds of every sshd child the servers have reaped (sessions, shells, cat/head)."""
    total = 0.0
    for server in lab.servers:
        assert server.process is not None
        fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return total


def measure(
    name: str,
    argv: list[str],
    lab: SshLab,
    hosts: int,
    env: dict[str, str] | None = None,
    success: tuple[int, ...] = (0, 2),
) -> Measured:
    execs_before, conns_before = lab.exec_requests(), lab.connections()
    cpu_before = target_cpu(lab)
    env = {**LOGIN, **os.environ, "PYTHONPATH": str(PROJECT), **(env or {})}
    # Bytecode as an installed package has it (pip compiles at install): where the shell sets
    # PYTHONDONTWRITEBYTECODE, every run would compile tune's changed modules again.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    # A file, not a pipe: a chatty tool must never block on a full pipe nobody reads.
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=errors)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code not in success:
            errors.seek(0)
            said = errors.read().decode(errors="replace")[-2000:]
            raise SystemExit(f"{name} failed ({code}): {said}")
    cpu = usage.ru_utime + usage.ru_stime + reap_orphans(lab)
    settle(lab)
    execs = sum((lab.exec_requests() - execs_before).values())
    conns = sum((lab.connections() - conns_before).values())
    return Measured(
        name,
        wall,
        cpu,
        usage.ru_maxrss / 1024,
        (target_cpu(lab) - cpu_before) / hosts,
        conns / hosts,
        execs / hosts,
    )


def settle(lab: SshLab, limit: float = 10.0) -> None:
    """Wait until every sshd server has reaped its sessions: their CPU counts only then, and a
    session reaped late must not count for the next tool measured."""
    servers = {str(s.process.pid) for s in lab.servers if s.process is not None}
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not any(parent in servers for _, parent in processes()):
            return
        time.sleep(0.05)


def processes() -> list[tuple[int, str]]:
    """(pid, parent pid) of every process."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found.append((int(entry), stat[1]))
    return found


def reap_orphans(lab: SshLab) -> float:
    """End the processes a run left behind (reparented to this subreaper: ssh control masters
    idling out their ControlPersist) and return the CPU they used."""
    servers = {s.process.pid for s in lab.servers if s.process is not None}
    total = 0.0
    while True:
        left = [pid for pid in children() if pid not in servers]
        if not left:
            return total
        os.kill(left[0], signal.SIGTERM)
        _, _, usage = os.wait4(left[0], 0)
        total += usage.ru_utime + usage.ru_stime


def children() -> list[int]:
    me = str(os.getpid())
    return [pid for pid, parent in processes() if parent == me]


def prepare_lab() -> None:
    """Make this process the subreaper of what it starts (Ansible's ssh control masters
    outlive it; as their subreaper this process counts them), or exit without an SSH lab."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if not sshd_available():
        raise SystemExit("needs root, sshd and ssh-keygen (apt-get install openssh-server)")


def ansible_run(
    base: Path, lab: SshLab, names: list[str], sections: list[list[str]], forks: int
) -> tuple[list[str], dict[str, str]]:
    """The playbook, the inventory and the settings of `ansible-playbook --check`."""
    tasks = [
        {
            "name": f"read section {n}",
            # base64: a module's answer must be UTF-8, and PCI config space is binary.
            "ansible.builtin.shell": 'cd "$TUNE_ROOT" && cat -- '
            + " ".join(shlex.quote(f".{p}") for p in paths)
            + " | base64",
            "check_mode": False,
            "changed_when": False,
        }
        for n, paths in enumerate(sections)
    ]
    playbook, inventory, env = ansible_files(base, lab, names, tasks, "read.yml")
    argv = [str(ANSIBLE), "--check", "-i", str(inventory), "-f", str(forks), str(playbook)]
    return argv, env


def ansible_files(
    base: Path, lab: SshLab, hosts: list[str], tasks: list[dict[str, Any]], name: str
) -> tuple[Path, Path, dict[str, str]]:
    """The playbook `name` of `tasks` and the inventory of `hosts` (one line each), written
    under `base`, and the environment that runs ansible-playbook over the lab's SSH as fast
    as it goes (pipelining, one kept connection a host)."""
    base.mkdir(parents=True, exist_ok=True)
    playbook = base / name
    playbook.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    inventory = base / "inventory.ini"
    inventory.write_text(
        "\n".join(hosts)
        + f"\n[all:vars]\nansible_ssh_common_args=-F {lab.config}\n"
        + "ansible_python_interpreter=/usr/bin/python3\n"
    )
    (base / "cp").mkdir(parents=True, exist_ok=True)
    env = {
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=60s",
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(base / "cp"),
        "ANSIBLE_LOCAL_TEMP": str(base / "tmp"),
        "ANSIBLE_HOME": str(base / "home"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
    }
    return playbook, inventory, env


def sections_of(template: Path, per_knob: bool = False) -> list[list[str]]:
    """The files of each profile section (or of each knob in it), then the rest of what tune
    reads (identity, checks, tune's own files), expanded on the template host."""
    profile = load_profile(PROFILE).profile
    host = SnapshotHost(template)
    everything = list(host.fetch(request(profile)).contents)
    sections, seen = [], set()
    for kind, spec in profile.sections():
        for part in knobs(spec) if per_knob else [spec]:
            paths = list(host.fetch(kind.request(part)).contents)
            sections.append(paths)
            seen.update(paths)
    sections.append([p for p in everything if p not in seen])
    return [s for s in sections if s]


def knobs(spec: Any) -> list[Any]:
    """A section's spec cut into one spec per entry: a mapping per key, a list per item, a
    section of named settings (cpu, cmdline) per setting and then per key or item."""
    if isinstance(spec, dict):
        return [{key: value} for key, value in spec.items()]
    if isinstance(spec, list):
        return [[item] for item in spec]
    if is_dataclass(spec):
        parts = []
        for f in fields(spec):
            value = getattr(spec, f.name)
            if value is None or value == [] or value == {}:
                continue
            pieces = knobs(value) if isinstance(value, dict | list) else [value]
            parts += [type(spec)(**{f.name: piece}) for piece in pieces]
        return parts
    return [spec]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hosts", type=int)
    parser.add_argument("--forks", type=int, default=20)
    parser.add_argument("--no-ansible", action="store_true", help="Skip ansible-playbook.")
    parser.add_argument(
        "--rounds", type=int, default=3, help="Runs of tune, fabric and ssh (median reported)."
    )
    args = parser.parse_args()
    with_ansible = not args.no_ansible and ANSIBLE.exists()
    prepare_lab()
    with tempfile.TemporaryDirectory(prefix="tune-fleet-") as scratch:
        base = Path(scratch)
        template = minimal_host(TUNED, PROFILE, base / "template")
        roots = {f"h{n}": clone_host(template, base / f"h{n}") for n in range(1, args.hosts + 1)}
        files = SnapshotHost(template).fetch(request(load_profile(PROFILE).profile)).contents
        cat = 'cd "$TUNE_ROOT" && cat -- ' + " ".join(shlex.quote(f".{p}") for p in files)
        lab = SshLab(base / "lab", roots)
        try:
            lab.start()
            names = list(roots)
            forks = str(args.forks)
            tune = [sys.executable, "-m", "reconciler.cli", "plan", str(PROFILE)]
            tune += ["--ssh-config", str(lab.config), "--forks", forks, "--format", "json"]
            commands = {
                "tune plan": tune + [a for n in names for a in ("-H", n)],
                "bare fabric": [
                    sys.executable, "-c", FABRIC_BASELINE, str(lab.config), forks, cat, *names
                ],
                "plain ssh": [
                    sys.executable, "-c", SSH_BASELINE, str(lab.config), forks, cat, *names
                ],
            }  # fmt: skip
            # Warm-up, not measured: tune's profile cache and bytecode, as on any later run.
            measure("warm-up", [*tune, "-H", names[0]], lab, 1)
            # Alternating rounds, so that load on a shared machine hits every tool alike; each
            # tool's round with the median wall time is reported.
            rounds: dict[str, list[Measured]] = {name: [] for name in commands}
            for _ in range(args.rounds):
                for name, argv in commands.items():
                    rounds[name].append(measure(name, argv, lab, len(names)))
            runs = [sorted(r, key=lambda m: m.wall)[len(r) // 2] for r in rounds.values()]
            if with_ansible:
                for name, per_knob in [("ansible", False), ("ansible/knob", True)]:
                    tasks = sections_of(template, per_knob)
                    argv, env = ansible_run(base / name, lab, names, tasks, args.forks)
                    runs.append(measure(name, argv, lab, len(names), env, success=(0,)))
        finally:
            lab.stop()
    fabric = runs[1]
    cpus = os.cpu_count()
    print(
        f"{args.hosts} hosts, forks {args.forks}, {len(files)} files per host, {cpus} CPUs, "
        f"median of {args.rounds} rounds (ansible: one)"
    )
    print(
        f"{'':12} {'wall s':>7} {'vs fabric':>9} {'ctl CPU s':>9} {'ctl ms/host':>11} "
        f"{'peak MB':>8} {'target ms/host':>14} {'conn/host':>9} {'exec/host':>9}"
    )
    for run in runs:
        print(
            f"{run.name:12} {run.wall:7.2f} {run.wall / fabric.wall:8.2f}x {run.cpu:9.2f} "
            f"{1000 * run.cpu / args.hosts:11.1f} {run.rss_mb:8.1f} "
            f"{1000 * run.target_cpu:14.1f} {run.connections:9.2f} {run.execs:9.2f}"
        )
    print("(peak MB: the largest single process; plain ssh runs one ssh client per host)")
    if not with_ansible:
        print(f"(ansible skipped: {ANSIBLE} missing or --no-ansible)")


if __name__ == "__main__":
    main()
