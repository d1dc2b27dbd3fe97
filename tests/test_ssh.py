"""`tune plan` over SSH against real OpenSSH servers on loopback addresses.

Each address serves a different snapshot (sshd's `Match LocalAddress` sets TUNE_ROOT), so a
fleet of hosts in different states runs on this one machine; the sshd logs show how many
connections and exec requests each host got.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import BLACKWELL, PROJECT, TUNED, UNTUNED, run_tune
from ssh_fixture import (
    SshLab,
    StartLab,
    clone_host,
    keygen,
    minimal_host,
    replace_file,
    sshd_available,
)

from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.ssh import SshSettings, SshSetup
from reconciler.hosts.targets import Target
from reconciler.plan.observe import request
from reconciler.profile.load import load_profile

pytestmark = pytest.mark.skipif(
    not sshd_available(), reason="needs root and openssh-server (.ci/run installs it)"
)

SWAPPINESS = "/proc/sys/vm/swappiness"


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The example hosts cut down to the files the Blackwell profile reads."""
    base = tmp_path_factory.mktemp("templates")
    return {
        "tuned": minimal_host(TUNED, BLACKWELL, base / "tuned"),
        "untuned": minimal_host(UNTUNED, BLACKWELL, base / "untuned"),
    }


def plan(lab: SshLab, *args: str | Path) -> tuple[int, str, str]:
    result = run_tune("plan", BLACKWELL, "--ssh-config", lab.config, *args)
    return result.code, result.out, result.err


def without_source(plan_json: dict) -> dict:
    plan_json["host"].pop("source")
    return plan_json


def test_one_host_over_ssh_plans_exactly_like_its_snapshot(start_lab: StartLab) -> None:
    lab = start_lab({"h1": UNTUNED})
    code, out, err = plan(lab, "-H", "h1", "--format", "json")
    assert (code, err) == (2, "")
    over_ssh = json.loads(out)
    assert over_ssh["host"]["source"] == "ssh h1"
    local = run_tune("plan", BLACKWELL, "--root", UNTUNED, "--format", "json")
    assert without_source(over_ssh) == without_source(json.loads(local.out))
    assert lab.connections() == {"h1": 1}
    assert lab.exec_requests() == {"h1": 1}, "one exec request observes the whole host"

    setup = SshSetup(SshSettings(ssh_config=str(lab.config)))
    host = setup.host(Target("h1", "h1"))
    wanted = request(load_profile(BLACKWELL).profile)
    try:
        assert host.fetch(wanted) == SnapshotHost(UNTUNED).fetch(wanted)
        transport = host._transport()
        # AEAD, decrypted in C: paramiko's default CTR checks each packet's HMAC in Python.
        assert (transport.local_cipher, transport.remote_cipher) == ("aes128-gcm@openssh.com",) * 2
    finally:
        host.close()


def test_twenty_hosts_in_mixed_states_one_exec_request_each(
    start_lab: StartLab, templates: dict[str, Path], tmp_path: Path
) -> None:
    roots = {}
    for n in range(1, 21):
        state = "untuned" if n % 3 == 0 else "tuned"
        roots[f"h{n}"] = clone_host(templates[state], tmp_path / "hosts" / f"h{n}")
    replace_file(roots["h7"], SWAPPINESS, "30\n")  # one setting drifted on a tuned host
    lab = start_lab(roots)
    args = [a for n in range(1, 21) for a in ("-H", f"h{n}")]
    code, out, err = plan(lab, *args, "--format", "json")
    assert (code, err) == (2, "")
    hosts = {entry["target"]: entry for entry in json.loads(out)}
    assert list(hosts) == [f"h{n}" for n in range(1, 21)]
    expected = {name: (29, 3) if n % 3 == 0 else (0, 0) for n, name in enumerate(roots, 1)}
    expected["h7"] = (1, 0)
    counts = {
        name: (entry["summary"]["changes"], entry["summary"]["failed_checks"])
        for name, entry in hosts.items()
    }
    assert counts == expected
    assert hosts["h7"]["changes"][0]["id"] == "sysctl:vm.swappiness"
    assert lab.connections() == {name: 1 for name in roots}
    assert lab.exec_requests() == {name: 1 for name in roots}


