"""A fleet's apply over N loopback SSH hosts: the runtime phase against Ansible, and the reboot
phase rolled out in waves against its ideal wall time.

    python benchmarks/rollout.py N [--forks 20] [--reboot-seconds 5] [--no-ansible] [--profile DIR]
                                   [--serial 1,5,25% --serial 10 --serial 50%]

Needs root and openssh-server (as the SSH tests do). Sets up N hosts (copies of the untuned
example host, cut to the files the Blackwell profile reads, with GRUB_DEFAULT=saved for the
try-once boot) behind private sshd servers on 127.0.0.x, then measures, each in its own
process, with every host reset to the untuned copy before each run:

- runtime: `tune apply PROFILE --runtime-only --yes --no-probes` over the N hosts, where
  PROFILE is the Blackwell profile's sysctl section (what both tools can apply alike), against
  `ansible-playbook` applying the same settings with the same forks: one `shell` task per
  sysctl key (read, write when it differs, read back, `changed` only when it wrote: what
  `ansible.posix.sysctl` does, written with the builtin module so that no collection is needed)
  and a `file` and a `copy` task writing the same /etc/sysctl.d file tune writes; pipelining and
  ControlPersist on, facts off. Ansible comes from the benchmark's own venv
  (`python3 -m venv benchmarks/.venv && benchmarks/.venv/bin/pip install ansible-core`).
- rollout: `tune apply BLACKWELL --reboot-phase --reboot --no-probes --yes --serial SHAPE`
  (the kernel command line, the reboot, the verification) for each shape, on hosts whose live
  settings were applied beforehand (the verification checks they hold), each host's
  emulated reboot taking `--reboot-seconds` (the lab's `/.tune-emulate/reboot-seconds`). The
  ideal is waves x (reboot + verify), where reboot + verify is what one more wave costs: the
  wall time of two hosts in two waves less that of one host in one. Everything else (the
  start, observing the fleet, the waves' width) is overhead.
- floor: the same waves by a bare fabric script that only starts each host's emulated reboot,
  waits for its new boot id on a second connection and reads /proc/cmdline (FABRIC_ROLLOUT),
  with its ideal and overhead counted the same way, and tune's wall time as a multiple of it:
  what the lab itself costs any SSH tool, since the emulated hosts share the controller's CPUs.

For each it prints wall time, controller CPU (the process and its children), peak resident
memory of the largest process (fleet.py's `measure`), the targets' CPU per host (the lab's sshd
sessions and scripts, on the same machine as the controller) and connections and exec requests
per host. `--profile DIR` samples each tune run with py-spy (every thread, not only the main one
as cProfile would), as collapsed stacks.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fleet import ANSIBLE, Measured, ansible_files, prepare_lab
from fleet import measure as measure_run

PROJECT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(PROJECT), str(PROJECT / "tests")]

from ssh_fixture import SshLab, minimal_host  # noqa: E402

from reconciler.profile.load import load_profile  # noqa: E402
from reconciler.rollout.waves import parse_sizes, waves  # noqa: E402

BLACKWELL = PROJECT / "profiles" / "blackwell-8x.yaml"
UNTUNED = PROJECT / "examples" / "hosts" / "rtx6000bw-untuned"
SHAPES = ["1,5,25%", "10", "50%"]
ROLLOUT = ["--no-probes", "--yes", "--reboot-timeout", "300"]

# The floor of a rollout on this lab: what any SSH tool pays for the same waves, doing nothing
# but the unavoidable. Per host, one connection (at most `forks` at once, as tune's) reads the
# boot id and starts the emulated reboot (as lib.sh's emu_reboot does: the new boot id N seconds
# later), and is dropped, as a reboot drops it; a second one waits for the new boot id in one
# exec (polling on the host at tune's interval with the shell's `read`, as tune's wait does)
# and reads /proc/cmdline.
# Every host of a wave waits at once, as tune's do. No boot configuration, no journal, no
# verification: what two SSH sessions a host cost on the cores the controller shares with every
# emulated host.
FABRIC_ROLLOUT = """
import json, shlex, sys, threading
from concurrent.futures import ThreadPoolExecutor
from fabric import Config, Connection
config_path, forks, poll, cut = sys.argv[1:]
config = Config(runtime_ssh_path=config_path)
connecting = threading.BoundedSemaphore(int(forks))
# Connections built at once from one shared Config race inside invoke's lazy merging; tune
# builds them under a lock, and so does the floor.
building = threading.Lock()
def connect(host):
    with building:
        return Connection(host, config=config)
