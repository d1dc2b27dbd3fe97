"""NVIDIA GPU state as `nvidia-smi --query-gpu=... --format=csv` prints it.

The query asks for the fields below by the names NVIDIA's `nvidia-smi --help-query-gpu`
documents; the CSV answers with a header line naming them (with the unit in brackets:
`power.limit [W]`) and one line per GPU, cells separated by ", " (`700.00 W`, `Enabled`,
`Default`). A value the GPU or driver does not have is bracketed: `[N/A]`, `[Not Supported]`,
`[Requested functionality has been deprecated]` (application clocks, since driver 590). Reading
by the header's names, not by position, keeps a driver that reorders or adds columns from
shifting one value into another's place.

Application clocks have a query of their own (`CLOCKS_QUERY`), run only for a profile that asks
for them: a driver that drops the deprecated fields refuses the whole query that names one, and
must not take the other settings' reading with it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from ..core.files import Files

NVIDIA_SMI = "nvidia-smi"
BUS_ID = "pci.bus_id"
PERSISTENCE = "persistence_mode"
POWER_LIMIT = "power.limit"
POWER_DEFAULT = "power.default_limit"
POWER_MIN = "power.min_limit"
POWER_MAX = "power.max_limit"
COMPUTE_MODE = "compute_mode"
ECC_CURRENT = "ecc.mode.current"
ECC_PENDING = "ecc.mode.pending"
FIELDS = (
    BUS_ID,
    PERSISTENCE,
    POWER_LIMIT,
    POWER_DEFAULT,
    POWER_MIN,
    POWER_MAX,
    COMPUTE_MODE,
    ECC_CURRENT,
    ECC_PENDING,
)
# With the header and units, as nvidia-smi prints it by default: the header is what lets the
# parse check each column's name.
QUERY = (NVIDIA_SMI, f"--query-gpu={','.join(FIELDS)}", "--format=csv")
SEPARATOR = ", "

APP_MEMORY = "clocks.applications.memory"
APP_GRAPHICS = "clocks.applications.graphics"
DEFAULT_APP_MEMORY = "clocks.default_applications.memory"
DEFAULT_APP_GRAPHICS = "clocks.default_applications.graphics"
CLOCK_FIELDS = (BUS_ID, APP_MEMORY, APP_GRAPHICS, DEFAULT_APP_MEMORY, DEFAULT_APP_GRAPHICS)
CLOCKS_QUERY = (NVIDIA_SMI, f"--query-gpu={','.join(CLOCK_FIELDS)}", "--format=csv")
# Two fields read as one value, `MEMORY,GRAPHICS` in MHz: what `nvidia-smi -ac` takes.
APPLICATION_CLOCKS = "clocks.applications"
DEFAULT_APPLICATION_CLOCKS = "clocks.default_applications"
PAIRS = {
    APPLICATION_CLOCKS: (APP_MEMORY, APP_GRAPHICS),
    DEFAULT_APPLICATION_CLOCKS: (DEFAULT_APP_MEMORY, DEFAULT_APP_GRAPHICS),
}
# What a driver since 590 answers for every application clocks field.
DEPRECATED = "[Requested functionality has been deprecated]"


def query_for(name: str) -> tuple[str, ...]:
    """The query that reads the field (or pair) `name`."""
    return CLOCKS_QUERY if name in PAIRS or name in CLOCK_FIELDS else QUERY


# Watts as the power fields print them without their unit: `700.00`.
_UNIT = re.compile(r" (W|MHz|MiB|%)$")
_BUS_ID = re.compile(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])")


def bus_id(text: str) -> str | None:
    """A PCI bus id as nvidia-smi prints it (`00000000:17:00.0`: eight hex digits of domain,
    upper case), from that or the kernel's form (`0000:17:00.0`); None for anything else."""
    match = _BUS_ID.fullmatch(text)
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):08X}:{bus.upper()}:{device.upper()}.{function}"


def watts(text: str) -> str:
    """A power value as tune compares it: `700.00` and `700` are `700`, `612.50` is `612.5`
    (six significant digits, as awk prints a number in the sh engine)."""
    try:
        return f"{float(text):g}"
    except ValueError:
        return text


