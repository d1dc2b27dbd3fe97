"""The `probes:` section of a profile.

```yaml
probes:
  p2p_bandwidth:
    builtin: gpu-p2p            # or run: [argv...] for any command
    metric: sum_gbps            # builtin probes name their metrics; command probes give
    better: higher              #   metric: a regex with one group over stdout
    gate: {regress_max: 5%}     # or {min: 40} / {max: ...}
    timeout: 120
  decode_tps:
    run: [python3, -m, sglang.bench_one_batch_server, --batch-size, "1"]
    metric: 'output throughput: ([0-9.]+) token/s'
    better: higher
    repeat: 3                   # median of N runs
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from ..core.schema import Before, Constrain
from ..kinds.base import Strict, safe

ProbeName = safe(r"[A-Za-z0-9_-]+", "probe name", "decode_tps")

# What each builtin measures; a builtin probe's `metric` must be one of these.
BUILTIN_METRICS: dict[str, dict[str, str]] = {
    "gpu-p2p": {
        "sum_gbps": "GB/s",
        "min_pair_gbps": "GB/s",
        "h2d_gbps": "GB/s",
        "d2h_gbps": "GB/s",
        "local_gbps": "GB/s",
    },
}


def _percent(value: Any) -> Any:
    """`5%` or `5` -> 5.0 (percent)."""
    if isinstance(value, str) and value.strip().endswith("%"):
        return value.strip()[:-1]
    return value


@dataclass(frozen=True, kw_only=True)
class Gate(Strict):
    """When a probe's result after a phase counts as a regression."""

    regress_max: Annotated[float, Constrain(ge=0, le=100), Before(_percent)] | None = None
    min: float | None = None
    max: float | None = None

    def __post_init__(self) -> None:
        if self.regress_max is None and self.min is None and self.max is None:
            raise ValueError("a gate needs regress_max, min or max")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("gate min is above gate max")


@dataclass(frozen=True, kw_only=True)
class ProbeSpec(Strict):
    builtin: Literal["gpu-p2p"] | None = None
    run: list[Annotated[str, Constrain(min_length=1)]] | None = field(
        default=None, metadata={"min_length": 1}
    )
    metric: str
    better: Literal["higher", "lower"] = "higher"
    gate: Gate | None = None
    timeout: float = field(default=120, metadata={"gt": 0, "le": 86400})
    repeat: int = field(default=1, metadata={"ge": 1, "le": 100})
    unit: str = ""

    def __post_init__(self) -> None:
        if (self.builtin is None) == (self.run is None):
            raise ValueError("give exactly one of builtin or run")
        if self.builtin is not None:
            known = BUILTIN_METRICS[self.builtin]
            if self.metric not in known:
                raise ValueError(
                    f"builtin {self.builtin} has no metric {self.metric!r} "
                    f"(it has {', '.join(known)})"
                )
        else:
            try:
                groups = re.compile(self.metric).groups
            except re.error as exc:
                raise ValueError(f"metric is not a valid regular expression: {exc}") from None
            if groups != 1:
                raise ValueError(f"metric needs exactly one (group) for the number, not {groups}")

    @property
    def unit_label(self) -> str:
        if self.unit:
            return self.unit
        if self.builtin is not None:
            return BUILTIN_METRICS[self.builtin][self.metric]
        return ""
