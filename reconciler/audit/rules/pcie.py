"""Audit rules: PCI Express: MaxReadReq, MaxPayload, Relaxed Ordering, link width and speed of
the GPUs, RDMA NICs and NVMe drives, and ACS on the bridges between them."""

from __future__ import annotations

from collections.abc import Callable

from ...core.changes import Priority
from ...facts.pci import TREE, PciDevice, request_tree, request_vfio, upstream, vfio_bound
from ...facts.pcie import SPEEDS, acs_redirect_flags, gts
from ..facts import MELLANOX, NETWORK_CLASS, NVIDIA, Facts
from ..model import Area, Fix, Good, NotIssue, Problem, Verdict
from ..thresholds import Thresholds
from .base import P0, P1, P2, addresses, config_of, count, rule


@rule("pcie-mrrs", Area.PCIE)
def pcie_mrrs(facts: Facts, limits: Thresholds) -> list[Verdict]:
    return _max_read_request(
        facts.gpus,
        "NVIDIA GPUs",
        P0,
        f"a MaxReadReq below {limits.min_read_request} splits every host-to-GPU DMA read "
        "into small requests and caps PCIe throughput (weights, KV cache, pinned copies)",
        lambda low: [
            {"vendor": NVIDIA, "class": cls} for cls in sorted({g.class_code >> 8 for g in low})
        ],
        limits,
    )


def _max_read_request(
    devices: list[PciDevice],
    noun: str,
    priority: Priority,
    why: str,
    selects: Callable[[list[PciDevice]], list[dict[str, int]]],
    limits: Thresholds,
) -> list[Verdict]:
    """MaxReadReq of `devices` against the threshold: Good, or a Problem whose fixes set it on
    what `selects` picks for the low devices; nothing when none has PCI Express read."""
    read = [(d, c) for d in devices if (c := d.express) is not None]
    if not read:
        return []
    low = [(d, c) for d, c in read if c.max_read_request < limits.min_read_request]
    evidence = tuple(f"{config_of(d)}: MaxReadReq {c.max_read_request}" for d, c in low or read)
    if not low:
        return [Good(f"MaxReadReq {limits.min_read_request} on {len(read)} {noun}", evidence)]
    sizes = "/".join(str(s) for s in sorted({c.max_read_request for _, c in low}))
    return [
        Problem(
            priority,
            f"MaxReadReq {sizes} bytes on {len(low)} of {len(read)} {noun} "
            f"({addresses([d for d, _ in low])})",
            evidence,
            why,
            tuple(
                Fix("pci", (), {"max_read_request": limits.min_read_request}, item={"select": s})
                for s in selects([d for d, _ in low])
            ),
        )
    ]


@rule("pcie-maxpayload", Area.PCIE)
def pcie_maxpayload(facts: Facts, limits: Thresholds) -> list[Verdict]:
    at_limit = [
        (d, c)
        for d in facts.gpus + facts.rdma_nics
        if (c := d.express) is not None and c.max_payload == c.max_payload_supported
    ]
    out: list[Verdict] = []
    for size in sorted({c.max_payload for _, c in at_limit}):
        devices = [(d, c) for d, c in at_limit if c.max_payload == size]
        out.append(
            NotIssue(
                f"MaxPayload {size} bytes on {len(devices)} GPUs and RDMA NICs "
                f"({addresses([d for d, _ in devices])})",
                tuple(
                    f"{config_of(d)}: DevCtl MaxPayload {c.max_payload}, "
                    f"DevCap MaxPayload {c.max_payload_supported}"
                    for d, c in devices
                ),
                "each device already uses the largest payload it supports (its DevCap limit); "
                "only MaxReadReq is a setting worth changing",
            )
        )
    return out


def _link_devices(facts: Facts) -> list[tuple[PciDevice, str]]:
    return [(g, "GPU") for g in facts.gpus] + [(n, "RDMA NIC") for n in facts.rdma_nics]


