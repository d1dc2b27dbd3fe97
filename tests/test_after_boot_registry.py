"""What must hold after the boot is each kind's own: it declares it (`Kind.after_boot`), and
reads and checks it itself (`Kind.after_boot_request`, `Kind.verify_after_boot`) through the
registry; pending.json keeps it per kind. A new kind with a reboot-time check is its module, a
registry line and its data: nothing in `reconciler.boot` or `reconciler.apply` names one."""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import write
from engines.test_ecc import BUSES, ecc_host

import reconciler
from reconciler import kinds
from reconciler.apply.pending import PENDING, PendingBoot, pending_of, read_pending
from reconciler.boot.verify import verify
from reconciler.core.changes import Outcome, Phase
from reconciler.core.errors import HostError
from reconciler.core.files import Files, Request
from reconciler.facts.kernel import BOOT_ID
from reconciler.hosts.directory import SnapshotHost
from reconciler.kinds.base import BootCheck, Kind
from reconciler.steps.ops import Probe, Read, Step

PACKAGE = Path(reconciler.__file__).parent


class BootFlag(Kind[dict[str, str]]):
    """A kind that exists only in this test: a file whose content the next boot must bring."""

    section = ""
    spec_type = None
    kind = "test-bootflag"
    phase = Phase.REBOOT

    def request(self, spec: dict[str, str]) -> Request:
        return Request.of(*spec)

    def compare(self, spec: dict[str, str], files: Files) -> Outcome:
        return Outcome()

    def after_boot(self, step: Step) -> dict[str, Any]:
        return {step.target: step.desired}

    def after_boot_request(self, expected: Mapping[str, Any]) -> Request:
        return Request.of(*expected)

    def verify_after_boot(self, expected: Mapping[str, Any], files: Files) -> BootCheck:
        done = BootCheck()
        for path, value in expected.items():
            got = files.value(path)
            if got == value:
                done.held.append(f"{path} reads {value}")
            else:
                done.failed.append(f"{path} reads {got}, not {value}")
        return done


def flag_step(path: str, desired: str) -> Step:
    return Step(
        f"{BootFlag.kind}:{path}", BootFlag.kind, path, "0", desired, Probe(path, Read.TEXT),
        desired, "0", (), (),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("booted", "held", "failed"),
    [
        ("1\n", ["/run/flag reads 1"], []),
        ("0\n", [], ["/run/flag reads 0, not 1"]),
    ],
)
def test_a_kind_registered_alone_is_recorded_and_verified_after_the_boot(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    booted: str,
    held: list[str],
    failed: list[str],
) -> None:
    """The kind's module (`BootFlag`) and its registry entry: pending_of records what its step
    expects, pending.json keeps it, verify has the kind judge it; boot/ and apply/ unchanged."""
    monkeypatch.setitem(kinds.KINDS, BootFlag.kind, BootFlag())
    pending = pending_of("r1", "before", (flag_step("/run/flag", "1"),))
    assert pending is not None
    root = tmp_path / "host"
    write(root, PENDING, pending.to_json())
    write(root, BOOT_ID, "after\n")
    write(root, "/run/flag", booted)
    assert json.loads((root / PENDING.lstrip("/")).read_text())["expected"] == {
        BootFlag.kind: {"/run/flag": "1"}
    }
    read = read_pending(SnapshotHost(root))
    assert read == pending
    verdict = verify(SnapshotHost(root), read)
    assert (verdict.held, verdict.failed) == (held, failed)


def test_a_record_naming_a_kind_this_tune_does_not_know_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, PENDING, PendingBoot("r1", "before", {"no-such-kind": {"x": "1"}}).to_json())
    with pytest.raises(HostError, match="a kind this tune does not know"):
        read_pending(SnapshotHost(root))


def test_a_value_of_another_type_than_its_kind_declares_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, PENDING, PendingBoot("r1", "before", {"lxc": {"/c.conf": "195"}}).to_json())
    with pytest.raises(HostError, match=r"pending.expected.lxc\['/c.conf'\] is \"195\""):
        read_pending(SnapshotHost(root))


CONFIG = "/etc/pve/lxc/101.conf"

# pending.json as tune wrote it before the registry kept what the boot must bring per kind.
LEGACY = {
    "run_id": "r1",
    "boot_id": "before",
    "cmdline": {"amd_pstate": "active", "processor.max_cstate": "1", "intel_iommu": None},
    "majors": {CONFIG: [195, 509]},
    "try_once": None,
    "promote": [],
    "containers": [CONFIG],
    "restart_containers": True,
    "nvidia_params": {"EnableStreamMemOPs": "1", "RmProfilingAdminOnly": "0"},
    "ecc": {BUSES[0]: "Disabled", BUSES[1]: "Disabled"},
}


