"""Kubernetes without credentials on the node (issue #32, item 4): kured's sentinel made and
removed only by its owner, Node Feature Discovery's feature file as nfd-worker parses it, the
GPU Operator's ConfigMap, and the manifests checked against the Kubernetes API's own schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import run_tune
from small_host import SmallHost, build, listing, write_profile

from reconciler.apply.pending import PENDING, PendingBoot
from reconciler.engines import kube
from reconciler.facts.nvidia_params import DRIVER_CONTAINER_MARK
from reconciler.steps.status import STATUS, Status

BOOT = "0d9b5f7c-1111-2222-3333-444455556666"  # small_host's boot id
NEXT_BOOT = "9f00aa00-1111-2222-3333-444455556666"
SENTINEL = "run/reboot-required"
EXAMPLE = Path(__file__).resolve().parent.parent / "reconciler/examples/kubernetes/tune-node.yaml"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return build(tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60"}))


def _put(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def arm(root: Path, run_id: str = "run-1", boot: str = BOOT) -> None:
    """What `tune apply --reboot-phase [--arm]` leaves: a pending boot, in this boot."""
    _put(root, PENDING, PendingBoot(run_id, boot).to_json())


def reboot(root: Path) -> None:
    """The boot happened: a new boot id, and /run (a tmpfs) empty again."""
    _put(root, "proc/sys/kernel/random/boot_id", NEXT_BOOT + "\n")
    sentinel = root / SENTINEL
    if sentinel.exists():
        sentinel.unlink()


def sentinel(root: Path, *extra: str) -> str:
    done = run_tune("kube", "sentinel", "--root", root, *extra)
    assert done.code == 0, done.err
    return done.out


# --- kured's sentinel -------------------------------------------------------------------------


def test_a_waiting_boot_makes_the_sentinel_and_records_that_tune_made_it(root: Path) -> None:
    arm(root)
    said = sentinel(root)
    assert "made" in said
    assert (root / SENTINEL).read_text() == kube.marker_of("run-1")
    record = json.loads((root / kube.SENTINEL_RECORD.lstrip("/")).read_text())
    assert record["path"] == "/run/reboot-required" and record["boot_id"] == BOOT
    # Again, in the same boot: nothing changes.
    before = listing(root)
    assert "kept" in sentinel(root)
    assert listing(root) == before


def test_tune_removes_its_sentinel_once_no_reboot_waits(root: Path) -> None:
    arm(root)
    sentinel(root)
    # Verified or rolled back before a reboot (pending gone): the wait is over.
    (root / PENDING.lstrip("/")).unlink()
    assert "removed" in sentinel(root)
    assert not (root / SENTINEL).exists()
    assert not (root / kube.SENTINEL_RECORD.lstrip("/")).exists()


def test_after_the_boot_a_sentinel_on_a_persistent_path_is_removed_by_tune(root: Path) -> None:
    persistent = "/var/lib/kured/reboot-required"
    arm(root)
    sentinel(root, "--path", persistent)
    assert (root / persistent.lstrip("/")).exists()
    _put(root, "proc/sys/kernel/random/boot_id", NEXT_BOOT + "\n")  # pending.json stays
    assert "removed" in sentinel(root, "--path", persistent)
    assert not (root / persistent.lstrip("/")).exists()


def test_a_sentinel_present_before_is_left_alone_and_never_removed(root: Path) -> None:
    _put(root, SENTINEL, "")  # unattended-upgrades, or an operator's `touch`
    arm(root)
    assert "left alone" in sentinel(root)
    assert not (root / kube.SENTINEL_RECORD.lstrip("/")).exists()
    (root / PENDING.lstrip("/")).unlink()
    sentinel(root)
    assert (root / SENTINEL).read_text() == ""
    arm(root, "run-2")
    sentinel(root)
    _put(root, "proc/sys/kernel/random/boot_id", NEXT_BOOT + "\n")
    sentinel(root)
    assert (root / SENTINEL).exists(), "another tool's sentinel is never tune's to remove"


def test_another_tools_sentinel_made_after_tunes_went_is_not_removed(root: Path) -> None:
    arm(root)
    sentinel(root)
    # The boot happened (/run emptied); a package manager asks for the next reboot at once.
    reboot(root)
    _put(root, SENTINEL, "*** System restart required ***\n")
    assert "left alone" in sentinel(root)
    assert (root / SENTINEL).read_text() == "*** System restart required ***\n"
    assert not (root / kube.SENTINEL_RECORD.lstrip("/")).exists()


def test_nothing_waiting_and_nothing_of_tunes_writes_nothing(root: Path) -> None:
    before = listing(root)
    assert "nothing of tune's" in sentinel(root)
    assert listing(root) == before


def test_a_link_at_the_sentinel_is_never_written_through(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    (root / "run").mkdir(exist_ok=True)
    (root / SENTINEL).symlink_to(outside)
    arm(root)
    assert "left alone" in sentinel(root)
    assert outside.read_text() == "precious\n"


def test_a_relative_sentinel_path_is_refused(root: Path) -> None:
    done = run_tune("kube", "sentinel", "--root", root, "--path", "run/reboot-required")
    assert done.code == 1 and "absolute" in done.err


# --- Node Feature Discovery -------------------------------------------------------------------

# Kubernetes' label rules (apimachinery's IsQualifiedName / IsValidLabelValue).
NAME = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def nfd_labels(text: str) -> dict[str, str]:
    """The labels nfd-worker's local source makes of a feature file (source/local/local.go):
    lines trimmed, `#` lines skipped (`# +` directives aside), `key=value` split at the first
    `=`, a bare key meaning "true", an unprefixed name put under feature.node.kubernetes.io/."""
    labels: dict[str, str] = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            assert not line.startswith("# +"), f"a directive tune never means: {line}"
            continue
        key, sep, value = line.partition("=")
        name = key if "/" in key else kube.NFD_PREFIX + key
        labels[name] = value if sep else "true"
    for name, value in labels.items():
        prefix, _, short = name.rpartition("/")
        assert NAME.fullmatch(name) and len(short) <= 63 and len(prefix) <= 253, name
        assert VALUE.fullmatch(value) and len(value) <= 63, f"{name}={value}"
    return labels


def features(root: Path) -> dict[str, str]:
    done = run_tune("kube", "features", "--root", root)
    assert done.code == 0, done.err
    return nfd_labels((root / kube.FEATURES.lstrip("/")).read_text())


def test_the_feature_file_as_nfd_reads_it(root: Path) -> None:
    status = Status(
        profile="blackwell-8x",
        profile_digest="sha256:" + "ab12" * 16,
        in_sync=False,
        reboot_pending=True,
        armed=True,
    )
    _put(root, STATUS, status.to_json())
    assert features(root) == {
        "feature.node.kubernetes.io/tune-profile": "blackwell-8x",
        "feature.node.kubernetes.io/tune-in-sync": "false",
        "feature.node.kubernetes.io/tune-reboot-pending": "true",
        "feature.node.kubernetes.io/tune-armed": "true",
        "feature.node.kubernetes.io/tune-digest": "ab12ab12ab12",
    }
    # Replaced whole by rename: nothing but the file (NFD skips hidden names anyway).
    assert [p.name for p in (root / kube.FEATURES.lstrip("/")).parent.iterdir()] == ["tune"]


def test_no_status_yet_labels_what_is_known(root: Path) -> None:
    arm(root)  # a pending boot in this boot, before any status.json
    assert features(root) == {
        "feature.node.kubernetes.io/tune-profile": "none",
        "feature.node.kubernetes.io/tune-in-sync": "unknown",
        "feature.node.kubernetes.io/tune-reboot-pending": "true",
        "feature.node.kubernetes.io/tune-armed": "false",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("blackwell-8x", "blackwell-8x"),
        ("a" * 80, "a" * 63),
        ("gpu host/v2", "gpu-host-v2"),
        ("-_.x._-", "x"),
        ("été", "t"),
        ("a" * 62 + "-b", "a" * 62),  # cut at 63 would end in "-"
    ],
)
def test_label_values_keep_kubernetes_rules(text: str, expected: str) -> None:
    value = kube.label_value(text)
    assert value == expected
    assert VALUE.fullmatch(value) and len(value) <= 63


def test_a_damaged_status_is_an_error_not_a_label(root: Path) -> None:
    _put(root, STATUS, "{not json")
    done = run_tune("kube", "features", "--root", root)
    assert done.code == 1 and "status.json" in done.err
    assert not (root / kube.FEATURES.lstrip("/")).exists()


# --- GPU Operator -----------------------------------------------------------------------------


def test_gpu_operator_configmap_carries_the_nvreg_parameters(root: Path, tmp_path: Path) -> None:
    params = {"NVreg_EnableStreamMemOPs": 1, "NVreg_RegistryDwords": "PeerMappingOverride=1;"}
    profile = write_profile(
        tmp_path / "p.yaml", {"modules": {"nvidia": {"value": "loaded", "params": params}}}
    )
    _put(root, DRIVER_CONTAINER_MARK, "")
    before = listing(root)
    done = run_tune("kube", "gpu-operator", profile, "--root", root)
    assert done.code == 0, done.err
    assert "driver container owns the driver" in done.err
    yaml = pytest.importorskip("yaml")
    document = yaml.safe_load(done.out)
    assert document["kind"] == "ConfigMap" and document["metadata"]["namespace"] == "gpu-operator"
    assert document["data"]["nvidia.conf"] == (
        "NVreg_EnableStreamMemOPs=1\nNVreg_RegistryDwords=PeerMappingOverride=1;\n"
    )
    assert listing(root) == before, "nothing is written on the node"


def test_a_parameter_value_with_a_blank_is_refused() -> None:
    from reconciler.core.errors import UsageError

    with pytest.raises(UsageError, match="one KEY=VALUE word"):
        kube.kernel_module_configmap({"NVreg_RegistryDwords": "a=1; b=2"})


# --- the manifests against the Kubernetes API's schema ----------------------------------------

KUBERNETES = "1.30.0"


def _validate(document: dict[str, object]) -> None:
    validate = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate is not installed (pip install kubernetes-validate)",
    )
    validate.validate(document, KUBERNETES, strict=True)


def test_the_daemonset_example_is_valid_kubernetes() -> None:
    yaml = pytest.importorskip("yaml")
    documents = list(yaml.safe_load_all(EXAMPLE.read_text()))
    assert [d["kind"] for d in documents] == ["Namespace", "ConfigMap", "DaemonSet"]
    for document in documents:
        _validate(document)
    pod = documents[2]["spec"]["template"]["spec"]
    assert pod["hostPID"] is True and pod["automountServiceAccountToken"] is False
    script = pod["containers"][0]["args"][0]
    for command in ("check", "kube sentinel", "kube features", "--prometheus"):
        assert command in script


def test_the_schema_check_catches_a_broken_daemonset() -> None:
    """The validator is not vacuous: a field the API does not have fails it."""
    yaml = pytest.importorskip("yaml")
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed")
    daemonset = list(yaml.safe_load_all(EXAMPLE.read_text()))[2]
    daemonset["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(daemonset, KUBERNETES, strict=True)


def test_tune_examples_prints_the_manifest_as_it_is() -> None:
    """The node runs its own /usr/local/bin/tune: `tune examples` fills in this machine's
    tune only where a unit runs it here, never in the manifest."""
    shown = run_tune("examples", "kubernetes", "tune-node.yaml")
    assert shown.code == 0, shown.err
    assert shown.out == EXAMPLE.read_text()


NVREG_PROFILE = """\
name: t
modules:
  nvidia:
    value: loaded
    params: {NVreg_EnableStreamMemOPs: 1}