@rule("pcie-link-width", Area.PCIE)
def pcie_link_width(facts: Facts, limits: Thresholds) -> list[Verdict]:
    checked = [(d, what, c) for d, what in _link_devices(facts) if (c := d.express) is not None]
    narrow = [(d, what, c) for d, what, c in checked if 0 < c.link_width < c.link_width_max]
    if not checked:
        return []
    if not narrow:
        return [
            Good(
                f"{count(len(checked), 'GPU and RDMA NIC link')} at full width",
                tuple(f"{config_of(d)}: LnkSta x{c.link_width}" for d, _, c in checked),
            )
        ]
    return [
        Problem(
            P0,
            ", ".join(
                f"{what} {d.address} at x{c.link_width} of x{c.link_width_max}"
                for d, what, c in narrow
            ),
            tuple(
                f"{config_of(d)}: LnkSta x{c.link_width}, LnkCap x{c.link_width_max}"
                for d, _, c in narrow
            ),
            "a link trained below its width divides the device's host bandwidth; links do not "
            "narrow to save power, so this is the slot, riser, cable or card",
            remedy="reseat the card, check the slot, riser and BIOS PCIe lane settings",
        )
    ]


@rule("pcie-link-speed", Area.PCIE)
def pcie_link_speed(facts: Facts, limits: Thresholds) -> list[Verdict]:
    """GPUs retrain to the lowest speed when idle and back under load: a GPU at the lowest
    speed is power saving. A GPU at a speed between, or a NIC below its maximum, is not."""
    lowest = SPEEDS[1]
    slow, idle, full = [], [], []
    links = _link_devices(facts)
    for device, what in links:
        cap = device.express
        if cap is None or not cap.link_speed:
            continue
        if gts(cap.link_speed) >= gts(cap.link_speed_max):
            full.append((device, cap))
        elif what == "GPU" and cap.link_speed == lowest:
            idle.append((device, cap))
        else:
            slow.append((device, what, cap))
    out: list[Verdict] = []
    if idle:
        out.append(
            NotIssue(
                f"{len(idle)} NVIDIA GPUs at {lowest} now, capable of "
                + "/".join(sorted({str(c.link_speed_max) for _, c in idle})),
                tuple(
                    f"{config_of(d)}: LnkSta {c.link_speed} x{c.link_width}, "
                    f"LnkCap {c.link_speed_max} x{c.link_width_max}"
                    for d, c in idle
                ),
                "idle GPUs drop their link to the lowest speed to save power and retrain to full "
                "speed under load (nvidia-smi -q -d PCIE shows the maximum reached)",
            )
        )
    if full:
        out.append(
            Good(
                f"{len(full)} of {count(len(links), 'GPU and RDMA NIC link')} at full speed",
                tuple(f"{config_of(d)}: LnkSta {c.link_speed}" for d, c in full),
            )
        )
    if slow:
        nic = any(what != "GPU" for _, what, _ in slow)
        out.append(
            Problem(
                P1 if nic else P2,
                ", ".join(
                    f"{what} {d.address} at {c.link_speed} of {c.link_speed_max}"
                    for d, what, c in slow
                ),
                tuple(
                    f"{config_of(d)}: LnkSta {c.link_speed}, LnkCap {c.link_speed_max}"
                    for d, _, c in slow
                ),
                "a link below its speed, and not idle at the lowest speed, divides the device's "
                "host bandwidth",
                remedy="check the speed under load (nvidia-smi -q -d PCIE); if it stays low, "
                "check the slot, riser and the BIOS PCIe speed setting",
            )
        )
    return out


NVME_CLASS = 0x0108
RDMA_SELECT = {"vendor": MELLANOX, "class_prefix": NETWORK_CLASS}


@rule("pcie-mrrs-io", Area.PCIE)
def pcie_mrrs_io(facts: Facts, limits: Thresholds) -> list[Verdict]:
    """MaxReadReq of the devices that read host or GPU memory in bulk besides the GPUs: RDMA
    NICs (GPUDirect RDMA reads GPU memory through them) and NVMe drives."""
    why = (
        "small read requests split the device's DMA reads of host and GPU memory and "
        "cap its throughput; the device may ask for up to 4096 bytes at once"
    )
    nvme = [d for d in facts.devices if d.class_code >> 8 == NVME_CLASS]
    return [
        *_max_read_request(facts.rdma_nics, "RDMA NICs", P1, why, lambda _: [RDMA_SELECT], limits),
        *_max_read_request(nvme, "NVMe drives", P2, why, lambda _: [{"class": NVME_CLASS}], limits),
    ]


