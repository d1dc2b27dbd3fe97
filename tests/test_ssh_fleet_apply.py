"""`tune apply --runtime-only` over a fleet of real sshd hosts in mixed states.

Every host goes through the one per-host path a single -H takes; a host that is down, refuses
the run or rolls it back is that host's row in the table and never stops the others.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import copy_host, run_tune
from small_host import tree, write_profile
from ssh_fixture import SshLab, StartLab, sshd_available
from test_ssh_apply import history, in_sync_without_a_stored_profile, small, small_profile, tune

from reconciler.core.errors import ExitCode

pytestmark = pytest.mark.skipif(
    not sshd_available(), reason="needs root and openssh-server (.ci/run installs it)"
)


def mixed_fleet(tmp_path: Path, start_lab: StartLab) -> tuple[SshLab, Path, dict[str, Path]]:
    profile = small_profile(tmp_path / "p.yaml")
    roots = {
        "fresh": small(tmp_path / "fresh", 1),
        "tuned": small(tmp_path / "tuned", 2),
        "readonly": small(tmp_path / "readonly", 2),
        "broken": small(tmp_path / "broken", 2),
        "wide": small(tmp_path / "wide", 8),
    }
    done = run_tune(
        "apply", "--runtime-only", "--no-persist", "-y", profile, "--root", roots["tuned"]
    )
    assert done.code == 0, done.err
    # Read-only, as in a container: refused on the target before any write.
    (roots["readonly"] / "proc/sys/vm/swappiness").chmod(0o444)
    # The module loads but never shows in /proc/modules: the read-back fails, the run rolls back.
    modules = roots["broken"] / "proc/modules"
    modules.unlink()
    modules.symlink_to("/dev/null")
    return start_lab(roots), profile, roots


def test_a_fleet_apply_applies_each_host_alone_and_tells_each_outcome(
    tmp_path: Path, start_lab: StartLab
) -> None:
    lab, profile, roots = mixed_fleet(tmp_path, start_lab)
    local = {n: copy_host(roots[n], tmp_path / f"local-{n}") for n in ("fresh", "wide")}
    before = {name: tree(root) for name, root in roots.items()}
    down = f"127.0.0.250:{lab.port['fresh']}"
    hosts = [a for name in [*roots, down] for a in ("-H", name)]
    code, out, err = tune(
        lab, "apply", "--runtime-only", "--no-persist", "-y", profile, *hosts, "--forks", "3"
    )
    assert (code, err) == (1, ""), out  # 1: a host failed
    plans, _, applied = out.partition("\nHOST ")
    # First what each host will change (the same table as tune plan: changes are profile
    # entries, writes their knobs), hosts of one plan named once; then what each came to.
    assert [line.split() for line in plans.splitlines()[1:7]] == [
        ["fresh", "4", "changes", "4", "0", "5", "0", "0/0", "A"],
        ["tuned", "in", "sync", "0", "0", "0", "0", "0/0", "-"],
        ["readonly", "4", "changes", "4", "0", "6", "0", "0/0", "B"],
        ["broken", "4", "changes", "4", "0", "6", "0", "0/0", "B"],
        ["wide", "4", "changes", "4", "0", "12", "0", "0/0", "C"],
        [down, "error", "-", "-", "-", "-", "-", "-"],
    ]
    assert "== Plan B, for 2 hosts: readonly, broken\nRuntime phase" in plans
    rows = [line.split() for line in ("HOST " + applied).splitlines()[1:7]]
    assert [row[:5] for row in rows] == [
        ["fresh", "applied", "4", "5", "0"],
        ["tuned", "in", "sync", "0", "0"],
        ["readonly", "error", "-", "-", "-"],
        ["broken", "rolled", "back", "-", "-"],
        ["wide", "applied", "4", "12", "0"],
        [down, "error", "-", "-", "-"],
    ]
    assert "6 hosts: 2 applied, 1 already in sync, 1 rolled back, 2 unreachable or failed." in out
    assert "    readonly: sysctl:vm.swappiness cannot be changed" in applied
    assert "    broken: apply failed (module:nvidia_peermem: wrote 'loaded'" in applied
    assert f"cannot connect to 127.0.0.250:{lab.port['fresh']}: connection refused." in out

    # Each applied host ends exactly as a local apply leaves it; the others as they were.
    for name in ("fresh", "wide"):
        assert (
            run_tune(
                "apply", "--runtime-only", "--no-persist", "-y", profile, "--root", local[name]
            ).code
            == 0
        )
        assert tree(roots[name]) == tree(local[name])
    for name in ("tuned", "readonly", "broken"):
        assert tree(roots[name]) == before[name], name
    # One connection per host for the whole run: the confirmation keeps them open.
    assert lab.connections() == dict.fromkeys(roots, 1)

    outcomes = {name: [r["outcome"] for r in history(lab, name)] for name in roots}
    assert outcomes == {
        "fresh": ["applied"],
        "tuned": ["applied"],  # the local apply that tuned it; the fleet run started none
        "readonly": [],
        "broken": ["rolled-back"],
        "wide": ["applied"],
    }


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_one_confirmation_for_the_whole_fleet_and_no_writes_when_declined(
    tmp_path: Path, start_lab: StartLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = small_profile(tmp_path / "p.yaml")
    roots = {"a": small(tmp_path / "a", 1), "b": small(tmp_path / "b", 2)}
    before = {name: tree(root) for name, root in roots.items()}
    lab = start_lab(roots)
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    code, out, err = tune(
        lab, "apply", "--runtime-only", "--no-persist", profile, "-H", "a", "-H", "b"
    )
    assert code == ExitCode.NOT_CONFIRMED and err == "not confirmed: nothing was written.\n"
    assert out.count("Apply 8 changes (11 writes) to 2 hosts? [y/N]") == 1
    assert {name: tree(root) for name, root in roots.items()} == before
    # Observed once with tune's runs listed, their owners read (an interrupted run refuses the
    # host before anything is asked), nothing started.
    assert lab.exec_requests() == {"a": 2, "b": 2}


def test_a_fleet_dry_run_from_an_inventory_shows_every_host_s_operations_and_writes_nothing(
    tmp_path: Path, start_lab: StartLab
) -> None:
    profile = small_profile(tmp_path / "p.yaml")
    roots = {"a": small(tmp_path / "a", 1), "b": small(tmp_path / "b", 2)}
    before = {name: tree(root) for name, root in roots.items()}
    lab = start_lab(roots)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\na\nb\n")
    code, out, err = tune(
        lab,
        "apply",
        "--runtime-only",
        "--no-persist",
        "--dry-run",
        profile,
        "--inventory",
        inventory,
    )
    assert (code, err) == (0, "")
    assert "Dry run on ssh a: 4 changes (5 writes), nothing written." in out
    assert "Dry run on ssh b: 4 changes (6 writes), nothing written." in out
    assert {name: tree(root) for name, root in roots.items()} == before
    assert lab.exec_requests() == {"a": 1, "b": 1}


def test_a_fleet_apply_in_json_is_one_object_per_host_and_nothing_else(
    tmp_path: Path, start_lab: StartLab
) -> None:
    profile = small_profile(tmp_path / "p.yaml")
    roots = {"a": small(tmp_path / "a", 1), "b": small(tmp_path / "b", 2)}
    assert (
        run_tune(
            "apply", "--runtime-only", "--no-persist", "-y", profile, "--root", roots["b"]
        ).code
        == 0
    )
    lab = start_lab(roots)
    down = f"127.0.0.250:{lab.port['a']}"
    hosts = [a for name in [*roots, down] for a in ("-H", name)]
    code, out, err = tune(
        lab, "apply", "--runtime-only", "--no-persist", "-y", "--format", "json", profile, *hosts
    )
    assert (code, err) == (1, "")
    objects = json.loads(out)
    assert [(o["target"], o["status"], o["changes"], o["writes"]) for o in objects] == [
        ("a", "applied", 4, 5),
        ("b", "in-sync", 0, 0),
        (down, "error", None, None),
    ]
    (run,) = [r["run_id"] for r in history(lab, "a")]
    assert objects[0]["run"] == run and objects[1]["run"] is None
    assert len(objects[0]["plan"]["changes"]) == 5 and objects[1]["plan"]["changes"] == []
    assert "connection refused" in objects[2]["error"] and "plan" not in objects[2]

    # A second run has nothing to apply: the same shape, every host in sync, no run started.
    code, out, _ = tune(
        lab, "apply", "--runtime-only", "--no-persist", "-y", "--format", "json", profile,
        *hosts[:4],
    )  # fmt: skip
    assert code == 0
    assert [(o["target"], o["status"], o["run"]) for o in json.loads(out)] == [
        ("a", "in-sync", None),
        ("b", "in-sync", None),
    ]


def test_a_fleet_apply_skip_missing_leaves_out_only_what_each_host_lacks(
    tmp_path: Path, start_lab: StartLab
) -> None:
    # A GPU host has nvidia_peermem, a VM beside it does not: --skip-missing applies both.
    profile = write_profile(
        tmp_path / "p.yaml", {"modules": {"dummy": "loaded", "nvidia_peermem": "loaded"}}
    )
    roots = {"gpu": small(tmp_path / "gpu", 1), "vm": small(tmp_path / "vm", 1)}
    dep = "lib/modules/6.14.8-2-pve/modules.dep"
    (roots["gpu"] / dep).parent.mkdir(parents=True)
    (roots["gpu"] / dep).write_text("kernel/net/dummy.ko:\nkernel/nvidia_peermem.ko:\n")
    (roots["vm"] / dep).parent.mkdir(parents=True)
    (roots["vm"] / dep).write_text("kernel/net/dummy.ko:\n")
    lab = start_lab(roots)
    hosts = ("-H", "gpu", "-H", "vm")
    apply = ("apply", "--runtime-only", "--no-persist", "-y", "--skip-missing", profile, *hosts)
    code, out, err = tune(lab, *apply, "--format", "json")
    assert code == 0, err
    objects = json.loads(out)
    assert [(o["target"], o["status"], o["changes"]) for o in objects] == [
        ("gpu", "applied", 2),
        ("vm", "applied", 1),
    ]
    assert objects[0]["skipped"] == []
    assert [s["id"] for s in objects[1]["skipped"]] == ["module:nvidia_peermem"]
    assert err.splitlines() == [
        "vm: module:nvidia_peermem skipped (--skip-missing): modprobe: FATAL: Module "
        "nvidia_peermem not found in directory /lib/modules/6.14.8-2-pve."
    ]


def test_one_host_apply_in_json_is_the_document_a_fleet_has_for_each_host(
    tmp_path: Path,
) -> None:
    profile = small_profile(tmp_path / "p.yaml")
    root = small(tmp_path / "a", 1)
    apply = ("apply", "--runtime-only", "--no-persist", "-y", "--format", "json", profile)
    done = run_tune(*apply, "--root", root)
    assert done.code == 0, done.err
    document = json.loads(done.out)
    assert (document["kind"], document["status"]) == ("apply", "applied")
    assert (document["changes"], document["writes"]) == (4, 5)
    assert document["run"] is not None and len(document["plan"]["changes"]) == 5
    again = run_tune(*apply, "--root", root)
    assert (json.loads(again.out)["status"], json.loads(again.out)["run"]) == ("in-sync", None)


def test_a_fleet_apply_with_nothing_to_change_stores_the_profile_on_each_host(
    tmp_path: Path, start_lab: StartLab
) -> None:
    """As on one host: each host in sync gets the profile as its last applied one, so `tune
    check` without a profile works there; no run is started, nothing is asked."""
    profile = small_profile(tmp_path / "p.yaml")
    roots = {
        name: in_sync_without_a_stored_profile(small(tmp_path / name, 1), profile)
        for name in ("a", "b")
    }
    lab = start_lab(roots)
    code, out, err = tune(
        lab, "apply", "--runtime-only", "--no-persist", "-y", profile, "-H", "a", "-H", "b"
    )
    assert (code, err) == (0, ""), out
    assert "Nothing to apply." in out
    for name, root in roots.items():
        assert (root / "var/lib/tune/profile.yaml").exists(), name
    # List the runs with the newest read and observe with profile.yaml, who owns tune's state,
    # store it.
    assert lab.exec_requests() == {"a": 3, "b": 3}
    for name in roots:
        assert [r["outcome"] for r in history(lab, name)] == ["applied"]  # no run started
    code, out, err = tune(lab, "check", "--no-persist", "-H", "a", "-H", "b")
    assert (code, err) == (0, ""), out


def test_history_across_hosts_is_one_table_led_by_each_host(
    tmp_path: Path, start_lab: StartLab
) -> None:
    profile = small_profile(tmp_path / "p.yaml")
    roots = {"fresh": small(tmp_path / "fresh", 1), "tuned": small(tmp_path / "tuned", 2)}
    done = run_tune(
        "apply", "--runtime-only", "--no-persist", "-y", profile, "--root", roots["tuned"]
    )
    assert done.code == 0, done.err
    lab = start_lab(roots)
    down = f"127.0.0.250:{lab.port['fresh']}"
    code, out, err = tune(lab, "history", "-H", "fresh", "-H", "tuned", "-H", down)
    assert (code, err) == (1, "")  # 1: a host could not be read
    rows = [line.split() for line in out.splitlines()]
    header = ["HOST", "RUN", "STARTED", "PROFILE", "PHASE", "OUTCOME", "CHANGES", "WRITES"]
    assert rows[0] == header
    assert rows[1] == ["fresh", "-", "-", "-", "-", "no", "runs", "-", "-"]
    assert rows[2][0] == "tuned" and rows[2][5:] == ["applied", "4", "6"]
    assert rows[3] == [down, "-", "-", "-", "-", "error", "-", "-"]
    code, out, _ = tune(lab, "history", "-H", "fresh", "-H", "tuned", "--format", "json")
    objects = json.loads(out)
    assert [(o["target"], o["status"], len(o["runs"])) for o in objects] == [
        ("fresh", "ok", 0),
        ("tuned", "ok", 1),
    ]
    assert objects[1]["runs"] == history(lab, "tuned")
