"""Every number the audit's rules compare against, in one place (and light to import: the
command line reads the default minimum kernel from here)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    """Every number the rules compare against, in one place. `min_kernel` is `--min-kernel`."""

    min_read_request: int = 4096  # bytes; the PCIe maximum, what GPUs are designed for
    deep_cstate_latency_us: int = 50  # exit latency above which an idle state is "deep"
    max_swappiness: int = 10
    min_socket_buffer: int = 64 << 20  # below this a socket buffer is "small"
    socket_buffer: int = 256 << 20  # what the fix sets: a 400 Gb/s link's bandwidth-delay product
    min_kernel: str = "6.14"