"""


def _gpu_node(tmp_path: Path) -> Path:
    node = tmp_path / "gpu"
    _put(node, "proc/modules", "nvidia 11649024 18 - Live 0x0000000000000000 (POE)\n")
    _put(node, "proc/driver/nvidia/params", "EnableStreamMemOPs: 0\n")
    return node


def test_nvreg_is_planned_on_a_host_driver(tmp_path: Path) -> None:
    from conftest import by_id, plan_json

    plan = plan_json(tmp_path, _gpu_node(tmp_path), NVREG_PROFILE)
    assert plan["code"] == 2
    assert any("NVreg_EnableStreamMemOPs" in change for change in by_id(plan))


def test_nvreg_is_the_operators_where_its_driver_container_owns_the_driver(
    tmp_path: Path,
) -> None:
    from conftest import by_id, notes, plan_json

    node = _gpu_node(tmp_path)
    _put(node, DRIVER_CONTAINER_MARK, "")
    plan = plan_json(tmp_path, node, NVREG_PROFILE)
    assert plan["code"] == 0, "nothing for tune to write in /etc/modprobe.d there"
    assert not any("NVreg" in change for change in by_id(plan))
    said = [n for n in notes(plan) if "GPU Operator's driver container" in n]
    assert said and "tune kube gpu-operator" in said[0]
