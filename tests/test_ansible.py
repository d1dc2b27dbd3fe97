"""The tune.gpu collection under real ansible-core, against the SSH lab: Ansible connects to each
lab host over SSH, runs the module there, and the module runs the host's `tune` (this checkout's,
on the host's snapshot: tests/ansible_lab.py). The example playbook (examples/ansible/site.yml)
runs as written, but for its reboot task, which reboots the snapshot instead of this machine."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_lab import write_programs
from conftest import UNTUNED, copy_host, run_tune
from ruamel.yaml import YAML
from ssh_fixture import SshLab, sshd_available

PROJECT = Path(__file__).resolve().parent.parent
PLAYBOOK = PROJECT / "examples/ansible/site.yml"
COLLECTION = PROJECT / "ansible_collections/tune/gpu"
BIN = Path(sys.executable).parent
PLAYBOOK_BIN = shutil.which("ansible-playbook", path=str(BIN)) or shutil.which("ansible-playbook")
ANSIBLE_DOC = shutil.which("ansible-doc", path=str(BIN)) or shutil.which("ansible-doc")

needs_ansible = pytest.mark.skipif(
    PLAYBOOK_BIN is None, reason="needs ansible-core (pip install -e '.[test]')"
)
needs_lab = pytest.mark.skipif(not sshd_available(), reason="needs sshd and root for the SSH lab")


def tree(root: Path) -> dict[str, str]:
    """Every file of a snapshot by its digest (and every link by its target)."""
    out = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            out[name] = "-> " + os.readlink(path)
        elif path.is_file():
            out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[name] = "dir"
    return out


class Lab:
    """Lab hosts h1..hN, an inventory of them, and ansible-playbook run against it."""

    def __init__(self, base: Path, ssh: SshLab, reboot: Path, profile: Path) -> None:
        self.base = base
        self.profile = profile
        self.ssh = ssh
        self.reboot = reboot
        self.runs = 0

    def root(self, name: str) -> Path:
        return self.ssh.roots[name]

    def inventory(self) -> Path:
        path = self.base / "inventory.ini"
        hosts = "\n".join(self.ssh.roots)
        python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
        path.write_text(
            f"[gpu]\n{hosts}\n\n[gpu:vars]\nansible_user=root\n"
            f"ansible_ssh_common_args='-F {self.ssh.config}'\n"
            f"ansible_python_interpreter={python}\n"
        )
        return path

    def lab_playbook(self, source: Path = PLAYBOOK, **play: Any) -> Path:
        """`source` as written, but for its reboot task: the snapshot's reboot (a real one would
        reboot this machine), and `play`'s keywords and vars over the play's."""
        yaml = YAML()
        plays = yaml.load(source.read_text())
        for task in plays[0]["tasks"]:
            if "ansible.builtin.reboot" in task:
                task["ansible.builtin.reboot"] = {
                    "reboot_command": str(self.reboot),
                    "boot_time_command": 'cat "$TUNE_ROOT/proc/sys/kernel/random/boot_id"',
                    "reboot_timeout": 60,
                }
        plays[0]["vars"].update({"tune_profile": str(self.profile)} | play.pop("vars", {}))
        plays[0].update(play)
        self.runs += 1
        path = self.base / f"play{self.runs}.yml"
        with path.open("w") as out:
            yaml.dump(plays, out)
        # Never a real reboot: the one reboot task left runs the lab's command.
        for task in yaml.load(path.read_text())[0]["tasks"]:
            for action in (k for k in task if k.split(".")[-1] == "reboot"):
                assert task[action]["reboot_command"] == str(self.reboot), task
        return path

    def play(self, playbook: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
        """ansible-playbook: its exit code, every task result, and what it printed."""
        assert PLAYBOOK_BIN is not None
        (self.base / "ansible-remote").mkdir(mode=0o700, exist_ok=True)
        record = self.base / f"record{self.runs}-{time.monotonic_ns()}.jsonl"
        env = os.environ | {
            "ANSIBLE_COLLECTIONS_PATH": str(PROJECT),
            "ANSIBLE_CALLBACK_PLUGINS": str(Path(__file__).parent / "ansible_callbacks"),
            "ANSIBLE_CALLBACKS_ENABLED": "record",
            "TUNE_ANSIBLE_RECORD": str(record),
            "ANSIBLE_HOME": str(self.base / "ansible-home"),
            "ANSIBLE_LOCAL_TEMP": str(self.base / "ansible-local"),
            "ANSIBLE_REMOTE_TEMP": str(self.base / "ansible-remote"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            "ANSIBLE_PIPELINING": "1",
            # No connection outlives its run (a persisting master would also keep the
            # environment of a lab already stopped), nothing under ~/.ansible.
            "ANSIBLE_SSH_ARGS": "-o ControlMaster=no -o ControlPath=none",
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(self.base / "ansible-cp"),
        }
        done = subprocess.run(
            [PLAYBOOK_BIN, "-i", str(self.inventory()), str(playbook), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.base,
            timeout=600,
        )
        lines = record.read_text().splitlines() if record.exists() else []
        return done.returncode, [json.loads(line) for line in lines], done.stdout + done.stderr


def tail(said: str) -> str:
    """What ansible-playbook printed last, as much as an assertion message can show."""
    return said[-4000:]


def results(records: list[dict[str, Any]], task: str) -> dict[str, dict[str, Any]]:
    """One task's result per host, with `status` (ok, failed, skipped) added."""
    return {r["host"]: r["result"] | {"status": r["status"]} for r in records if r["task"] == task}


