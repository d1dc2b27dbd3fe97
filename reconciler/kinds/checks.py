"""Audit-only expectations: tune reports these and never changes them (BIOS, kernel package,
driver). Each check says what was observed and what would fix it.

```yaml
checks:
  kernel: ">=6.14"
  cpufreq_driver: amd-pstate-epp
  iommu: passthrough                 # every IOMMU group in identity (pass-through) mode
  pci_link: {select: {vendor: 0x10de, class: 0x0302}, speed: 32GT/s, width: 16}
```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from ..core.changes import CheckResult, Note, Outcome, Phase
from ..core.files import Files, Request
from ..core.schema import Before, Constrain
from ..facts.cpu import SCALING_DRIVER
from ..facts.kernel import IOMMU_TYPES, OSRELEASE, kernel_ok
from ..facts.pci import PciDevice, Selector, pci_devices, request_devices
from ..facts.pcie import gts
from .base import Kind, Meta, Strict, entry, safe

KernelConstraint = safe(r"(>=|<=|==|>|<)?\s*\d+(\.\d+){0,2}", "kernel version constraint", ">=6.14")
DriverName = safe(r"[A-Za-z0-9_-]+", "cpufreq driver", "amd-pstate-epp")
Speed = Literal["2.5GT/s", "5GT/s", "8GT/s", "16GT/s", "32GT/s", "64GT/s"]
IOMMU_MODES = {"passthrough": ("identity",), "translated": ("DMA", "DMA-FQ")}


@dataclass(frozen=True, kw_only=True)
class LinkCheck(Meta):
    select: Selector
    speed: Speed | None = None
    width: Annotated[int, Constrain(strict=True, ge=1, le=32)] | None = None

    def __post_init__(self) -> None:
        if self.speed is None and self.width is None:
            raise ValueError("pci_link needs speed, width or both")


def _listify(value: Any) -> Any:
    return [value] if isinstance(value, dict) else value


@dataclass(frozen=True, kw_only=True)
class ChecksSpec(Strict):
    kernel: entry(KernelConstraint) | None = None  # type: ignore[valid-type]
    cpufreq_driver: entry(DriverName) | None = None  # type: ignore[valid-type]
    iommu: entry(Literal["passthrough", "translated"]) | None = None  # type: ignore[valid-type]
    # One check or a list; always a list once loaded, so that an error in a single check is
    # reported once, not once per member of a union.
    pci_link: Annotated[
        list[LinkCheck] | None, Before(_listify, accepts=LinkCheck | list[LinkCheck] | None)
    ] = None


class Checks(Kind[ChecksSpec]):
    """Audit only: its outcome is check results, never a change, so nothing of it is applied."""

    section = "checks"
    spec_type = ChecksSpec
    kind = "check"
    phase = Phase.RUNTIME  # never used: a check is no change
    reads = (
        "`/proc/sys/kernel/osrelease`, `cpu*/cpufreq/scaling_driver`, "
        "`/sys/kernel/iommu_groups/*/type`, the PCI devices' config space"
    )
    compared = (
        "reported, never changed: kernel version by its numbers, the driver on every CPU, "
        "every IOMMU group's mode, each matching device's maximum link speed and width"
    )

    def request(self, spec: ChecksSpec) -> Request:
        return request(spec)

    def compare(self, spec: ChecksSpec, files: Files) -> Outcome:
        return evaluate(spec, files)


def request(spec: ChecksSpec) -> Request:
    result = Request()
    if spec.kernel is not None:
        result |= Request.of(OSRELEASE)
    if spec.cpufreq_driver is not None:
        result |= Request.of(SCALING_DRIVER)
    if spec.iommu is not None:
        result |= Request.of(IOMMU_TYPES)
    if spec.pci_link is not None:
        result |= request_devices()
    return result


def evaluate(spec: ChecksSpec, files: Files) -> Outcome:
    outcome = Outcome()
    if spec.kernel is not None:
        release = files.value(OSRELEASE)
        outcome.checks.append(
            CheckResult(
                "kernel",
                release is not None and kernel_ok(release, spec.kernel.value),
                release,
                spec.kernel.value,
                f"install a kernel {spec.kernel.value} and reboot into it",
            )
        )
    if spec.cpufreq_driver is not None:
        outcome.checks.append(_cpufreq(spec.cpufreq_driver.value, files))
    if spec.iommu is not None:
        outcome.checks.append(_iommu(spec.iommu.value, files))
    devices = pci_devices(files) if spec.pci_link else []
    for link in spec.pci_link or ():
        _link(link, devices, outcome)
    return outcome


def _cpufreq(wanted: str, files: Files) -> CheckResult:
    drivers = sorted({files.value(p) or "" for p in files.glob(SCALING_DRIVER)})
    observed = ",".join(drivers) if drivers else None
    remedy = {
        "amd-pstate-epp": "boot with amd_pstate=active (CPPC enabled in the BIOS)",
        "amd-pstate": "boot with amd_pstate=passive or guided (CPPC enabled in the BIOS)",
        "intel_pstate": "boot without intel_pstate=disable",
    }.get(wanted, f"load the {wanted} cpufreq driver")
    return CheckResult("cpufreq_driver", drivers == [wanted], observed, wanted, remedy)


def _iommu(mode: str, files: Files) -> CheckResult:
    types = sorted({files.value(p) or "" for p in files.glob(IOMMU_TYPES)})
    observed = ",".join(types) if types else None
    ok = bool(types) and all(t in IOMMU_MODES[mode] for t in types)
    remedy = (
        "boot with iommu=pt (amd_iommu=on or intel_iommu=on as the platform needs)"
        if mode == "passthrough"
        else "boot without iommu=pt"
    )
    return CheckResult("iommu", ok, observed, mode, remedy)


def _link(link: LinkCheck, devices: list[PciDevice], outcome: Outcome) -> None:
    matched = [d for d in devices if link.select.matches(d)]
    expected = " x".join(str(x) for x in (link.speed, link.width) if x is not None)

    def unreadable(remedy: str, subject: str) -> None:
        outcome.checks.append(CheckResult("pci_link", False, None, expected, remedy, subject))

    if not matched:
        unreadable("no device matches; check the selector", link.select.describe())
    idle = []
    for device in matched:
        cap, why = device.express, device.no_link()
        if cap is None or why is not None:
            if device.header_only:
                unreadable(device.no_express, device.address)
            else:
                # No link to train: nothing a slot, riser or BIOS setting changes.
                note = f"{why} pci_link does not apply to it."
                outcome.notes.append(Note(note, "check:pci_link"))
            continue
        ok = (link.width is None or cap.link_width >= link.width) and (
            link.speed is None or gts(cap.link_speed_max) >= gts(link.speed)
        )
        observed = f"{cap.link_speed_max} x{cap.link_width} (now {cap.link_speed})"
        outcome.checks.append(
            CheckResult(
                "pci_link",
                ok,
                observed,
                expected,
                "reseat the card or check the slot, riser and BIOS link settings",
                device.address,
            )
        )
        if ok and link.speed and gts(cap.link_speed) < gts(link.speed):
            idle.append(f"{device.address} ({cap.link_speed})")
    if idle:
        outcome.notes.append(
            Note(
                f"{len(idle)} devices run below {link.speed} now: "
                + ", ".join(idle)
                + ". GPUs lower their link speed when idle; not a failure.",
                "check:pci_link",
            )
        )


KIND = Checks()
