"""Builtin probe `gpu-p2p`, run on the target with its own python3: copy bandwidth between
every pair of visible GPUs, host<->device for each GPU, and within each GPU, timed with CUDA
events, median of several runs. Uses PyTorch or CuPy, whichever is installed.

Prints one JSON line: {"backend", "devices", "metrics": {...}, "matrix": [[GB/s]], ...} or
{"skipped": "..."} when there is no CUDA device or library. This file is sent as `python3 -c`
and must stay standalone (standard library plus torch/cupy only).
"""

import importlib
import json
import statistics
import sys
from functools import partial
from typing import Any, Callable, Dict, List, Optional

Report = Dict[str, Any]
Matrix = List[List[Optional[float]]]

SIZE = 256 << 20  # bytes per copy: large enough to reach link bandwidth, small enough for any GPU
RUNS = 5


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms / 1000.0) / 1e9


def torch_backend() -> Optional[Report]:
    torch: Any = importlib.import_module("torch")

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return None
    n = torch.cuda.device_count()

    def timed(device: int, copy: Callable[[], Any]) -> float:
        """GB/s of `copy`, the median of RUNS after one warm-up."""
        times: List[float] = []
        with torch.cuda.device(device):
            copy()  # warm-up: first copies pay for peer mappings and allocator growth
            torch.cuda.synchronize()
            for _ in range(RUNS):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                copy()
                # A peer copy may run on the other device's stream: wait for every device
                # before the end mark so the interval holds the whole copy.
                for d in range(n):
                    torch.cuda.synchronize(d)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        return gbps(SIZE, statistics.median(times))

    bufs = [torch.empty(SIZE, dtype=torch.uint8, device=f"cuda:{i}") for i in range(n)]
    dsts = [torch.empty(SIZE, dtype=torch.uint8, device=f"cuda:{i}") for i in range(n)]
    host = torch.empty(SIZE, dtype=torch.uint8).pin_memory()
    result = {
        "backend": f"torch {torch.__version__}",
        "devices": [torch.cuda.get_device_name(i) for i in range(n)],
    }
    h2d = [timed(i, partial(bufs[i].copy_, host, non_blocking=True)) for i in range(n)]
    d2h = [timed(i, partial(host.copy_, bufs[i], non_blocking=True)) for i in range(n)]
    local = [timed(i, partial(dsts[i].copy_, bufs[i], non_blocking=True)) for i in range(n)]
    matrix: Matrix = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j:
                matrix[i][j] = timed(i, partial(dsts[j].copy_, bufs[i], non_blocking=True))
    return summarise(result, h2d, d2h, local, matrix)


def cupy_backend() -> Optional[Report]:
    cupy: Any = importlib.import_module("cupy")

    n = cupy.cuda.runtime.getDeviceCount()
    if n == 0:
        return None

    def timed(device: int, copy: Callable[[], Any]) -> float:
        """GB/s of `copy`, the median of RUNS after one warm-up."""
        times: List[float] = []
        with cupy.cuda.Device(device):
            copy()
            cupy.cuda.runtime.deviceSynchronize()
            for _ in range(RUNS):
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record()
                copy()
                for d in range(n):
                    with cupy.cuda.Device(d):
                        cupy.cuda.runtime.deviceSynchronize()
                end.record()
                end.synchronize()
                times.append(cupy.cuda.get_elapsed_time(start, end))
        return gbps(SIZE, statistics.median(times))

    bufs: List[Any] = []
    dsts: List[Any] = []
    for i in range(n):
        with cupy.cuda.Device(i):
            bufs.append(cupy.empty(SIZE, dtype=cupy.uint8))
            dsts.append(cupy.empty(SIZE, dtype=cupy.uint8))
    pinned = cupy.cuda.alloc_pinned_memory(SIZE)
    kind = cupy.cuda.runtime
    result = {
        "backend": f"cupy {cupy.__version__}",
        "devices": [kind.getDeviceProperties(i)["name"].decode() for i in range(n)],
    }
    h2d_kind, d2h_kind = kind.memcpyHostToDevice, kind.memcpyDeviceToHost
    h2d = [
        timed(i, partial(kind.memcpy, bufs[i].data.ptr, pinned.ptr, SIZE, h2d_kind))
        for i in range(n)
    ]
    d2h = [
        timed(i, partial(kind.memcpy, pinned.ptr, bufs[i].data.ptr, SIZE, d2h_kind))
        for i in range(n)
    ]
    local = [timed(i, partial(dsts[i].__setitem__, Ellipsis, bufs[i])) for i in range(n)]
    matrix: Matrix = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j:
                peer = partial(kind.memcpyPeer, dsts[j].data.ptr, j, bufs[i].data.ptr, i, SIZE)
                matrix[i][j] = timed(i, peer)
    return summarise(result, h2d, d2h, local, matrix)


def summarise(
    result: Report, h2d: List[float], d2h: List[float], local: List[float], matrix: Matrix
) -> Report:
    pairs = [v for row in matrix for v in row if v is not None]
    metrics = {
        "h2d_gbps": min(h2d),
        "d2h_gbps": min(d2h),
        "local_gbps": min(local),
    }
    if pairs:
        metrics["sum_gbps"] = sum(pairs)
        metrics["min_pair_gbps"] = min(pairs)
    else:
        result["note"] = "one GPU: no peer pairs"
    result.update(
        metrics=metrics, matrix=matrix, h2d=h2d, d2h=d2h, local=local, bytes=SIZE, runs=RUNS
    )
    return result


def main() -> int:
    errors: List[str] = []
    for backend in (torch_backend, cupy_backend):
        try:
            report = backend()
        except ImportError as exc:
            errors.append(str(exc))
            continue
        if report is None:
            print(json.dumps({"skipped": "no CUDA device"}))
            return 0
        print(json.dumps(report))
        return 0
    print(
        json.dumps(
            {"skipped": "no CUDA device (neither PyTorch nor CuPy is installed)", "errors": errors}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