LIVE = "Live settings"
BOOT = "Boot configuration, for the next boot"
REBOOT = "Reboot where a boot is pending (this run's, or one left by an earlier run)"
VERIFY = "Keep the new boot configuration, or roll it back and fail the host"


# Small, so that a playbook's many tune runs stay quick: live settings and a boot parameter.
PROFILE = """\
name: ansible-lab
description: Live settings and a boot parameter, for the Ansible lab
sysctl:
  kernel.numa_balancing:
    value: 0
    priority: P0
    reason: "NUMA page migration stalls DMA"
  kernel.nmi_watchdog:
    value: 0
    priority: P2
    reason: "the NMI watchdog interrupts every core"
cmdline:
  set:
    amd_pstate:
      value: active
      priority: P1
      reason: "amd-pstate-epp drives CPPC directly"
"""


@contextlib.contextmanager
def started_lab(base: Path, count: int) -> Iterator[Lab]:
    roots = {f"h{n}": copy_host(UNTUNED, base / f"h{n}") for n in range(1, count + 1)}
    for root in roots.values():
        grub = root / "etc/default/grub"
        grub.write_text(grub.read_text().replace("GRUB_DEFAULT=0\n", "GRUB_DEFAULT=saved\n"))
        assert "GRUB_DEFAULT=saved\n" in grub.read_text()
    bin_dir = base / "bin"
    _tune, reboot = write_programs(bin_dir)
    profile = base / "ansible-lab.yaml"
    profile.write_text(PROFILE)
    ssh = SshLab(base / "ssh", roots, env={"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"})
    ssh.start()
    try:
        yield Lab(base, ssh, reboot, profile)
    finally:
        ssh.stop()


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with started_lab(tmp_path, 2) as started:
        yield started


@pytest.fixture
def lab3(tmp_path: Path) -> Iterator[Lab]:
    with started_lab(tmp_path, 3) as started:
        yield started


