"""Documents for the engines that own a node's boot line, made from a profile: tune writes them
for the operator to commit, and never writes the boot line of a node such an engine manages.

- OpenShift's Machine Config Operator: a `MachineConfig` whose `kernelArguments` are the words
  of the profile's `cmdline.set`. The MCO drains, writes the boot line and reboots, pool by pool.
- NodeWright (NVIDIA's node agent, formerly Skyhook): a package directory, `config.json` and
  step scripts under `skyhook_dir/` that call tune on the host for each of the agent's stages
  (apply, config, post-interrupt, uninstall, each with its check). The reboot between config
  and post-interrupt is the agent's interrupt, declared where the package is deployed.
"""

from __future__ import annotations

import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..facts import cmdline as fmt
from ..profile.bundled import shown
from ..profile.load import LoadedProfile, load_profile

DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def dump_yaml(data: Any) -> str:
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096  # a digest on one line, as an operator greps for it
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    stream = io.StringIO()
    yaml.dump(data, stream)
    return stream.getvalue()


def object_name(text: str) -> str:
    """`text` as a Kubernetes object name (a DNS subdomain): lower case, other characters `-`."""
    name = re.sub(r"[^a-z0-9.-]", "-", text.lower()).strip("-.")[:253].strip("-.")
    if not DNS_NAME.fullmatch(name):
        raise UsageError(f"{text!r} cannot be made a Kubernetes object name.")
    return name


@dataclass(frozen=True)
class KernelArguments:
    words: list[str]  # what the boot line must carry, in the profile's order
    left_out: list[str]  # what a MachineConfig cannot say (removals), one sentence each


def kernel_arguments(loaded: LoadedProfile) -> KernelArguments:
    spec: Any = getattr(loaded.profile, "cmdline", None)  # a section its kind adds
    if spec is None:
        return KernelArguments([], [])
    words: list[str] = []
    left_out: list[str] = []
    for edit, _meta in spec.wanted():
        if edit.mode is fmt.Mode.EXACTLY and not edit.values:
            left_out.append(
                f"cmdline.remove {edit.name}: a MachineConfig only adds arguments; remove it "
                "from the MachineConfig (or the pool's base) that adds it."
            )
            continue
        words.extend(edit.words)
    return KernelArguments(words, left_out)


def machineconfig(loaded: LoadedProfile, role: str = "worker", name: str | None = None) -> str:
    """The MachineConfig YAML: the profile's kernel arguments for the machines of `role`."""
    args = kernel_arguments(loaded)
    if not args.words:
        raise UsageError(f"{loaded.path}: no cmdline.set entries: nothing for a MachineConfig.")
    role = object_name(role)
    name = object_name(name or f"99-{role}-tune-{loaded.profile.name}")
    document = {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {
            "name": name,
            "labels": {"machineconfiguration.openshift.io/role": role},
            "annotations": {"tune/profile-digest": loaded.pinned_as},
        },
        "spec": {"kernelArguments": args.words},
    }
    head = f"# Made by `tune export machineconfig {shown(loaded.path)}` ({loaded.pinned_as}).\n"
    head += "".join(f"# Left out: {said}\n" for said in args.left_out)
    return head + dump_yaml(document)


# --- NodeWright -----------------------------------------------------------------------------

SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")

# Each stage of the agent and its check, with the script that runs there (in skyhook_dir/).
STAGES: tuple[tuple[str, str], ...] = (
    ("apply", "apply.sh"),
    ("apply-check", "check.sh"),
    ("config", "arm.sh"),
    ("config-check", "check.sh"),
    ("post-interrupt", "verify.sh"),
    ("post-interrupt-check", "check.sh"),
    ("uninstall", "rollback.sh"),
    ("uninstall-check", "check.sh"),
)

_PREAMBLE = """#!/bin/sh
# Made by `tune export nodewright`. NodeWright's agent runs it on the host (on_host, chrooted),
# with STEP_ROOT the package's skyhook_dir there and TUNE_PROFILE_DIGEST from config.json.
# TUNE_ROOT (tests only) points tune at a snapshot directory instead of this host.
set -eu
profile="$STEP_ROOT/profile.yaml"
set --
if [ -n "${TUNE_ROOT:-}" ]; then set -- --root "$TUNE_ROOT"; fi
"""

SCRIPTS: dict[str, str] = {
    # The live settings: the agent's apply stage, rerun until its check passes.
    "apply.sh": 'exec tune apply "$profile" --profile-digest "$TUNE_PROFILE_DIGEST" '
    '--runtime-only --yes "$@"\n',
    # The boot configuration, armed as a one-time boot: the agent's reboot (its interrupt) boots
    # it once, and `tune verify` makes it the default or rolls it back.
    "arm.sh": 'exec tune apply "$profile" --profile-digest "$TUNE_PROFILE_DIGEST" '
    '--reboot-phase --arm --yes "$@"\n',
    # After the agent's reboot: promote or roll back what arm.sh prepared.
    "verify.sh": 'exec tune verify "$@"\n',
    # Every check stage: no drift from the profile (a parameter waiting for the reboot is not).
    "check.sh": 'exec tune check "$profile" --profile-digest "$TUNE_PROFILE_DIGEST" --quiet "$@"\n',
    # Uninstall: restore what tune's newest run recorded.
    "rollback.sh": 'exec tune rollback --yes "$@"\n',
}


def _standalone(loaded: LoadedProfile, into: Path) -> LoadedProfile:
    """The profile, its `extends` resolved, as one file in the package, read back so that the
    digest the scripts pin is that file's."""
    data = {k: v for k, v in loaded.data.items() if k != "extends"}
    head = f"# {loaded.profile.name}, from {loaded.path} ({loaded.pinned_as}), parents merged.\n"
    into.write_text(head + dump_yaml(data))
    return load_profile(into)


def nodewright_package(loaded: LoadedProfile, into: Path, version: str = "1.0.0") -> Path:
    """A NodeWright package directory at `into` (made; refused where it exists and is not
    empty): config.json, skyhook_dir/profile.yaml and the step scripts."""
    if not SEMVER.fullmatch(version):
        raise UsageError(f"{version!r}: a NodeWright package version is MAJOR.MINOR.PATCH.")
    if into.exists() and (not into.is_dir() or any(into.iterdir())):
        raise UsageError(f"{into}: exists and is not an empty directory.")
    steps = into / "skyhook_dir"
    steps.mkdir(parents=True, exist_ok=True)
    standalone = _standalone(loaded, steps / "profile.yaml")
    for script, body in SCRIPTS.items():
        path = steps / script
        path.write_text(_PREAMBLE + body)
        os.chmod(path, 0o755)
    env = {"TUNE_PROFILE_DIGEST": standalone.pinned_as}
    modes = {
        mode: [
            {
                "name": mode,
                "path": script,
                "arguments": [],
                "env": env,
                "returncodes": [0],
                "on_host": True,
                "idempotence": True,
                "upgrade_step": False,
            }
        ]
        for mode, script in STAGES
    }
    config = {
        "schema_version": "v1",
        "package_name": object_name(f"tune-{loaded.profile.name}"),
        "package_version": version,
        "expected_config_files": [],
        "modes": modes,
    }
    (into / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return into