BOOT = '"$TUNE_ROOT/proc/sys/kernel/random/boot_id"'
# The new boot id as emu_boot writes it: whole, by a rename.
REBOOT = (
    'r="$TUNE_ROOT"; read -r n <"$r/.tune-emulate/reboot-seconds"; '
    'id="$r/proc/sys/kernel/random/boot_id"; '
    '(sleep "$n" && cat /proc/sys/kernel/random/uuid >"$id.new" && mv -f "$id.new" "$id") '
    '</dev/null >/dev/null 2>&1 &'
)
def roll(host):
    with connecting, connect(host) as connection:
        old = connection.run("cat " + BOOT + "; " + REBOOT, hide=True).stdout.strip()
    # Read with the shell's own `read`, as tune's wait reads a boot id; 300 s at most.
    wait = (
        f"i=0; while read -r v <{BOOT} && [ \\"$v\\" = {shlex.quote(old)} ]; do "
        f"[ $i -lt {int(300 / float(poll))} ] || exit 1; sleep {poll}; i=$((i + 1)); done; "
    )
    with connect(host) as connection:
        return len(connection.run(wait + 'cat "$TUNE_ROOT/proc/cmdline"', hide=True).stdout)
for wave in json.loads(cut):
    with ThreadPoolExecutor(len(wave)) as pool:
        assert all(pool.map(roll, wave))
"""


def sysctl_profile(path: Path) -> dict[str, str]:
    """The Blackwell profile's sysctl keys as a profile of their own; returns key -> value."""
    entries = load_profile(BLACKWELL).profile.sysctl
    values = {key: str(entry.value) for key, entry in entries.items()}
    path.write_text(json.dumps({"name": "bench-sysctl", "sysctl": values}, indent=1))
    return values


def template(base: Path) -> Path:
    root = minimal_host(UNTUNED, BLACKWELL, base / "template")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0", "GRUB_DEFAULT=saved"))
    return root


def reset(roots: dict[str, Path], source: Path, reboot_seconds: float | None = None) -> None:
    """Every host back to `source`, at the same path its sshd serves."""
    for root in roots.values():
        shutil.rmtree(root)
        shutil.copytree(source, root, symlinks=True)
        if reboot_seconds is not None:
            marker = root / ".tune-emulate/reboot-seconds"
            marker.parent.mkdir(exist_ok=True)
            marker.write_text(f"{reboot_seconds:g}\n")


def persisted(source: Path, profile: Path, base: Path) -> dict[str, str]:
    """What tune's runtime apply writes under /etc for `profile` (its sysctl.d file): the
    Ansible playbook writes the same bytes, so both leave the same state."""
    etc = (source / "etc").rglob("*")
    before = {p.relative_to(source): p.read_bytes() for p in etc if p.is_file()}
    host = applied_copy(source, profile, base / "persisted")
    return {
        "/" + str(p.relative_to(host)): p.read_text()
        for p in (host / "etc").rglob("*")
        if p.is_file() and before.get(p.relative_to(host)) != p.read_bytes()
    }


def applied_copy(source: Path, profile: Path, host: Path) -> Path:
    """A copy of `source` at `host` with `profile`'s live settings applied."""
    shutil.copytree(source, host, symlinks=True)
    tune = [sys.executable, "-m", "reconciler.cli", "apply", str(profile), "--root", str(host)]
    done = run_quietly([*tune, "--runtime-only", "--yes", "--no-probes"])
    assert done == 0, done
    return host


def run_quietly(argv: list[str]) -> int:
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    return subprocess.run(argv, env=env, capture_output=True, check=False).returncode


