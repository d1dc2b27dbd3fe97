"""Per knob kind: apply, then the plan is empty (idempotency); the snapshot writes as a kernel
would; steps survive the journal's JSON unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tune
from hypothesis import given
from hypothesis import strategies as st
from small_host import GPU_HEADER, SmallHost, build, gpu_line, tree, write_profile

from reconciler.apply.messages import read_back_message
from reconciler.apply.work import prepare
from reconciler.core.errors import HostError
from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.emulate import kernel_text
from reconciler.profile.load import load_profile
from reconciler.steps.ops import (
    Command,
    DeleteFile,
    Probe,
    PutFile,
    Read,
    SetAttr,
    Step,
    op_from_json,
    op_to_json,
)

HOST = SmallHost(
    sysctls={"vm.swappiness": "60", "net.ipv4.tcp_rmem": "4096 131072 6291456"},
    thp="always",
    governors=["schedutil", "schedutil"],
    c2_disabled=[False, True],
    modules=["veth"],
    gpus=[512, 4096],
    nvidia_smi=GPU_HEADER + gpu_line("00000000:01:00.0") + gpu_line("00000000:02:00.0", "Enabled"),
)

KIND_PROFILES: dict[str, dict[str, Any]] = {
    "sysctl": {"sysctl": {"vm.swappiness": 10, "net.ipv4.tcp_rmem": "4096 87380 268435456"}},
    "sysfs": {"sysfs": {"/sys/kernel/mm/transparent_hugepage/enabled": "madvise"}},
    "cpu": {"cpu": {"governor": "performance", "idle_states": {"disable": ["C2"]}}},
    "modules": {
        "modules": {"dummy": {"value": "loaded", "params": {"numdummies": 2}}, "veth": "absent"}
    },
    # The small host's GPUs have Relaxed Ordering on (Device Control 0x2810): turned off here.
    "pci": {
        "pci": [
            {
                "select": {"vendor": 0x10DE, "class": 0x0302},
                "max_read_request": 4096,
                "relaxed_ordering": False,
            }
        ]
    },
    "gpus": {
        "gpus": {
            "all": {"persistence": True, "compute_mode": "EXCLUSIVE_PROCESS"},
            "00000000:02:00.0": {"power_limit": 450},
        }
    },
}


@pytest.mark.parametrize("kind", sorted(KIND_PROFILES))
@pytest.mark.parametrize("persist", [True, False])
def test_apply_then_plan_is_empty_then_rollback_restores(
    tmp_path: Path, kind: str, persist: bool
) -> None:
    root = build(tmp_path / "h", HOST)
    profile = write_profile(tmp_path / "p.yaml", KIND_PROFILES[kind])
    flags = [] if persist else ["--no-persist"]
    before = tree(root)
    first = run_tune("apply", "--yes", profile, "--runtime-only", "--root", root, *flags)
    assert first.code == 0, first.err
    assert "Applied" in first.out
    plan = run_tune("plan", profile, "--root", root, *flags)
    assert plan.code == 0, plan.out
    again = run_tune("apply", "--yes", profile, "--runtime-only", "--root", root, *flags)
    assert "In sync: nothing to change" in again.out
    assert run_tune("rollback", "--yes", "--root", root).code == 0
    assert tree(root) == before


def test_module_parameters_load_with_the_module_and_persist(tmp_path: Path) -> None:
    root = build(tmp_path / "h", HOST)
    profile = write_profile(tmp_path / "p.yaml", KIND_PROFILES["modules"])
    assert run_tune("apply", "--yes", profile, "--runtime-only", "--root", root).code == 0
    assert (root / "sys/module/dummy/parameters/numdummies").read_text() == "2\n"
    assert "veth" not in (root / "proc/modules").read_text()
    assert (root / "etc/modprobe.d/tune.conf").read_text().splitlines()[1:] == [
        "options dummy numdummies=2",
        "blacklist veth",
    ]
    assert (root / "etc/modules-load.d/tune.conf").read_text().splitlines()[1:] == ["dummy"]


def test_a_file_tune_no_longer_needs_is_removed(tmp_path: Path) -> None:
    root = build(tmp_path / "h", HOST)
    write_profile(tmp_path / "a.yaml", KIND_PROFILES["sysctl"])
    assert (
        run_tune("apply", "--yes", tmp_path / "a.yaml", "--runtime-only", "--root", root).code == 0
    )
    assert (root / "etc/sysctl.d/90-tune.conf").exists()
    write_profile(tmp_path / "b.yaml", KIND_PROFILES["sysfs"])
    result = run_tune("apply", tmp_path / "b.yaml", "--runtime-only", "--root", root, "--dry-run")
    assert "delete file /etc/sysctl.d/90-tune.conf" in result.out


@pytest.mark.parametrize(
    ("old", "written", "now"),
    [
        ("always [madvise] never\n", "never", "always madvise [never]\n"),
        ("[none] mq-deadline\n", "mq-deadline", "none [mq-deadline]\n"),
        ("4096\t131072\t6291456\n", "4096 87380  268435456", "4096\t87380\t268435456\n"),
        ("1\n", "0x10", "16\n"),
        ("bbr\n", "cubic", "cubic\n"),
    ],
)
def test_snapshot_writes_as_the_kernel_prints(old: str, written: str, now: str) -> None:
    assert kernel_text(old, written) == now


def test_snapshot_refuses_like_the_kernel(tmp_path: Path) -> None:
    root = build(tmp_path / "h", HOST)
    host = SnapshotHost(root)
    with pytest.raises(HostError, match=r"the kernel refused 'sometimes' \(Invalid argument\)"):
        host.set_attr("/sys/kernel/mm/transparent_hugepage/enabled", "sometimes")
    (root / "proc/sys/vm/swappiness").chmod(0o444)
    with pytest.raises(HostError, match=r"Permission denied"):
        host.set_attr("/proc/sys/vm/swappiness", "10")
    with pytest.raises(HostError, match=r"No such file or directory"):
        host.set_attr("/proc/sys/vm/nosuch", "1")
    assert host.run(["reboot"]).returncode == 127


@pytest.mark.parametrize(
    ("probe", "raw", "value"),
    [
        (Probe("/p", Read.WORDS), b"4096\t87380\t268435456\n", "4096 87380 268435456"),
        (Probe("/p", Read.CHOICE), b"always [madvise] never\n", "madvise"),
        (Probe("/p", Read.TEXT), b"a\nb\n", "a\nb\n"),
        (Probe("/p", Read.MODULE, "veth"), b"veth 1 0 - Live 0x0\n", "loaded"),
        (Probe("/p", Read.MODULE, "dummy"), b"veth 1 0 - Live 0x0\n", "absent"),
        (Probe("/p", Read.MRRS, "0"), b"\x10\x50", "4096"),
        (Probe("/p", Read.BITS, "1:0010"), b"\x00\x10\x50", "0010"),
        (Probe("/p", Read.BITS, "0:002c"), b"\xff\xff", "002c"),
        (Probe("/p", Read.BITS, "1:0010"), b"\x00\x10", None),
        (Probe("/p", Read.WORDS), None, None),
    ],
)
def test_probe_readings(probe: Probe, raw: bytes | None, value: str | None) -> None:
    assert probe.value(raw) == value


paths = st.from_regex(r"/[a-z]{1,8}(/[a-z0-9_.]{1,8}){0,3}", fullmatch=True)
ops = st.one_of(
    st.builds(SetAttr, paths, st.text(max_size=20)),
    st.builds(PutFile, paths, st.binary(max_size=40), st.sampled_from([0o644, 0o600])),
    st.builds(DeleteFile, paths),
    st.builds(
        Command, st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=4).map(tuple)
    ),
)
values = st.one_of(st.none(), st.text(max_size=10), st.lists(st.text(max_size=5)).map(tuple))


@given(ops)
def test_operations_survive_json(op: SetAttr | PutFile | DeleteFile | Command) -> None:
    assert op_from_json(json.loads(json.dumps(op_to_json(op)))) == op


@given(
    st.builds(
        Step,
        id=st.text(max_size=10),
        kind=st.sampled_from(["sysctl", "file"]),
        target=st.text(max_size=10),
        prior=values,
        desired=values,
        probe=st.builds(Probe, paths, st.sampled_from(list(Read)), st.text(max_size=4)),
        expect=st.none() | st.text(max_size=10),
        restored=st.none() | st.text(max_size=10),
        do=st.lists(ops, max_size=2).map(tuple),
        undo=st.lists(ops, max_size=2).map(tuple),
    )
)
def test_steps_survive_the_journal(step: Step) -> None:
    assert Step.from_json(json.loads(json.dumps(step.to_json()))) == step


def test_a_gpu_setting_that_does_not_read_back_names_the_gpu_and_the_field(
    tmp_path: Path,
) -> None:
    root = build(tmp_path / "h", HOST)
    profile = write_profile(tmp_path / "p.yaml", {"gpus": {"all": {"persistence": True}}})
    work = prepare(
        SnapshotHost(root), load_profile(profile), runtime_only=True, with_persistence=False
    )
    (step,) = work.steps
    before, _, after = read_back_message(step, "'Disabled'")
    gpu = "gpu:00000000:01:00.0:persistence"
    assert before == f"{gpu}: nvidia-smi took Enabled but its query reports "
    assert after == (
        " for persistence_mode of GPU 00000000:01:00.0 (the GPU or its driver keeps its own)"
    )
