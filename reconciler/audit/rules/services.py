"""Audit rule: the locked-memory limit of container runtimes, on a GPU host that serves
without LXC (`limits.d` does not reach a systemd service: its unit sets it)."""

from __future__ import annotations

from ...core.files import Request
from ...facts import systemd
from ...facts.lxc import LXC_CONFIGS, PVE_CONFIGS
from ..facts import Facts
from ..model import Area, Fix, NotIssue, Verdict
from ..thresholds import Thresholds
from .base import P1, Checked, good_or_problem, rule
from .containers import gpu_containers

# The services that start GPU containers or jobs: their children inherit the limit.
RUNTIMES = ("containerd.service", "docker.service", "kubelet.service", "slurmd.service")
READS = Request()
for _unit in RUNTIMES:
    READS |= systemd.request(_unit)


@rule("runtime-memlock", Area.CONTAINER, PVE_CONFIGS, LXC_CONFIGS, READS)
def runtime_memlock(facts: Facts, limits: Thresholds) -> list[Verdict]:
    if not facts.gpus:
        return [NotIssue("no GPU", ("no NVIDIA GPU among the PCI devices",), "")]
    containers = gpu_containers(facts)
    if containers:
        names = ", ".join(c.name for c in containers)
        return [
            NotIssue(
                f"GPUs are served from LXC containers ({names})",
                tuple(c.config for c in containers),
                "their locked-memory limit is the container's (lxc-memlock), not a service's",
            )
        ]
    checked = []
    for name in RUNTIMES:
        unit = systemd.resolve(facts.files, name)
        if not unit.exists:
            continue
        raw, source = systemd.setting(facts.files, unit, "Service", "LimitMEMLOCK")
        value = systemd.configured_limit("LimitMEMLOCK", raw)
        checked.append(
            Checked(
                name=name,
                holds=value == systemd.INFINITY,
                shown=(
                    f"{source}: LimitMEMLOCK={raw}" if source else f"{unit.path}: no LimitMEMLOCK"
                ),
                problem=(
                    f"{name} starts with memlock {value}"
                    if value
                    else f"{name} sets no LimitMEMLOCK (systemd's default, 8 MiB since v253)"
                ),
                fix=Fix("services", (name,), {"limits": {"LimitMEMLOCK": "infinity"}}),
            )
        )
    if not checked:
        return [
            NotIssue("no container runtime installed", ("no unit of " + ", ".join(RUNTIMES),), "")
        ]
    return good_or_problem(
        checked,
        "LimitMEMLOCK=infinity for",
        P1,
        "CUDA pinned memory and RDMA register host memory with mlock in the containers or "
        "jobs these services start; they inherit its limit, and /etc/security/limits.d "
        "does not apply to services",
    )