def ansible_apply(
    base: Path, lab: SshLab, values: dict[str, str], files: dict[str, str], forks: int
) -> tuple[list[str], dict[str, str]]:
    """The playbook that applies `values` (one task a key) and writes `files`, and its env."""
    tasks: list[dict[str, object]] = []
    for key, value in values.items():
        path = shlex.quote("./proc/sys/" + key.replace(".", "/"))
        want = shlex.quote(" ".join(value.split()))
        script = (
            f'cd "$TUNE_ROOT" && now=$(tr "\\t" " " <{path}) && '
            f'if [ "$now" = {want} ]; then echo same; exit 0; fi && '
            f"printf '%s\\n' {want} >{path} && "
            f'[ "$(tr "\\t" " " <{path})" = {want} ] && echo wrote'
        )
        tasks.append(
            {
                "name": f"sysctl {key}",
                "ansible.builtin.shell": script,
                "register": "out",
                "changed_when": "out.stdout == 'wrote'",
            }
        )
    for path, text in files.items():
        # tune makes the directory where the host lacks it (and journals that it did).
        folder = {"path": "{{ root }}" + path.rsplit("/", 1)[0], "state": "directory"}
        tasks.append({"name": f"directory of {path}", "ansible.builtin.file": folder})
        tasks.append(
            {
                "name": f"persist {path}",
                "ansible.builtin.copy": {
                    "dest": "{{ root }}" + path,
                    "content": text,
                    "mode": "0644",
                },
            }
        )
    hosts = [f"{name} root={root}" for name, root in lab.roots.items()]
    playbook, inventory, env = ansible_files(base, lab, hosts, tasks, "apply.yml")
    # The lab's sshd runs no sftp subsystem: `copy` sends its file over the session.
    env["ANSIBLE_SSH_TRANSFER_METHOD"] = "piped"
    return [str(ANSIBLE), "-i", str(inventory), "-f", str(forks), str(playbook)], env


def floor(
    lab: SshLab,
    names: list[str],
    shapes: list[str],
    walls: dict[str, float],
    source: Path,
    roots: dict[str, Path],
    args: argparse.Namespace,
) -> list[str]:
    """FABRIC_ROLLOUT over the same waves: its own ideal (its one more wave, measured as tune's
    is) and overhead, and tune's wall time as a multiple of it."""
    base = [sys.executable, "-c", FABRIC_ROLLOUT, str(lab.config), str(args.forks)]
    base.append(args.reboot_poll)

    # It changes nothing but the boot id: one reset serves every run.
    reset(roots, source, args.reboot_seconds)

    def run(name: str, cut: list[list[str]]) -> Measured:
        hosts = sum(len(wave) for wave in cut)
        return measure_run(name, [*base, json.dumps(cut)], lab, hosts, success=(0,))

    one = run("floor 1 wave", [names[:1]])
    pair = run("floor 2 waves", [names[:1], names[1:2]])
    per_wave = pair.wall - one.wall
    lines = [
        row("floor, 1 host", one, 1),
        row("floor, 2 hosts", pair, 2, f"a wave: {per_wave:.2f} s"),
    ]
    for shape in shapes:
        cut = waves(names, parse_sizes(shape, "--serial"))
        done = run(f"floor {shape}", cut)
        overhead = 100 * (done.wall / (len(cut) * per_wave) - 1)
        said = f"overhead {overhead:+.1f}%, tune {walls[shape] / done.wall:.2f}x"
        lines.append(row(f"floor {shape}", done, len(names), said))
    return lines


