"""`tune export`: a profile as the documents of the engines that own a node's boot line
(issue #32, item 4). The MachineConfig is checked against the Kubernetes API's schema (its
metadata) and the Machine Config Operator's fields (its spec); the NodeWright package's
scripts are run as NodeWright's agent runs them (`controller.run_step`: the step at
COPY_DIR/skyhook_dir/PATH with its arguments, the step's env, STEP_ROOT and SKYHOOK_DIR, its
exit code held to `returncodes`), against a snapshot host."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_tune
from small_host import SmallHost, build, tree, write_profile

from reconciler.engines.export import STAGES

PROJECT = Path(__file__).resolve().parent.parent
KUBERNETES = "1.30.0"

PROFILE = {
    "cmdline": {
        "set": {
            "amd_pstate": "active",
            "processor.max_cstate": {"value": 1, "priority": "P1", "reason": "C2 stays off"},
            "iommu": "pt",
            "nosmt": None,
        },
        "remove": ["intel_iommu"],
    },
    "sysctl": {"vm.swappiness": 10},
}


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    return write_profile(tmp_path / "gpu.yaml", PROFILE)


# --- OpenShift's MachineConfig ----------------------------------------------------------------

# The MachineConfig spec's fields as the Machine Config Operator's CRD declares them
# (machineconfiguration.openshift.io/v1, MachineConfigSpec); kubernetes-validate carries no
# OpenShift schema, so the spec is held to these and the metadata to Kubernetes' ObjectMeta.
MACHINECONFIG_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "baseOSExtensionsContainerImage": {"type": "string"},
        "config": {"type": "object"},
        "extensions": {"type": "array", "items": {"type": "string"}},
        "fips": {"type": "boolean"},
        "kernelArguments": {"type": "array", "items": {"type": "string"}},
        "kernelType": {"type": "string"},
        "osImageURL": {"type": "string"},
    },
}


def test_machineconfig_carries_the_profiles_kernel_arguments(profile: Path) -> None:
    yaml = pytest.importorskip("yaml")
    done = run_tune("export", "machineconfig", profile, "--role", "gpu")
    assert done.code == 0, done.err
    document = yaml.safe_load(done.out)
    assert document["apiVersion"] == "machineconfiguration.openshift.io/v1"
    assert document["kind"] == "MachineConfig"
    assert document["metadata"]["name"] == "99-gpu-tune-small"
    assert document["metadata"]["labels"] == {"machineconfiguration.openshift.io/role": "gpu"}
    assert document["spec"] == {
        "kernelArguments": ["amd_pstate=active", "processor.max_cstate=1", "iommu=pt", "nosmt"]
    }
    # What a MachineConfig cannot say is said, not dropped silently.
    assert "# Left out: cmdline.remove intel_iommu" in done.out
    digest = run_tune("validate", profile, "--format", "json")
    assert (
        document["metadata"]["annotations"]["tune/profile-digest"]
        == json.loads(digest.out)["digest"]
    )


def test_machineconfig_is_valid_for_the_api(profile: Path) -> None:
    yaml = pytest.importorskip("yaml")
    jsonschema = pytest.importorskip("jsonschema")
    kv = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate is not installed (pip install kubernetes-validate)",
    )
    document = yaml.safe_load(run_tune("export", "machineconfig", profile).out)
    # ObjectMeta as the API server takes it, carried by an object the schema set knows.
    kv.validate(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": document["metadata"]},
        KUBERNETES,
        strict=True,
    )
    jsonschema.validate(document["spec"], MACHINECONFIG_SPEC)
    assert set(document) == {"apiVersion", "kind", "metadata", "spec"}


def test_machineconfig_of_a_profile_without_cmdline_is_refused(tmp_path: Path) -> None:
    bare = write_profile(tmp_path / "bare.yaml", {"sysctl": {"vm.swappiness": 10}})
    done = run_tune("export", "machineconfig", bare)
    assert done.code == 64 and "no cmdline.set entries" in done.err
    assert done.out == ""


# --- NodeWright -------------------------------------------------------------------------------

MODES = {
    "apply",
    "apply-check",
    "config",
    "config-check",
    "post-interrupt",
    "post-interrupt-check",
    "uninstall",
    "uninstall-check",
    "upgrade",
    "upgrade-check",
}
SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
STEP_KEYS = {"name", "path", "arguments", "returncodes", "on_host", "idempotence", "upgrade_step"}


def package(tmp_path: Path, profile: Path) -> Path:
    into = tmp_path / "tune-package"
    done = run_tune("export", "nodewright", profile, "-d", into, "--version", "1.2.3")
    assert done.code == 0, done.err
    return into


def test_the_package_is_what_nodewrights_agent_reads(tmp_path: Path, profile: Path) -> None:
    """config.json as the agent's v1 schema requires it (skyhook-agent-schema.json and
    step-schema.json: the required keys and their types), each step's script present."""
    into = package(tmp_path, profile)
    config = json.loads((into / "config.json").read_text())
    assert config["schema_version"] == "v1"
    assert config["package_name"] == "tune-small"
    assert SEMVER.fullmatch(config["package_version"]) and config["package_version"] == "1.2.3"
    assert config["expected_config_files"] == []
    assert set(config["modes"]) <= MODES
    for mode, steps in config["modes"].items():
        for step in steps:
            assert set(step) >= STEP_KEYS, mode
            assert re.fullmatch(r"[a-zA-Z0-9_\-.]+", step["name"])
            assert all(isinstance(a, str) for a in step["arguments"])
            assert step["returncodes"] and all(isinstance(c, int) for c in step["returncodes"])
            assert all(isinstance(v, str) for v in step["env"].values())
            script = into / "skyhook_dir" / step["path"]
            assert script.is_file() and os.access(script, os.X_OK)
    # Every stage with work has its check: the agent counts a stage done only when it passes.
    for work in ("apply", "config", "post-interrupt", "uninstall"):
        assert f"{work}-check" in config["modes"]
    # The digest the steps pin is that of the profile the package carries.
    pinned = config["modes"]["apply"][0]["env"]["TUNE_PROFILE_DIGEST"]
    carried = run_tune("validate", into / "skyhook_dir/profile.yaml", "--format", "json")
    assert json.loads(carried.out)["digest"] == pinned


