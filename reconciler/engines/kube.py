"""Kubernetes, without credentials on the node: what tune leaves on the node's file system for
the cluster's own agents to read, and nothing it sends to the API server.

- kured's reboot sentinel (`/run/reboot-required` by default): made while a boot configuration
  waits for a boot that has not happened (`pending.json` written in this boot), only where no
  other tool made one; removed after the boot only where tune made it (its record,
  `/var/lib/tune/sentinel.json`, and the file still holding tune's words).
- Node Feature Discovery's local feature file (`features.d/tune`): the profile, in sync,
  reboot pending and a short digest as labels, written by rename so NFD never reads half.
- GPU Operator nodes: the driver container owns the NVIDIA driver, so the profile's `NVreg_`
  parameters belong in the operator's kernel-module ConfigMap; tune prints it, writes nothing.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..apply.pending import read_pending
from ..core.errors import HostError, UsageError
from ..core.files import Request
from ..facts.kernel import BOOT_ID
from ..facts.nvidia_params import DRIVER_CONTAINER_MARK
from ..hosts.base import Host, ReadableHost
from ..profile.load import LoadedProfile
from ..steps.records import RecordError
from ..steps.state import STATE
from ..steps.status import STATUS, Status

SENTINEL = "/run/reboot-required"  # kured's default --reboot-sentinel
SENTINEL_RECORD = f"{STATE}/sentinel.json"
FEATURES = "/etc/kubernetes/node-feature-discovery/features.d/tune"


def _boot_id(host: ReadableHost) -> str | None:
    return host.fetch(Request.of(BOOT_ID)).value(BOOT_ID)


def _local(root: str | None, path: str) -> str:
    """`path` of the host as this machine names it: under the snapshot root, or itself."""
    if root is None:
        return path
    return os.path.join(root, path.lstrip("/"))


# --- kured's sentinel -------------------------------------------------------------------------


@dataclass(frozen=True)
class SentinelRecord:
    """What tune made: the sentinel's path, the boot it was made in, the words it holds."""

    path: str
    boot_id: str
    marker: str

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2, sort_keys=True) + "\n"


def marker_of(run_id: str) -> str:
    return f"made by tune for run {run_id}: a boot configuration waits for a reboot\n"


