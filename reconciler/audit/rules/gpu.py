"""Audit rules: the NVIDIA GPUs' own state, as nvidia-smi reports it."""

from __future__ import annotations

from ...core.files import Request
from ...facts import nvidia_smi
from ..facts import Facts
from ..model import Area, Fix, Good, Problem, Verdict
from ..thresholds import Thresholds
from .base import P1, count, rule


@rule("gpu-persistence-off", Area.GPU, Request.of(commands=[nvidia_smi.QUERY]))
def gpu_persistence_off(facts: Facts, limits: Thresholds) -> list[Verdict]:
    # The same query as the `gpus` kind: /proc/driver/nvidia/gpus/*/information does not say
    # whether persistence is on.
    read = facts.files.view(nvidia_smi.reading)
    if read.problem is not None:
        return []
    off = [g for g in read.gpus if g.get(nvidia_smi.PERSISTENCE) == "Disabled"]
    evidence = tuple(
        f"nvidia-smi --query-gpu: {g.bus_id} persistence_mode {g.get(nvidia_smi.PERSISTENCE)}"
        for g in (off or read.gpus)
    )
    if not off:
        return [Good(f"persistence mode on {count(len(read.gpus), 'NVIDIA GPU')}", evidence)]
    return [
        Problem(
            P1,
            f"persistence mode off on {len(off)} of {count(len(read.gpus), 'NVIDIA GPU')}",
            evidence,
            "without persistence the driver tears a GPU down when its last client exits: the "
            "next process waits 1-3 s per GPU to initialise it, and NVML forgets its settings "
            "(power limit, compute mode)",
            (Fix("gpus", ("all",), {"persistence": True}),),
        )
    ]
