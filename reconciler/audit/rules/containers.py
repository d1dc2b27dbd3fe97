"""Audit rules: LXC containers that mount NVIDIA devices: locked-memory limit and device access."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.files import Request
from ...facts import lxc as lxc_fmt
from ...facts.lxc import LXC_CONFIGS, PVE_CONFIGS, device_lines, nvidia_allow_lines
from ..facts import Facts
from ..model import Area, Fix, Good, Problem, Verdict
from ..thresholds import Thresholds
from .base import P0, Checked, good_or_problem, rule


@dataclass(frozen=True)
class ContainerConfig:
    identity: dict[str, str]  # {"container": "101"} or {"path": "/var/lib/lxc/x/config"}
    name: str
    config: str
    parsed: lxc_fmt.Config  # as its reader takes it


def gpu_containers(facts: Facts) -> list[ContainerConfig]:
    found = []
    for pattern in (PVE_CONFIGS, LXC_CONFIGS):
        for path in facts.files.glob(pattern):
            raw = facts.files.text(path)
            if raw is None:
                continue
            parsed = lxc_fmt.read(path, raw)
            if not lxc_fmt.mounts_nvidia(parsed):
                continue
            if pattern == PVE_CONFIGS:
                name = path.rsplit("/", 1)[1].removesuffix(".conf")
                found.append(ContainerConfig({"container": name}, name, path, parsed))
            else:
                found.append(ContainerConfig({"path": path}, path.split("/")[-2], path, parsed))
    return found


@rule("lxc-memlock", Area.CONTAINER, PVE_CONFIGS, LXC_CONFIGS, lxc_fmt.PROC_DEVICES)
def lxc_memlock(facts: Facts, limits: Thresholds) -> list[Verdict]:
    checked = []
    for container in gpu_containers(facts):
        value = lxc_fmt.prlimit(container.parsed, lxc_fmt.MEMLOCK)
        if value:
            line = container.parsed.syntax.line(lxc_fmt.MEMLOCK, value).rstrip("\n")
            limit = f"with memlock {value}"
        else:
            line, limit = f"no {lxc_fmt.MEMLOCK}", "without a memlock limit (default 8 MiB)"
        checked.append(
            Checked(
                name=container.name,
                holds=value is not None and lxc_fmt.limit(value) == "unlimited",
                shown=f"{container.config}: {line}",
                problem=f"container {container.name} mounts NVIDIA devices {limit}",
                fix=Fix("lxc", ("memlock",), "unlimited", item=container.identity),
            )
        )
    return good_or_problem(
        checked,
        f"{lxc_fmt.MEMLOCK} unlimited in",
        P0,
        "CUDA pinned memory, NCCL and RDMA register host memory with mlock; the default "
        "limit makes them fail or fall back to pageable copies",
    )


ALLOW_ALL = ("a", "a *:* rwm", "c *:* rwm")


@dataclass(frozen=True)
class Stale:
    """What a GPU container's config lacks or has too much of, against the host."""

    container: ContainerConfig
    gone: list[int]  # allowed majors no device has
    missing: list[tuple[int, str]]  # NVIDIA majors (and their driver) not allowed
    unmounted: list[str]  # /dev/nvidia* nodes not mounted
    vanished: list[str]  # mounted /dev/nvidia* nodes that do not exist
    reworded: bool  # NVIDIA mount entries in another form than tune writes

    @property
    def message(self) -> str:
        parts = []
        if self.gone:
            parts.append(f"allows major {', '.join(map(str, self.gone))}, which no device has")
        if self.missing:
            parts.append(f"lacks {', '.join(f'{m} ({name})' for m, name in self.missing)}")
        if self.unmounted:
            parts.append(f"does not mount {', '.join(self.unmounted)}")
        if self.vanished:
            parts.append(f"mounts {', '.join(self.vanished)}, which does not exist")
        if self.reworded and not (self.unmounted or self.vanished):
            parts.append("mounts NVIDIA nodes with other options than bind,optional,create")
        return f"container {self.container.name} " + ", and ".join(parts)


def _stale(container: ContainerConfig, devices: str, nodes: tuple[str, ...]) -> Stale | None:
    """None when the container allows every NVIDIA major and mounts every NVIDIA node."""
    nvidia = lxc_fmt.nvidia_majors(devices)
    lines = device_lines(container.parsed, devices, nodes)
    current, wanted = lines[lxc_fmt.ALLOW]
    allows = [lxc_fmt.meaning(lxc_fmt.ALLOW, v) for v in container.parsed.values(lxc_fmt.ALLOW)]
    allowed = current == wanted or any(a in ALLOW_ALL for a in allows)
    mounted, to_mount = lines.get(lxc_fmt.MOUNT, ([], []))
    if allowed and mounted == to_mount:
        return None
    majors = [] if allowed else [lxc_fmt.rule_major(line) or 0 for line in current]
    now = [lxc_fmt.mount_source(line) for line in mounted]
    want = [lxc_fmt.mount_source(line) for line in to_mount]
    return Stale(
        container,
        gone=[m for m in majors if m not in nvidia],
        missing=[] if allowed else [(m, n) for m, n in sorted(nvidia.items()) if m not in majors],
        unmounted=[n for n in want if n not in now],
        vanished=[n for n in now if n not in want],
        reworded=mounted != to_mount,
    )


@rule(
    "lxc-stale-majors",
    Area.CONTAINER,
    PVE_CONFIGS,
    LXC_CONFIGS,
    lxc_fmt.PROC_DEVICES,
    Request.of(nodes=[lxc_fmt.NVIDIA_NODES]),
)
def lxc_stale_majors(facts: Facts, limits: Thresholds) -> list[Verdict]:
    devices = facts.files.text(lxc_fmt.PROC_DEVICES) or ""
    nvidia = lxc_fmt.nvidia_majors(devices)
    if not nvidia:
        return []
    nodes = facts.files.node_paths(lxc_fmt.NVIDIA_NODES)
    majors = ", ".join(f"{m} {n}" for m, n in sorted(nvidia.items()))
    stale: list[Stale] = []
    fine: list[ContainerConfig] = []
    for container in gpu_containers(facts):
        found = _stale(container, devices, nodes)
        if found is None:
            fine.append(container)
        else:
            stale.append(found)
    out: list[Verdict] = []
    if fine:
        out.append(
            Good(
                f"NVIDIA device majors allowed in {', '.join(c.name for c in fine)}",
                (f"{lxc_fmt.PROC_DEVICES}: {majors}", *(c.config for c in fine)),
            )
        )
    if stale:
        out.append(
            Problem(
                P0,
                "; ".join(s.message for s in stale),
                (
                    f"{lxc_fmt.PROC_DEVICES}: {majors}",
                    f"{lxc_fmt.NVIDIA_NODES}: {' '.join(nodes) or 'none'}",
                    *(
                        f"{s.container.config}: {lxc_fmt.ALLOW} "
                        + ", ".join(nvidia_allow_lines(s.container.parsed, devices))
                        for s in stale
                    ),
                ),
                "a kernel or driver upgrade moves the dynamic NVIDIA majors (nvidia-uvm, "
                "nvidia-caps) and can add or remove nodes; the container's cgroup then denies "
                "them, or the node is not there, and CUDA fails inside",
                tuple(
                    Fix("lxc", ("nvidia_devices",), True, item=s.container.identity) for s in stale
                ),
            )
        )
    return out