@contextlib.contextmanager
def silent_server() -> Iterator[tuple[int, threading.Event]]:
    """Accepts TCP connections on 127.0.0.1 and never says a word (a hung sshd)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return
            accepted.set()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        listener.close()
        for connection in held:
            connection.close()


def test_down_and_hung_hosts_fail_alone(start_lab: StartLab) -> None:
    lab = start_lab({"h1": TUNED, "h2": UNTUNED})
    with silent_server() as (hung_port, _):
        down = f"127.0.0.250:{lab.port['h1']}"
        hung = f"127.0.0.1:{hung_port}"
        code, out, err = plan(
            lab, "-H", "h1", "-H", down, "-H", "h2", "-H", hung, "--connect-timeout", "1"
        )
    assert err == ""
    assert code == 1, "a failed host makes the fleet exit 1, even though h2 has changes"
    table = out.split("\n\n")[0].splitlines()
    assert [row.split()[:2] for row in table] == [
        ["HOST", "STATUS"],
        ["h1", "in"],
        [down, "error"],
        ["h2", "29"],
        [hung, "error"],
    ]
    assert "4 hosts: 1 in sync, 1 with changes, 2 unreachable or failed." in out
    assert f"{down}: cannot connect to 127.0.0.250:{lab.port['h1']}: connection refused." in out
    assert f"{hung}: 127.0.0.1:{hung_port} accepted the connection but the SSH handshake" in out
    assert "== Plan A, for 1 host: h2\nRuntime phase" in out
    assert "== h1" not in out, "hosts in sync have no details"


def known_hosts_without(lab: SshLab, name: str) -> list[str]:
    entry = f"[{lab.address[name]}]:{lab.port[name]} "
    lines = lab.known_hosts.read_text().splitlines()
    kept = [line for line in lines if not line.startswith(entry)]
    assert len(kept) == len(lines) - 1
    return kept


def test_unknown_host_key_is_refused_with_the_fix(start_lab: StartLab) -> None:
    lab = start_lab({"h1": TUNED, "h2": TUNED})
    lab.known_hosts.write_text("\n".join(known_hosts_without(lab, "h2")) + "\n")
    code, out, _ = plan(lab, "-H", "h1", "-H", "h2")
    assert code == 1
    port, fingerprint = lab.port["h2"], host_fingerprint(lab)
    assert (
        f"h2: unknown host key for [127.0.0.3]:{port} (ssh-ed25519 key {fingerprint}); tune "
        "refuses unknown keys: check the fingerprint with the host's owner, then add it with "
        f"`ssh-keyscan -p {port} 127.0.0.3 >> {lab.known_hosts}`, or pass --accept-new-host-keys."
    ) in out
    assert lab.exec_requests() == {"h1": 1}, "nothing runs on a host whose key is not trusted"


def host_fingerprint(lab: SshLab) -> str:
    public = lab.base / "ssh_host_ed25519_key.pub"
    listed = subprocess.run(["ssh-keygen", "-lf", public], capture_output=True, text=True)
    return listed.stdout.split()[1]


def test_changed_host_key_is_refused_even_when_accepting_new_keys(start_lab: StartLab) -> None:
    lab = start_lab({"h1": TUNED, "h2": TUNED})
    impostor = keygen(lab.base / "other_key").with_suffix(".pub").read_text().split()
    lines = known_hosts_without(lab, "h2")
    lines.append(f"[127.0.0.3]:{lab.port['h2']} {impostor[0]} {impostor[1]}")
    lab.known_hosts.write_text("\n".join(lines) + "\n")
    before = lab.known_hosts.read_text()
    for extra in ([], ["--accept-new-host-keys"]):
        code, out, _ = plan(lab, "-H", "h1", "-H", "h2", *extra)
        assert code == 1
        assert f"h2: the host key of [127.0.0.3]:{lab.port['h2']} CHANGED" in out
        assert f"presents ssh-ed25519 key {host_fingerprint(lab)}" in out
        assert f"ssh-keygen -f {lab.known_hosts} -R '[127.0.0.3]:{lab.port['h2']}'" in out
    assert lab.known_hosts.read_text() == before
    assert lab.exec_requests() == {"h1": 2}


def test_accept_new_host_keys_records_the_key_like_ssh(start_lab: StartLab) -> None:
    lab = start_lab({"h1": TUNED})
    lab.known_hosts.write_text("")
    assert plan(lab, "-H", "h1")[0] == 1
    assert plan(lab, "-H", "h1", "--accept-new-host-keys")[0] == 0
    recorded = lab.known_hosts.read_text().split()
    server = (lab.base / "ssh_host_ed25519_key.pub").read_text().split()
    assert recorded == [f"[127.0.0.2]:{lab.port['h1']}", *server[:2]]
    assert plan(lab, "-H", "h1")[0] == 0, "the recorded key is trusted from then on"


def test_proxyjump_alias_reaches_a_host_through_another(start_lab: StartLab) -> None:
    lab = start_lab({"h1": UNTUNED, "h2": TUNED})
    with open(lab.config, "a") as config:
        config.write(
            f"\nHost behind\n    HostName 127.0.0.3\n    Port {lab.port['h2']}\n"
            f"    User root\n    IdentityFile {lab.client_key}\n"
            f"    UserKnownHostsFile {lab.known_hosts}\n    ProxyJump h1\n"
        )
    code, out, _ = plan(lab, "-H", "behind", "--format", "json")
    assert code == 0
    assert json.loads(out)["host"]["source"] == "ssh behind"
    assert lab.connections() == {"h1": 1, "h2": 1}
    assert lab.exec_requests() == {"h2": 1}, "the jump host only forwards"


def test_ansible_inventory_with_limit(start_lab: StartLab, tmp_path: Path) -> None:
    lab = start_lab({"h1": TUNED, "h2": UNTUNED, "h3": TUNED})
    inventory = tmp_path / "hosts.ini"
    lines = ["[gpu]"]
    for n, name in enumerate(["gpu-a", "gpu-b", "gpu-c"], 1):
        lines.append(
            f"{name} ansible_host=127.0.0.{n + 1} ansible_port={lab.port[f'h{n}']} "
            f"ansible_user=root ansible_ssh_private_key_file={lab.client_key}"
        )
    inventory.write_text("\n".join([*lines, "[canary]", "gpu-b", ""]))
    code, out, _ = plan(lab, "--inventory", inventory, "--format", "json")
    assert code == 2
    assert [(e["target"], e["status"]) for e in json.loads(out)] == [
        ("gpu-a", "in-sync"),
        ("gpu-b", "changes"),
        ("gpu-c", "in-sync"),
    ]
    code, out, _ = plan(lab, "--inventory", inventory, "--limit", "gpu:!canary")
    assert code == 0
    assert "2 hosts: 2 in sync, 0 with changes, 0 unreachable or failed." in out


def test_snapshot_of_a_remote_host_plans_offline(start_lab: StartLab, tmp_path: Path) -> None:
    lab = start_lab({"h1": UNTUNED})
    archive = tmp_path / "h1.tar.gz"
    result = run_tune("snapshot", BLACKWELL, "-H", "h1", "--ssh-config", lab.config, "-o", archive)
    assert (result.code, result.out) == (0, f"{archive}: 1324 files from ssh h1\n")
    offline = run_tune("plan", BLACKWELL, "--root", archive, "--format", "json")
    online = plan(lab, "-H", "h1", "--format", "json")[1]
    assert without_source(json.loads(offline.out)) == without_source(json.loads(online))


def test_a_host_that_never_answers_hits_the_command_timeout(
    start_lab: StartLab, templates: dict[str, Path], tmp_path: Path
) -> None:
    stuck = clone_host(templates["tuned"], tmp_path / "stuck")
    fifo = stuck / SWAPPINESS.lstrip("/")
    fifo.unlink()
    os.mkfifo(fifo)  # head blocks opening it, as on a hung NFS or sysfs read
    lab = start_lab({"h1": TUNED, "h2": stuck})
    try:
        code, out, _ = plan(lab, "-H", "h1", "-H", "h2", "--command-timeout", "1")
    finally:
        with contextlib.suppress(OSError):  # release the blocked remote head
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert code == 1
    assert "h2: no complete answer within 1 s (command timeout)." in out
    assert "h1    in sync" in out


def test_ctrl_c_stops_a_fleet_run_at_once(start_lab: StartLab) -> None:
    lab = start_lab({"h1": TUNED})
    with silent_server() as (hung_port, accepted):
        tune = subprocess.Popen(
            [
                *(sys.executable, "-m", "reconciler.cli", "plan", str(BLACKWELL)),
                *("--ssh-config", str(lab.config), "-H", "h1", "-H", f"127.0.0.1:{hung_port}"),
                *("--connect-timeout", "300"),
            ],
            cwd=PROJECT,
            env={**os.environ, "PYTHONPATH": str(PROJECT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert accepted.wait(60), "tune never reached the hung host"
            tune.send_signal(signal.SIGINT)
            _, err = tune.communicate(timeout=60)
        finally:
            if tune.poll() is None:
                tune.kill()
    assert tune.returncode == 130
    assert err.strip().splitlines()[-1] == "aborted"
    assert "Traceback" not in err


def test_local_and_snapshot_runs_never_load_ssh_libraries() -> None:
    code = (
        "import sys\n"
        "from reconciler.cli.main import main\n"
        "try:\n"
        f"    main(['plan', {str(BLACKWELL)!r}, '--root', {str(TUNED)!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('paramiko', 'fabric')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT,
        env={**os.environ, "PYTHONPATH": str(PROJECT)},
        capture_output=True,
        text=True,
    )
    assert done.stdout.splitlines()[-1] == "[]"


def test_sudo_runs_the_remote_shell_through_sudo_without_a_password_prompt() -> None:
    host = SshSetup(SshSettings(sudo=True)).host(Target("h", "h"))
    assert host.command == "sudo -n -- sh"
    assert SshSetup(SshSettings()).host(Target("h", "h")).command == "sh"


def test_check_over_ssh_prints_drift_per_host_for_cron(
    start_lab: StartLab, templates: dict[str, Path], tmp_path: Path
) -> None:
    roots = {f"c{n}": clone_host(templates["tuned"], tmp_path / f"c{n}") for n in (1, 2, 3)}
    replace_file(roots["c2"], SWAPPINESS, "60\n")
    lab = start_lab(roots)
    hosts = [a for name in roots for a in ("-H", name)]
    result = run_tune("check", BLACKWELL, "--ssh-config", lab.config, *hosts, "--quiet")
    assert (result.code, result.err) == (2, "")
    assert result.out == "c2: DRIFT sysctl vm.swappiness: 60 (want 10)\n"
    # With PROFILE given and no run journal on the targets: one exec request observes each.
    assert lab.exec_requests() == {"c1": 1, "c2": 1, "c3": 1}
    report = run_tune("check", BLACKWELL, "--ssh-config", lab.config, *hosts, "--format", "json")
    statuses = {entry["target"]: entry["status"] for entry in json.loads(report.out)}
    assert statuses == {"c1": "in-sync", "c2": "drift", "c3": "in-sync"}
    replace_file(roots["c2"], SWAPPINESS, "10\n")
    clean = run_tune("check", BLACKWELL, "--ssh-config", lab.config, *hosts, "--quiet")
    assert (clean.code, clean.out) == (0, "")


def test_check_over_ssh_without_profile_reads_the_stored_one_and_the_journal(
    start_lab: StartLab, templates: dict[str, Path], tmp_path: Path
) -> None:
    from applied_state import write_applied

    root = clone_host(templates["tuned"], tmp_path / "s1")
    write_applied(root)  # the stored profile and one applied run, as apply leaves them
    replace_file(root, SWAPPINESS, "60\n")
    lab = start_lab({"s1": root})
    result = run_tune("check", "--ssh-config", lab.config, "-H", "s1", "--quiet", "--since-apply")
    assert (result.code, result.err) == (2, "")
    # Over SSH check only reads: no record of first sightings there, so no "since".
    assert result.out == (
        "DRIFT sysctl vm.swappiness: 60 (want 10); changed after apply (tune wrote 10)\n"
    )


def test_check_over_ssh_reads_the_journals_with_the_observation_in_one_exec(
    start_lab: StartLab, templates: dict[str, Path], tmp_path: Path
) -> None:
    """The newest journals come back in the observation's batch; older ones are fetched only
    when none of the newest was applied (here: five rolled-back runs on top of it)."""
    from applied_state import write_applied, write_run

    from reconciler.apply.applied import JOURNAL_BATCH

    roots = {n: clone_host(templates["tuned"], tmp_path / n) for n in ("j1", "j2")}
    for root in roots.values():
        write_applied(root)
        replace_file(root, SWAPPINESS, "60\n")
    for n in range(JOURNAL_BATCH + 1):
        write_run(roots["j2"], run_id=f"20250602T00000{n}Z-bbbbbb", outcome="rolled-back")
    lab = start_lab(roots)
    hosts = [a for name in roots for a in ("-H", name)]
    result = run_tune(
        "check", BLACKWELL, "--ssh-config", lab.config, *hosts, "--quiet", "--since-apply"
    )
    assert (result.code, result.err) == (2, "")
    line = "DRIFT sysctl vm.swappiness: 60 (want 10); changed after apply"
    assert result.out.splitlines() == [f"{name}: {line} (tune wrote 10)" for name in roots]
    assert lab.exec_requests() == {"j1": 1, "j2": 2}


def test_audit_over_ssh_reads_the_host_in_one_exec_and_matches_its_snapshot(
    start_lab: StartLab,
) -> None:
    lab = start_lab({"a1": UNTUNED})
    remote = run_tune("audit", "--ssh-config", lab.config, "-H", "a1", "--format", "json")
    local = run_tune("audit", "--root", UNTUNED, "--format", "json")
    assert (remote.code, remote.err) == (2, "")
    over_ssh, from_snapshot = json.loads(remote.out), json.loads(local.out)
    assert over_ssh["findings"] == from_snapshot["findings"]
    assert over_ssh["good"] == from_snapshot["good"]
    assert lab.exec_requests() == {"a1": 1}
    twice = run_tune("audit", "--ssh-config", lab.config, "-H", "a1", "-H", "a1")
    assert twice.code == 64 and "host a1 is given twice" in twice.err


def test_an_identity_file_is_read_once_per_run_and_left_to_paramiko_when_it_cannot_be(
    tmp_path: Path,
) -> None:
    plain, locked = tmp_path / "id_plain", tmp_path / "id_locked"
    for path, passphrase in ((plain, ""), (locked, "secret")):
        keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)]
        subprocess.run(keygen, check=True)
    setup = SshSetup(SshSettings())
    key = setup.private_key(str(plain))
    assert key is not None and key.get_name() == "ssh-ed25519"
    plain.unlink()
    assert setup.private_key(str(plain)) is key  # not read again
    assert setup.private_key(str(locked)) is None  # needs a passphrase: paramiko's to report
    assert setup.private_key(str(tmp_path / "missing")) is None