def watts_number(text: str | None) -> float | None:
    """A power value as a finite number of watts; None for anything else (a driver's word in
    its place, a hostile host's thousands of digits, which float() reads as infinity)."""
    try:
        number = float(text or "")
    except ValueError:
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class Gpu:
    """One line of the query: each field's value without its unit, None where the GPU or the
    driver does not have it (a bracketed value)."""

    bus_id: str
    values: dict[str, str | None]
    # The bracketed answer of each field that has one (`[N/A]`), as printed.
    bracketed: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> str | None:
        return self.values.get(name)


class UnreadableQuery(ValueError):
    """nvidia-smi printed something that is not the query's CSV."""


def field_names(header: str) -> list[str]:
    """The field each column holds, from the CSV's header line (`power.limit [W]`: its unit
    cut)."""
    return [cell.split(" [", 1)[0].strip() for cell in header.split(SEPARATOR)]


def parse(text: str) -> list[Gpu]:
    """Every GPU of the CSV `text`, in its order."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    names = field_names(lines[0])
    if BUS_ID not in names:
        raise UnreadableQuery(f"its header does not name {BUS_ID}: {lines[0][:80]!r}")
    found = []
    for line in lines[1:]:
        cells = line.split(SEPARATOR)
        if len(cells) != len(names):
            raise UnreadableQuery(f"a line has {len(cells)} values for {len(names)} fields")
        values: dict[str, str | None] = {
            name: None if cell.startswith("[") else _UNIT.sub("", cell.strip())
            for name, cell in zip(names, cells, strict=True)
        }
        identity = bus_id(values[BUS_ID] or "")
        if identity is None:
            raise UnreadableQuery(f"{values[BUS_ID]!r} is not a PCI bus id")
        said = {n: c.strip() for n, c in zip(names, cells, strict=True) if c.startswith("[")}
        found.append(Gpu(identity, values, said))
    return found


class Reading(NamedTuple):
    """The GPUs nvidia-smi listed, or why there are none to read (`problem`, a sentence)."""

    gpus: tuple[Gpu, ...]
    problem: str | None = None


def reading(files: Files) -> Reading:
    """The query's answer in `files` (requested as `QUERY`)."""
    return _reading(files, QUERY)


def clocks_reading(files: Files) -> Reading:
    """The application clocks query's answer in `files` (requested as `CLOCKS_QUERY`)."""
    return _reading(files, CLOCKS_QUERY)


def _reading(files: Files, query: tuple[str, ...]) -> Reading:
    output = files.output(query)
    if not output.installed:
        return Reading((), f"{NVIDIA_SMI} is not installed on this host.")
    if output.status != 0:
        # 6: no GPU found; 9: the driver is not loaded (nvidia-smi's RETURN VALUE section).
        return Reading((), f"{NVIDIA_SMI} failed here (exit status {output.status}).")
    try:
        gpus = parse(output.stdout.decode("utf-8", "replace"))
    except UnreadableQuery as exc:
        return Reading((), f"{NVIDIA_SMI}'s answer cannot be read: {exc}.")
    if not gpus:
        return Reading((), f"{NVIDIA_SMI} lists no GPU on this host.")
    return Reading(tuple(gpus))


def value_of(stdout: bytes, bus: str, name: str) -> str | None:
    """One GPU's field from the query's output, as tune compares it (None: no such GPU or the
    value is bracketed); what a step's probe reads back."""
    try:
        gpus = parse(stdout.decode("utf-8", "replace"))
    except UnreadableQuery:
        return None
    gpu = next((g for g in gpus if g.bus_id == bus), None)
    return None if gpu is None else value(gpu, name)


def value(gpu: Gpu, name: str) -> str | None:
    """`gpu`'s field as tune compares it: watts as numbers; a pair (`PAIRS`) as
    `MEMORY,GRAPHICS`, None unless both are there."""
    if name in PAIRS:
        memory, graphics = (gpu.get(n) for n in PAIRS[name])
        return None if memory is None or graphics is None else f"{memory},{graphics}"
    found = gpu.get(name)
    if found is not None and name in (POWER_LIMIT, POWER_DEFAULT, POWER_MIN, POWER_MAX):
        return watts(found)
    return found