@rule("pcie-relaxed-ordering", Area.PCIE)
def pcie_relaxed_ordering(facts: Facts, limits: Thresholds) -> list[Verdict]:
    read = [(d, c) for d in facts.rdma_nics if (c := d.express) is not None]
    off = [(d, c) for d, c in read if not c.relaxed_ordering]
    evidence = tuple(
        f"{config_of(d)}: DevCtl RlxdOrd{'+' if c.relaxed_ordering else '-'}"
        for d, c in off or read
    )
    if not read:
        return []
    if not off:
        return [Good(f"Relaxed Ordering on {count(len(read), 'Mellanox function')}", evidence)]
    return [
        Problem(
            P1,
            f"Relaxed Ordering off on {len(off)} of {count(len(read), 'Mellanox function')} "
            f"({addresses([d for d, _ in off])})",
            evidence,
            "without relaxed ordering every DMA write of the NIC waits for the ones before it; "
            "an mlx5e patch measured 10 -> 40 GB/s with it on a remote NUMA node",
            (Fix("pci", (), {"relaxed_ordering": True}, item={"select": RDMA_SELECT}),),
        )
    ]


@rule("pcie-acs-redirect", Area.PCIE, request_tree(), request_vfio())
def pcie_acs_redirect(facts: Facts, limits: Thresholds) -> list[Verdict]:
    """ACS redirect on a bridge above a GPU or RDMA NIC, where peer-to-peer traffic runs between
    two GPUs or a GPU and an NIC: redirected, it goes up through the root complex."""
    peers = facts.gpus + facts.rdma_nics
    if not facts.gpus or len(peers) < 2:
        return []
    tree = upstream(facts.files)
    unplaced = [d for d in peers if d.address not in tree]
    by_address = {d.address: d for d in facts.devices}
    above = sorted({b for d in peers for b in tree.get(d.address, ()) if b in by_address})
    ported = [(d, a) for d in (by_address[b] for b in above) if (a := d.acs) is not None]
    redirecting = [(d, a) for d, a in ported if a.redirecting]
    evidence = tuple(
        f"{config_of(d)}: ACSCtl {acs_redirect_flags(a.control)}" for d, a in redirecting or ported
    )
    if unplaced and not ported:
        return [
            NotIssue(
                f"ACS on the bridges above {len(unplaced)} GPUs and RDMA NICs is not known",
                (f"{TREE}: no entry for {addresses(unplaced)}",),
                "this observation has no /sys/devices tree (a snapshot taken without it); a live "
                "host shows where each device sits",
            )
        ]
    if not redirecting:
        checked = len(ported)
        return [
            Good(
                f"no ACS redirect on {count(checked, 'bridge')} above the GPUs and RDMA NICs",
                evidence
                or tuple(
                    f"{TREE}: {d.address} below {', '.join(tree[d.address]) or 'a root bus'}"
                    for d in peers
                ),
            )
        ]
    bound = vfio_bound(facts.files)
    if bound:
        return [
            NotIssue(
                f"ACS redirect on {count(len(redirecting), 'bridge')} above the GPUs and RDMA "
                f"NICs, with {', '.join(bound)} bound to vfio-pci",
                evidence,
                "ACS isolation is what makes the IOMMU groups safe to pass through to a guest",
            )
        ]
    return [
        Problem(
            P1,
            f"ACS redirect on {count(len(redirecting), 'bridge')} above the GPUs and RDMA NICs "
            f"({addresses([d for d, _ in redirecting])})",
            evidence,
            "ACS redirect sends peer-to-peer traffic between GPUs, and between a GPU and an RDMA "
            "NIC, up through the CPU root complex: NCCL sees much lower P2P bandwidth or hangs",
            tuple(
                Fix("acs", (), {}, item={"select": select})
                for select in [
                    *(
                        {"vendor": NVIDIA, "class": cls}
                        for cls in sorted({g.class_code >> 8 for g in facts.gpus})
                    ),
                    *([RDMA_SELECT] if facts.rdma_nics else []),
                ]
            ),
        )
    ]