@pytest.fixture(autouse=True)
def collection_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The collection's modules, imported as Ansible imports them (`ansible_collections.*`),
    from this checkout, whichever test ran before."""
    monkeypatch.syspath_prepend(str(PROJECT))


# The lab hosts boot by GRUB's saved default, so that `--arm` arranges a try-once boot (with
# GRUB_DEFAULT=0 it refuses, exit 11: tests/test_arm.py); their emulated reboot boots the try
# entry once (tests/ansible_lab.py). The example playbook's path: arm, reboot, verify.
VARS: dict[str, Any] = {"tune_arm": True}


@needs_ansible
@needs_lab
@pytest.mark.slow
def test_check_and_diff_show_each_knob_and_write_nothing(lab: Lab) -> None:
    before = {name: tree(lab.root(name)) for name in lab.ssh.roots}
    code, records, said = lab.play(lab.lab_playbook(vars=VARS), "--check", "--diff")
    assert code == 0, tail(said)
    assert {name: tree(lab.root(name)) for name in lab.ssh.roots} == before
    live = results(records, LIVE)
    assert set(live) == {"h1", "h2"}
    for result in live.values():
        assert result["changed"] is True
        assert result["run"] is None
        numa = next(c for c in result["changes"] if c["id"] == "sysctl:kernel.numa_balancing")
        assert (numa["current"], numa["desired"]) == ("1", "0")
        assert "sysctl:kernel.numa_balancing = 1\n" in result["diff"]["before"]
        assert "sysctl:kernel.numa_balancing = 0\n" in result["diff"]["after"]
        # Runtime only: nothing of this phase waits for a boot.
        assert result["reboot_required"] is False
    # The diff ansible-playbook prints, per knob.
    assert "-sysctl:kernel.numa_balancing = 1" in said
    assert "+sysctl:kernel.numa_balancing = 0" in said
    boot = results(records, BOOT)["h1"]
    assert boot["changed"] is True and boot["reboot_required"] is True
    assert {c["phase"] for c in boot["changes"]} == {"reboot"}
    assert results(records, VERIFY)["h1"]["status"] == "skipped"


@needs_ansible
@needs_lab
@pytest.mark.slow
def test_the_playbook_tunes_reboots_verifies_and_a_second_run_changes_nothing(lab: Lab) -> None:
    booted = {
        name: (lab.root(name) / "proc/sys/kernel/random/boot_id").read_text()
        for name in lab.ssh.roots
    }
    code, records, said = lab.play(lab.lab_playbook(vars=VARS))
    assert code == 0, tail(said)
    for task in (LIVE, BOOT):
        for result in results(records, task).values():
            assert result["changed"] is True and result["run"], tail(said)
    assert all(r["reboot_required"] for r in results(records, BOOT).values())
    assert all(r["status"] == "ok" for r in results(records, REBOOT).values())
    for name, result in results(records, VERIFY).items():
        assert (result["verdict"], result["changed"]) == ("held", True), tail(said)
        assert (lab.root(name) / "proc/sys/kernel/random/boot_id").read_text() != booted[name]
        assert not (lab.root(name) / "var/lib/tune/pending.json").exists()
        # The host is tune's profile now: nothing left to change, nothing pending.
        plan = run_tune(
            "plan",
            lab.profile,
            "--root",
            lab.root(name),
            "--format",
            "json",
            "--save",
            lab.base / "p.json",
        )
        assert (json.loads(plan.out)["changes"], json.loads(plan.out)["pending"]) == ([], [])

    code, records, said = lab.play(lab.lab_playbook(vars=VARS))
    assert code == 0, tail(said)
    for task in (LIVE, BOOT):
        for result in results(records, task).values():
            assert (result["changed"], result["run"], result["reboot_required"]) == (
                False,
                None,
                False,
            )
            assert "diff" not in result
    for task in (REBOOT, VERIFY):
        assert {r["status"] for r in results(records, task).values()} == {"skipped"}


@needs_ansible
@needs_lab
@pytest.mark.slow
def test_reboot_required_is_the_hosts_pending_boot_not_the_runs_changes(lab: Lab) -> None:
    """A second run changes nothing, yet the boot the first prepared is still to come; verify
    before that boot fails and writes nothing; after it, nothing is required any more."""
    playbook = lab.lab_playbook(hosts="h1", vars=VARS)
    boot_only = lab.base / "boot.yml"
    plays = YAML().load(playbook.read_text())
    # No reboot: verify only when asked.
    plays[0]["tasks"] = [t for t in plays[0]["tasks"] if t["name"] in (LIVE, BOOT, VERIFY)]
    plays[0]["tasks"][2]["when"] = "run_verify | default(false)"
    with boot_only.open("w") as out:
        YAML().dump(plays, out)

    code, records, said = lab.play(boot_only)
    first = results(records, BOOT)["h1"]
    assert code == 0 and (first["changed"], first["reboot_required"]) == (True, True), tail(said)

    code, records, said = lab.play(boot_only)
    second = results(records, BOOT)["h1"]
    assert code == 0 and (second["changed"], second["reboot_required"]) == (False, True), tail(said)
    assert second["pending"], "the plan says what waits for the boot"

    # tune's lock (its holder's pid) is the one file a verify takes, whatever it decides, with
    # status.json.
    before = tree(lab.root("h1")) | {"run/tune/tune.lock": ""}
    code, records, said = lab.play(boot_only, "-e", '{"run_verify": true}')
    early = results(records, VERIFY)["h1"]
    assert code == 2 and early["status"] == "failed", tail(said)
    assert early["verdict"] == "not-rebooted" and early["rc"] in (1, 10)
    assert "has not rebooted since run" in early["msg"]
    # ... and status.json, which records that verdict for an engine (`tune status`).
    status = "var/lib/tune/status.json"
    after = tree(lab.root("h1")) | {"run/tune/tune.lock": ""}
    assert {k: v for k, v in after.items() if k != status} == {
        k: v for k, v in before.items() if k != status
    }
    verdict = json.loads((lab.root("h1") / status).read_text())["last_verification"]
    assert verdict["verdict"] == "not-rebooted"

    from ansible_lab import snapshot_reboot

    snapshot_reboot(lab.root("h1"))
    code, records, said = lab.play(boot_only, "-e", '{"run_verify": true}')
    assert code == 0, tail(said)
    after = results(records, BOOT)["h1"]
    assert (after["changed"], after["reboot_required"]) == (False, False)
    assert results(records, VERIFY)["h1"]["verdict"] == "held"


@needs_ansible
@needs_lab
@pytest.mark.slow
def test_a_failed_host_fails_with_tunes_message_and_stops_the_rollout(lab3: Lab) -> None:
    lab = lab3
    refuses = lab.root("h2") / ".tune-emulate/refuses/proc/sys/kernel/nmi_watchdog"
    refuses.parent.mkdir(parents=True)
    refuses.write_text("22\n")
    untouched = {name: tree(lab.root(name)) for name in ("h2", "h3")}
    code, records, said = lab.play(lab.lab_playbook(vars=VARS))
    assert code == 2, tail(said)
    live = results(records, LIVE)
    assert live["h1"]["changed"] is True
    failed = live["h2"]
    assert failed["status"] == "failed" and failed["rc"] == 3
    assert failed["msg"].startswith("apply failed (sysctl:kernel.nmi_watchdog is not supported")
    assert "rolled back" in failed["msg"]
    # serial and max_fail_percentage: 0 -- no batch after the failed one.
    assert "h3" not in {r["host"] for r in records}
    # tune rolled h2 back (its journal stays, as after any run); h3 was never touched.
    assert tree(lab.root("h3")) == untouched["h3"]
    after = tree(lab.root("h2"))
    changed = {p for p, d in after.items() if d != "dir" and untouched["h2"].get(p) != d}
    assert changed and all(p.startswith(("var/lib/tune/", "run/tune/")) for p in changed), changed


@needs_ansible
@needs_lab
@pytest.mark.slow
def test_a_profile_that_is_not_the_pinned_digest_fails_before_reading_the_host(lab: Lab) -> None:
    digest = "sha256:" + "0" * 64
    playbook = lab.lab_playbook(hosts="h1", vars=VARS | {"tune_profile_digest": digest})
    code, records, said = lab.play(playbook)
    assert code == 2, tail(said)
    failed = results(records, LIVE)["h1"]
    assert failed["status"] == "failed" and failed["rc"] == 65
    assert f"not the {digest} --profile-digest pins" in failed["msg"]
    assert "changed" in failed and failed["changed"] is False


@pytest.mark.skipif(ANSIBLE_DOC is None, reason="needs ansible-core (pip install -e '.[test]')")
def test_ansible_doc_documents_both_modules(tmp_path: Path) -> None:
    assert ANSIBLE_DOC is not None
    env = os.environ | {
        "ANSIBLE_COLLECTIONS_PATH": str(PROJECT),
        "ANSIBLE_HOME": str(tmp_path),
        "ANSIBLE_NOCOLOR": "1",
    }
    done = subprocess.run(
        [ANSIBLE_DOC, "--json", "tune.gpu.tune_apply", "tune.gpu.tune_verify"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    docs = json.loads(done.stdout)
    apply, verify = docs["tune.gpu.tune_apply"], docs["tune.gpu.tune_verify"]
    assert apply["doc"]["options"]["phase"]["choices"] == ["all", "runtime", "reboot"]
    assert {"changes", "reboot_required", "run", "pending"} <= set(apply["return"])
    assert "arm: true" in apply["examples"]
    assert "verdict" in verify["return"]
    # What ansible-doc shows is what each module takes: options, types, defaults, choices.
    from ansible_collections.tune.gpu.plugins.modules import tune_apply, tune_verify

    for name, module in (("tune_apply", tune_apply), ("tune_verify", tune_verify)):
        documented = docs[f"tune.gpu.{name}"]["doc"]["options"]
        assert set(documented) == set(module.ARGUMENT_SPEC), name
        for option, spec in module.ARGUMENT_SPEC.items():
            for key in ("type", "default", "choices", "required", "elements"):
                if key in spec:
                    assert documented[option].get(key) == spec[key], (name, option, key)


@pytest.mark.skipif(ANSIBLE_DOC is None, reason="needs ansible-core (pip install -e '.[test]')")
def test_the_diff_has_a_line_per_knob_and_per_line_of_a_whole_file() -> None:
    from ansible_collections.tune.gpu.plugins.modules.tune_apply import diff_of, reboots_pending

    plan = {
        "profile": "p",
        "changes": [
            {
                "id": "sysctl:vm.swappiness",
                "current": "60",
                "desired": "10",
                "shown": {"current": "60", "desired": "10"},
            },
            {
                "id": "file:/etc/sysctl.d/90-tune.conf",
                "whole_file": True,
                "current": None,
                "desired": ["# tune", "vm.swappiness = 10"],
                "shown": {"current": "(absent)", "desired": "2 lines"},
            },
            {"id": "cmdline:amd_pstate", "current": None, "desired": "active", "shown": {}},
        ],
        "pending": [
            {"id": "cmdline:iommu", "action": "reboot to apply"},
            {"id": "sysctl:x", "action": "restart a.service to apply", "restart": "a.service"},
        ],
    }
    diff = diff_of(plan, "gpu1")
    assert diff["before"] == (
        "sysctl:vm.swappiness = 60\n"
        "file:/etc/sysctl.d/90-tune.conf = (absent)\n"
        "cmdline:amd_pstate = (absent)\n"
    )
    assert diff["after"] == (
        "sysctl:vm.swappiness = 10\n"
        "file:/etc/sysctl.d/90-tune.conf = # tune\n"
        "file:/etc/sysctl.d/90-tune.conf = vm.swappiness = 10\n"
        "cmdline:amd_pstate = active\n"
    )
    assert (diff["before_header"], diff["after_header"]) == ("gpu1 (now)", "gpu1 (profile p)")
    # A unit's restart is no reboot.
    assert [p["id"] for p in reboots_pending(plan)] == ["cmdline:iommu"]


@pytest.mark.skipif(ANSIBLE_DOC is None, reason="needs ansible-core (pip install -e '.[test]')")
def test_the_failure_message_is_tunes_last_paragraph() -> None:
    from ansible_collections.tune.gpu.plugins.module_utils.tune_cli import message

    err = "tune plan: p on h\n\n  ~ sysctl a: 1 -> 0\n\napply failed (a); rolled back 1 write.\n"
    assert message(err, 3) == "apply failed (a); rolled back 1 write."
    assert message("", 70) == "tune exited 70 and said nothing on standard error"