def booted_host(root: Path) -> Path:
    """A new boot that brought some of what `LEGACY` expects and not the rest."""
    ecc_host(root, current="Disabled")
    write(root, BOOT_ID, "after\n")
    write(root, "/proc/cmdline", "BOOT_IMAGE=/vmlinuz amd_pstate=passive intel_iommu=on\n")
    write(root, "/proc/devices", "Character devices:\n195 nvidia\n509 nvidia-uvm\n")
    write(root, "/proc/driver/nvidia/params", "EnableStreamMemOPs: 1\nRmProfilingAdminOnly: 1\n")
    return root


def test_a_record_the_previous_version_wrote_is_read_and_verified_the_same(
    tmp_path: Path,
) -> None:
    root = booted_host(tmp_path / "host")
    write(root, PENDING, json.dumps(LEGACY))
    legacy = read_pending(SnapshotHost(root))
    assert legacy is not None
    assert legacy.expected == {
        "cmdline": LEGACY["cmdline"],
        "lxc": LEGACY["majors"],
        "nvreg": LEGACY["nvidia_params"],
        "ecc": LEGACY["ecc"],
    }
    assert (legacy.containers, legacy.restart_containers) == ([CONFIG], True)
    verdict = verify(SnapshotHost(root), legacy)
    assert verdict.failed == [
        "/proc/cmdline has amd_pstate=passive, not amd_pstate=active",
        "/proc/cmdline has nothing, not processor.max_cstate=1",
        "/proc/cmdline still has intel_iommu=on",
        "/proc/driver/nvidia/params has RmProfilingAdminOnly: 1, not 0",
    ]
    assert verdict.held == [
        f"{CONFIG} allows the NVIDIA majors [195, 509]",
        "/proc/driver/nvidia/params has EnableStreamMemOPs: 1",
        f"GPU {BUSES[0]} has ecc.mode.current: Disabled",
        f"GPU {BUSES[1]} has ecc.mode.current: Disabled",
    ]
    # The same record in today's format: read back equal, verified the same.
    write(root, PENDING, legacy.to_json())
    current = read_pending(SnapshotHost(root))
    assert current == legacy
    again = verify(SnapshotHost(root), current)
    assert (again.held, again.failed) == (verdict.held, verdict.failed)


# A kind checks its own after the boot: these modules name none, import no kind's module and
# read no fact of one (the boot id aside).
KIND_FREE = ("boot/verify.py", "boot/reboot.py", "apply/pending.py")


@pytest.mark.parametrize("module", KIND_FREE)
def test_the_verifier_and_the_pending_record_name_no_kind(module: str) -> None:
    tree = ast.parse((PACKAGE / module).read_text())
    names = {k.kind for k in kinds.REGISTRY} | {k.section for k in kinds.REGISTRY if k.section}
    modules = {path.stem for path in (PACKAGE / "kinds").glob("*.py")} - {"__init__", "base"}
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    named = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if parts[-1] in ("kinds", "facts"):  # `from ..facts import nvidia_smi`
                parts = [*parts, *(alias.name for alias in node.names)]
            if "kinds" in parts and modules & set(parts):
                named.append(".".join(parts))
            if "facts" in parts and parts[parts.index("facts") + 1 :] != ["kernel"]:
                named.append(".".join(parts))
        elif isinstance(node, ast.Constant) and id(node) not in docstrings:
            named += [node.value] if node.value in names else []
        elif isinstance(node, ast.Attribute) and node.attr in names:
            named.append(node.attr)
    assert named == []


SWAPPINESS = """
name: swap
sysctl:
  vm.swappiness: {value}
"""


class CountedHost(SnapshotHost):
    """A snapshot that counts its batches (a round trip each over SSH)."""

    batches = 0

    def fetch(self, request: Request) -> Files:
        self.batches += 1
        return super().fetch(request)


@pytest.mark.parametrize(
    ("applied", "batches"),
    [(None, 2), ("10", 1), ("20", 2)],
    ids=["unknown (tune verify)", "the stored one", "another one"],
)
def test_verify_reads_the_applied_profiles_runtime_knobs_in_its_one_batch(
    tmp_path: Path, applied: str | None, batches: int
) -> None:
    """Given the profile the run stored (a rollout, `apply --reboot`), verify reads what its
    runtime knobs need with the boot's checks; a host whose stored profile is another is
    judged by the stored one, read in a second batch, as `tune verify` reads it."""
    from reconciler.apply.work import profile_text
    from reconciler.profile.load import load_profile_text
    from reconciler.steps.state import PROFILE

    stored = load_profile_text(SWAPPINESS.format(value=10), "swap.yaml")
    root = tmp_path / "host"
    write(root, PROFILE, profile_text(stored))
    write(root, BOOT_ID, "after\n")
    write(root, "/proc/sys/vm/swappiness", "60\n")
    given = None if applied is None else load_profile_text(SWAPPINESS.format(value=applied), "p")
    host = CountedHost(root)
    verdict = verify(host, PendingBoot("r1", "before", {}), given)
    assert host.batches == batches
    # Judged by the stored profile (10) whichever was given; no run applied it.
    assert [(c.id, c.desired) for c in verdict.not_applied] == [("sysctl:vm.swappiness", "10")]
    assert (verdict.failed, verdict.drifted) == ([], [])