def row(name: str, run: Measured, hosts: int, extra: str = "") -> str:
    return (
        f"{name:18} {run.wall:8.2f} {run.cpu:9.2f} {1000 * run.cpu / hosts:11.1f} "
        f"{run.rss_mb:8.1f} {1000 * run.target_cpu:10.1f} {run.connections:5.1f}/{run.execs:<5.1f} "
        f"{extra}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hosts", type=int)
    parser.add_argument("--forks", type=int, default=20)
    parser.add_argument("--reboot-seconds", type=float, default=5.0)
    parser.add_argument(
        "--serial",
        action="append",
        help="Wave shapes (default: " + " ".join(SHAPES).replace("%", "%%") + ").",
    )
    parser.add_argument(
        "--reboot-poll", default="0.25", help="tune's --reboot-poll: each poll is an SSH exec."
    )
    parser.add_argument("--no-ansible", action="store_true", help="Skip ansible-playbook.")
    parser.add_argument("--no-rollout", action="store_true", help="Skip the reboot phase.")
    parser.add_argument(
        "--profile",
        type=Path,
        help="Sample each tune run with py-spy (pip install py-spy) into this directory.",
    )
    args = parser.parse_args()
    shapes = args.serial or SHAPES
    with_ansible = not args.no_ansible and ANSIBLE.exists()
    prepare_lab()
    with tempfile.TemporaryDirectory(prefix="tune-rollout-") as scratch:
        base = Path(scratch)
        # The controller's rollout journals: this run's own, never the user's.
        os.environ["TUNE_STATE_DIR"] = str(base / "state")
        source = template(base)
        names = [f"h{n}" for n in range(1, args.hosts + 1)]
        roots = {name: base / name for name in names}
        for root in roots.values():
            shutil.copytree(source, root, symlinks=True)
        profile = base / "sysctl.yaml"
        values = sysctl_profile(profile)
        lab = SshLab(base / "lab", roots)
        hosts = [a for n in names for a in ("-H", n)]
        tune = [sys.executable, "-m", "reconciler.cli", "apply", "--ssh-config", str(lab.config)]

        def measure(
            name: str, argv: list[str], lab: SshLab, hosts: int, *rest: Any, **named: Any
        ) -> Measured:
            if args.profile and argv[0] == sys.executable:
                args.profile.mkdir(parents=True, exist_ok=True)
                # py-spy samples every thread (cProfile sees the main one only), collapsed.
                out = args.profile.resolve() / (name.replace(" ", "_") + ".txt")
                argv = ["py-spy", "record", "-r", "250", "-f", "raw", "-o", str(out), "--", *argv]
            return measure_run(name, argv, lab, hosts, *rest, **named)

        lines: list[str] = []
        try:
            lab.start()
            # Warm-up, not measured: tune's profile caches and bytecode, as on any later run.
            measure("warm-up", [*tune, str(profile), "--runtime-only", "-y", "-H", "h1"], lab, 1)
            reset(roots, source)
            runtime = [*tune, str(profile), "--runtime-only", "--yes", "--no-probes"]
            runtime += ["--forks", str(args.forks), *hosts]
            ours = measure("tune runtime", runtime, lab, len(names))
            lines.append(row("tune apply", ours, len(names), f"{len(values)} sysctl keys"))
            if with_ansible:
                reset(roots, source)
                files = persisted(source, profile, base)
                argv, env = ansible_apply(base / "ansible", lab, values, files, args.forks)
                theirs = measure("ansible", argv, lab, len(names), env, success=(0,))
                ratio = theirs.wall / ours.wall
                lines.append(row("ansible-playbook", theirs, len(names), f"{ratio:.1f}x tune"))
            if not args.no_rollout:
                lines.append("")
                # The live settings applied beforehand, as a fleet's are before its boot
                # configuration rolls out (the verification checks they still hold).
                source = applied_copy(source, BLACKWELL, base / "runtime-applied")
                reset(roots, source, args.reboot_seconds)
                rollout = [*tune, str(BLACKWELL), "--reboot-phase", "--reboot", *ROLLOUT]
                rollout += ["--reboot-poll", args.reboot_poll, "--forks", str(args.forks)]
                one = measure("1 wave", [*rollout, "--serial", "1", "-H", "h1"], lab, 1)
                reset(roots, source, args.reboot_seconds)
                two = [*rollout, "--serial", "1", "-H", "h1", "-H", "h2"]
                pair = measure("2 waves", two, lab, 2)
                # What one more wave costs: its reboot and its verification (and the write of
                # the boot configuration before them). The rest of a rollout's wall time (the
                # start, the observation of every host) counts as overhead.
                per_wave = pair.wall - one.wall
                lines.append(row("1 host, 1 wave", one, 1))
                lines.append(row("2 hosts, 2 waves", pair, 2, f"a wave: {per_wave:.2f} s"))
                walls: dict[str, float] = {}
                for shape in shapes:
                    reset(roots, source, args.reboot_seconds)
                    count = len(waves(names, parse_sizes(shape, "--serial")))
                    run = measure(shape, [*rollout, "--serial", shape, *hosts], lab, len(names))
                    walls[shape] = run.wall
                    ideal = count * per_wave
                    overhead = 100 * (run.wall / ideal - 1)
                    said = f"{count} waves, ideal {ideal:.1f} s, overhead {overhead:+.1f}%"
                    lines.append(row(f"--serial {shape}", run, len(names), said))
                lines.append("")
                lines += floor(lab, names, shapes, walls, source, roots, args)
        finally:
            lab.stop()
    print(
        f"{args.hosts} hosts, forks {args.forks}, reboot {args.reboot_seconds:g} s, "
        f"{os.cpu_count()} CPUs"
    )
    header = f"{'':18} {'wall s':>8} {'ctl CPU s':>9} {'ctl ms/host':>11} {'peak MB':>8}"
    print(f"{header} {'tgt ms/host':>10} conn/exec per host")
    print("\n".join(lines))
    if not with_ansible:
        print(f"(ansible skipped: {ANSIBLE} missing or --no-ansible)")


if __name__ == "__main__":
    main()
