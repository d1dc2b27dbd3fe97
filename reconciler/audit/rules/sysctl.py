"""Audit rules: Kernel parameters under /proc/sys, and transparent huge pages."""

from __future__ import annotations

from collections.abc import Callable

from ...core.changes import Priority
from ...facts import numbers, sysctl
from ...facts.numa import NODES_ONLINE
from ...kinds.base import normalize_choice
from ..facts import Facts
from ..model import Area, Fix, Good, NotIssue, Problem, Verdict
from ..thresholds import Thresholds
from .base import P0, P1, P2, rule


def _sysctl(facts: Facts, key: str) -> tuple[str, str | None]:
    path = sysctl.path_of(key)
    value = facts.files.value(path)
    return path, None if value is None else " ".join(value.split())


NUMA_BALANCING = "kernel.numa_balancing"


@rule("numa-balancing", Area.MEMORY, sysctl.path_of(NUMA_BALANCING))
def numa_balancing(facts: Facts, limits: Thresholds) -> list[Verdict]:
    path, value = _sysctl(facts, NUMA_BALANCING)
    if value is None:
        return []
    nodes = len(facts.numa_nodes)
    evidence = (f"{path}: {value}", f"{NODES_ONLINE}: {facts.files.value(NODES_ONLINE)}")
    if value == "0":
        return [Good(f"{NUMA_BALANCING} = 0", evidence[:1])]
    if nodes <= 1:
        return [
            NotIssue(
                f"{NUMA_BALANCING} = {value} on a single NUMA node",
                evidence,
                "with one node there is nowhere to migrate pages to",
            )
        ]
    return [
        Problem(
            P0,
            f"{NUMA_BALANCING} = {value} on a host with {nodes} NUMA nodes",
            evidence,
            "automatic NUMA balancing unmaps and migrates pages under the serving process, "
            "stalling the CPU threads that feed the GPUs and moving pinned buffers away from them",
            (Fix("sysctl", (NUMA_BALANCING,), 0),),
        )
    ]


def sysctl_above(
    rule_id: str,
    area: Area,
    key: str,
    limit: Callable[[Thresholds], int],
    priority: Priority,
    reason: str,
) -> None:
    """A rule for an integer sysctl that should be at most `limit` (which the fix writes)."""

    def check(facts: Facts, limits: Thresholds) -> list[Verdict]:
        path, value = _sysctl(facts, key)
        number = None if value is None else numbers.signed(value)
        if number is None:
            return []
        allowed = limit(limits)
        if number <= allowed:
            return [Good(f"{key} = {value}", (f"{path}: {value}",))]
        return [
            Problem(
                priority,
                f"{key} = {value}" + (f" (above {allowed})" if allowed else ""),
                (f"{path}: {value}",),
                reason,
                (Fix("sysctl", (key,), allowed),),
            )
        ]

    rule(rule_id, area, sysctl.path_of(key))(check)


sysctl_above(
    "swappiness",
    Area.MEMORY,
    "vm.swappiness",
    lambda t: t.max_swappiness,
    P1,
    "model weights, pinned buffers and KV-cache staging must stay in RAM; swapping them out "
    "costs seconds on the next request",
)
sysctl_above(
    "nmi-watchdog",
    Area.KERNEL,
    "kernel.nmi_watchdog",
    lambda t: 0,
    P2,
    "the NMI watchdog holds a perf counter on every CPU and interrupts each core periodically",
)
sysctl_above(
    "sched-autogroup",
    Area.KERNEL,
    "kernel.sched_autogroup_enabled",
    lambda t: 0,
    P2,
    "autogroup is for desktop sessions; on a server it skews CPU shares between worker "
    "processes started from different sessions",
)


def socket_buffer(rule_id: str, key: str, triple: bool) -> None:
    """A rule for a socket buffer limit: a byte count, or the max of a `min default max`
    triple (tcp_rmem, tcp_wmem)."""

    def check(facts: Facts, limits: Thresholds) -> list[Verdict]:
        path, value = _sysctl(facts, key)
        words = (value or "").split()
        sizes = [numbers.unsigned(w) for w in words]
        if None in sizes or len(words) != (3 if triple else 1):
            return []
        largest = int(sizes[-1] or 0)
        evidence = (f"{path}: {value}",)
        if largest >= limits.min_socket_buffer:
            return [Good(f"{key} = {value}", evidence)]
        fixed: int | str = limits.socket_buffer
        if triple:
            fixed = f"{words[0]} {words[1]} {limits.socket_buffer}"
        size = f"{largest // 1024} KiB"
        return [
            Problem(
                P1,
                f"{key} = {value}: at most {size} per socket",
                evidence,
                f"multi-node NCCL, KV-cache transfer and model downloads need socket buffers "
                f"of the link's bandwidth-delay product; {size} caps a single stream far "
                "below a 100-400 Gb/s NIC",
                (Fix("sysctl", (key,), fixed),),
            )
        ]

    rule(rule_id, Area.KERNEL, sysctl.path_of(key))(check)


socket_buffer("net-rmem-max", "net.core.rmem_max", triple=False)
socket_buffer("net-wmem-max", "net.core.wmem_max", triple=False)
socket_buffer("tcp-rmem", "net.ipv4.tcp_rmem", triple=True)
socket_buffer("tcp-wmem", "net.ipv4.tcp_wmem", triple=True)


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


@rule("thp-always", Area.MEMORY, THP_ENABLED)
def thp_always(facts: Facts, limits: Thresholds) -> list[Verdict]:
    raw = facts.files.value(THP_ENABLED)
    mode = normalize_choice(raw)
    if mode is None:
        return []
    evidence = (f"{THP_ENABLED}: {raw}",)
    if mode != "always":
        return [Good(f"transparent hugepages {mode}", evidence)]
    return [
        Problem(
            P1,
            "transparent hugepages always",
            evidence,
            "THP always makes page faults in the serving process compact memory, with stalls of "
            "milliseconds; madvise keeps huge pages for CUDA and PyTorch, which ask for them",
            (Fix("sysfs", (THP_ENABLED,), "madvise"),),
        )
    ]