def read_record(host: ReadableHost) -> SentinelRecord | None:
    data = host.read_file(SENTINEL_RECORD)
    if data is None:
        return None
    try:
        found = json.loads(data)
        record = SentinelRecord(str(found["path"]), str(found["boot_id"]), str(found["marker"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise HostError(f"{SENTINEL_RECORD} is not a record tune wrote ({exc}).") from None
    return record


@dataclass(frozen=True)
class SentinelOutcome:
    action: str  # "made" | "kept" | "left" (another tool's) | "removed" | "gone" | "none"
    path: str
    said: str


def _waiting(host: ReadableHost) -> tuple[str | None, str | None]:
    """(run id, boot id) of a boot configuration that waits for a boot not yet happened:
    pending.json written in this very boot. After the boot it stays until `tune verify`,
    but then it no longer waits for a reboot."""
    pending = read_pending(host)
    now = _boot_id(host)
    if pending is None or now is None or pending.boot_id != now:
        return None, now
    return pending.run_id, now


def _create_exclusive(local: str, text: str) -> bool:
    """Make the file only where nothing is at its name (no link followed); False when
    something already is, whoever made it."""
    os.makedirs(os.path.dirname(local), exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(local, flags, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _holds(local: str, marker: str) -> bool:
    """Whether the file at `local` is a regular file holding exactly tune's words: another
    tool that made its own sentinel after tune's went (a persistent path, the next boot) is
    never taken for tune's."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(local, flags)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return os.read(fd, len(marker) + 1) == marker.encode()
    finally:
        os.close(fd)


def _remove_ours(host: Host, root: str | None, record: SentinelRecord) -> SentinelOutcome:
    local = _local(root, record.path)
    if _holds(local, record.marker):
        os.unlink(local)
        outcome = SentinelOutcome("removed", record.path, f"{record.path}: removed (tune made it).")
    elif os.path.lexists(local):
        said = f"{record.path}: left alone (not the one tune made: another tool's)."
        outcome = SentinelOutcome("left", record.path, said)
    else:
        outcome = SentinelOutcome("gone", record.path, f"{record.path}: already gone.")
    host.delete_file(SENTINEL_RECORD)
    return outcome


def reconcile_sentinel(host: Host, root: str | None, path: str = SENTINEL) -> SentinelOutcome:
    """Make kured's sentinel while a reboot waits (only if absent), remove the one tune made
    once it no longer does (only if still tune's). Idempotent: run it as often as you like."""
    if not path.startswith("/"):
        raise HostError(f"{path}: the sentinel's path must be absolute.")
    record = read_record(host)
    run_id, now = _waiting(host)
    if run_id is None:
        if record is None:
            return SentinelOutcome("none", path, f"{path}: no reboot waits; nothing of tune's.")
        return _remove_ours(host, root, record)
    if record is not None:
        same = record.path == path and record.boot_id == now
        if same and _holds(_local(root, path), record.marker):
            return SentinelOutcome("kept", path, f"{path}: kept (tune made it).")
        _remove_ours(host, root, record)  # another path, an older boot or run
    marker = marker_of(run_id)
    # The record first: a run cut short between the two leaves a record of a file that is not
    # there, which the next run clears; never a sentinel tune made and cannot tell is its own.
    host.private_dir(STATE)  # tune's state directory, root's and 0700, as every run makes it
    host.put_file(SENTINEL_RECORD, SentinelRecord(path, now or "", marker).to_json().encode())
    try:
        made = _create_exclusive(_local(root, path), marker)
    except OSError as exc:
        host.delete_file(SENTINEL_RECORD)
        raise HostError(f"{path}: cannot create the sentinel ({exc.strerror}).") from exc
    if not made:
        host.delete_file(SENTINEL_RECORD)
        said = f"{path}: already there (another tool's): left alone, and never removed by tune."
        return SentinelOutcome("left", path, said)
    return SentinelOutcome("made", path, f"{path}: made (run {run_id} waits for a reboot).")


# --- Node Feature Discovery -----------------------------------------------------------------

# A label name without a prefix: NFD's local source puts it under feature.node.kubernetes.io/.
# Kubernetes' rules for the name part and for the value: at most 63 characters, alphanumerics
# at both ends, `-`, `_` and `.` between (a value may also be empty).
LABEL_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
NFD_PREFIX = "feature.node.kubernetes.io/"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def label_value(text: str) -> str:
    """`text` within a label value's rules: other characters become `-`, at most 63, an
    alphanumeric at each end; "" where nothing of it is left."""
    value = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[:63]
    return value.strip("-_.")


def short_digest(digest: str | None) -> str | None:
    """`sha256:abcdef...` -> `abcdef012345`: enough to tell releases apart in a selector."""
    if not digest:
        return None
    return label_value(digest.partition(":")[2] or digest)[:12] or None


def _tristate(value: bool | None) -> str:
    return "unknown" if value is None else str(value).lower()


def read_status(host: ReadableHost) -> Status:
    data = host.read_file(STATUS)
    if data is None:
        return Status()
    try:
        return Status.from_json(data)
    except RecordError as exc:
        raise HostError(str(exc)) from None


def feature_labels(host: ReadableHost) -> dict[str, str]:
    """The labels tune gives the node, from status.json (and pending.json, until the status
    says it): names without a prefix, each value within the rules."""
    status = read_status(host)
    run_id, _now = _waiting(host)
    labels = {
        "tune-profile": label_value(status.profile or "") or "none",
        "tune-in-sync": _tristate(status.in_sync),
        "tune-reboot-pending": _tristate(status.reboot_pending or run_id is not None),
        "tune-armed": _tristate(status.armed),
    }
    digest = short_digest(status.profile_digest)
    if digest:
        labels["tune-digest"] = digest
    return labels


def features_text(labels: Mapping[str, str]) -> str:
    lines = ["# Written by `tune kube features`: replaced whole on each run; do not edit."]
    lines += [f"{name}={value}" for name, value in sorted(labels.items())]
    return "\n".join(lines) + "\n"


def write_features(host: Host, path: str = FEATURES) -> dict[str, str]:
    """The feature file, replaced by rename (the new one beside it under a hidden name, which
    NFD skips), so nfd-worker reads the old labels or the new, never part of them."""
    labels = feature_labels(host)
    for name, value in labels.items():
        if not LABEL_PART.fullmatch(name) or (value and not LABEL_PART.fullmatch(value)):
            raise AssertionError(f"label {name}={value} breaks Kubernetes' label rules")
    host.put_file(path, features_text(labels).encode())
    return labels


# --- GPU Operator ---------------------------------------------------------------------------


def driver_container_owns(host: ReadableHost) -> bool:
    """Whether the GPU Operator's driver container loaded the driver here (its mark)."""
    return host.read_file(DRIVER_CONTAINER_MARK) is not None


def nvreg_params(loaded: LoadedProfile) -> dict[str, str]:
    """The profile's `NVreg_` parameters of `nvidia`, as the kind that plans them reads them."""
    from ..kinds import named

    kind = named("nvreg")
    if kind is None:
        return {}
    spec: Any = kind.spec_of(loaded.profile)
    return {item.param: item.value for item in spec if item.value is not None}


def kernel_module_configmap(
    params: Mapping[str, str], name: str = "kernel-module-params", namespace: str = "gpu-operator"
) -> str:
    """The ConfigMap the GPU Operator reads the driver's parameters from
    (`driver.kernelModuleConfig.name`): one `nvidia.conf` of `KEY=VALUE` lines."""
    if not DNS_LABEL.fullmatch(name) or not DNS_LABEL.fullmatch(namespace):
        raise UsageError(f"{name!r}, {namespace!r}: a ConfigMap and its namespace are DNS labels.")
    # The driver container passes each line to modprobe as one word: no blank inside.
    bad = [key for key, value in params.items() if re.search(r"\s", key + value) or "=" in key]
    if bad:
        raise UsageError(
            f"{', '.join(bad)}: a parameter of nvidia.conf is one KEY=VALUE word a line."
        )
    lines = "".join(f"    {key}={value}\n" for key, value in params.items())
    return (
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        f"  name: {name}\n"
        f"  namespace: {namespace}\n"
        "data:\n"
        "  nvidia.conf: |\n" + lines
    )