def test_a_package_is_never_made_over_other_files(tmp_path: Path, profile: Path) -> None:
    into = tmp_path / "busy"
    into.mkdir()
    (into / "mine").write_text("x")
    done = run_tune("export", "nodewright", profile, "-d", into)
    assert done.code == 64 and "not an empty directory" in done.err
    assert [p.name for p in into.iterdir()] == ["mine"]


def tune_on_path(tmp_path: Path, record: Path | None = None) -> Path:
    """A directory with `tune` in it: this checkout's tune, or (with `record`) a fake that
    writes its argv, a line each, and succeeds."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tune = bin_dir / "tune"
    if record is not None:
        tune.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{record}"\n')
    else:
        tune.write_text(
            f'#!/bin/sh\nPYTHONPATH="{PROJECT}" exec "{sys.executable}" -m reconciler.cli "$@"\n'
        )
    tune.chmod(0o755)
    return bin_dir


def agent_runs(
    into: Path, mode: str, env: dict[str, str]
) -> list[subprocess.CompletedProcess[str]]:
    """`controller.run_step` for each step of `mode`: chmod +x, then the step with its
    arguments, its env with STEP_ROOT and SKYHOOK_DIR over this one's (no chroot here: the
    host is a snapshot directory, which TUNE_ROOT names to tune)."""
    config = json.loads((into / "config.json").read_text())
    done = []
    for step in config["modes"][mode]:
        path = into / "skyhook_dir" / step["path"]
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        environment = {**os.environ, **env, **step["env"]}
        environment |= {"STEP_ROOT": str(into / "skyhook_dir"), "SKYHOOK_DIR": str(into)}
        ran = subprocess.run(
            [str(path), *step["arguments"]],
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ran.returncode in step["returncodes"], (mode, ran.returncode, ran.stdout, ran.stderr)
        done.append(ran)
    return done


def test_each_stage_calls_tune_as_the_contract_says(tmp_path: Path, profile: Path) -> None:
    into = package(tmp_path, profile)
    record = tmp_path / "argv"
    env = {"PATH": f"{tune_on_path(tmp_path, record)}:{os.environ['PATH']}", "TUNE_ROOT": "/snap"}
    digest = json.loads((into / "config.json").read_text())["modes"]["apply"][0]["env"][
        "TUNE_PROFILE_DIGEST"
    ]
    carried = into / "skyhook_dir/profile.yaml"
    check = f"check {carried} --profile-digest {digest} --quiet --root /snap"
    expected = {
        "apply": f"apply {carried} --profile-digest {digest} --runtime-only --yes --root /snap",
        "apply-check": check,
        "config": f"apply {carried} --profile-digest {digest} --reboot-phase --arm --yes "
        "--root /snap",
        "config-check": check,
        "post-interrupt": "verify --root /snap",
        "post-interrupt-check": check,
        "uninstall": "rollback --yes --root /snap",
        "uninstall-check": check,
    }
    assert [mode for mode, _ in STAGES] == list(expected)
    for mode, argv in expected.items():
        record.write_text("")
        agent_runs(into, mode, env)
        assert record.read_text() == argv + "\n", mode


@pytest.mark.slow
def test_the_agent_applies_checks_verifies_and_uninstalls_a_snapshot(
    tmp_path: Path, profile: Path
) -> None:
    """This checkout's tune under the agent's stages, on a snapshot: apply then its check
    pass, post-interrupt (nothing armed) and its check pass, uninstall restores the host."""
    root = build(tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60"}))
    runtime_only = write_profile(tmp_path / "runtime.yaml", {"sysctl": {"vm.swappiness": 10}})
    into = package(tmp_path, runtime_only)
    env = {"PATH": f"{tune_on_path(tmp_path)}:{os.environ['PATH']}", "TUNE_ROOT": str(root)}
    before = tree(root)
    agent_runs(into, "apply", env)
    assert (root / "proc/sys/vm/swappiness").read_text() == "10\n"
    agent_runs(into, "apply-check", env)
    agent_runs(into, "post-interrupt", env)  # nothing armed: nothing to verify, exit 0
    agent_runs(into, "post-interrupt-check", env)
    agent_runs(into, "uninstall", env)
    assert tree(root) == before
    agent_runs(into, "uninstall-check", env)


def test_the_arm_stage_runs_where_tune_can_arm(tmp_path: Path, profile: Path) -> None:
    root = build(tmp_path / "host", SmallHost(sysctls={"vm.swappiness": "60"}))
    runtime_only = write_profile(tmp_path / "runtime.yaml", {"sysctl": {"vm.swappiness": 10}})
    into = package(tmp_path, runtime_only)
    env = {"PATH": f"{tune_on_path(tmp_path)}:{os.environ['PATH']}", "TUNE_ROOT": str(root)}
    agent_runs(into, "apply", env)  # the agent's order: the live settings, then config
    agent_runs(into, "config", env)  # no boot configuration to arm: nothing to do, exit 0
    agent_runs(into, "config-check", env)
