"""IRQ affinity on a real kernel (issue 20, item 5), through `tune -H tune-e2e` over SSH.

The guest has two vCPUs and no NUMA nodes (every device's `numa_node` is -1), so the profile
names a cpulist: CPU 1, which no IRQ of the guest is limited to at boot. The virtio NIC's
vectors are not managed and take it; the guest's own /proc reads it back; the NVMe's I/O queue
vectors are managed, and the kernel refuses them with EIO, which apply skips and says. The
rollback gives every IRQ its prior list back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import guest
from .over_ssh import apply, history, nvme_select, plan_json, tune, write_profile
from .vm import Vm

VIRTIO = "0x1af4"
NETWORK = "0x0200"


def affinity(vm: Vm, irq: int) -> str:
    return vm.run("cat", f"/proc/irq/{irq}/smp_affinity_list").stdout.strip()


def irqs_of(vm: Vm, address: str) -> list[int]:
    out = vm.run("ls", f"/sys/bus/pci/devices/{address}/msi_irqs").stdout.split()
    return sorted(int(n) for n in out)


@pytest.mark.usefixtures("clean_state")
def test_pins_the_virtio_nics_irqs_skips_managed_ones_and_rolls_back(
    vm: Vm, tmp_path: Path
) -> None:
    (virtio_net,) = guest.pci_functions(vm, f"{VIRTIO[2:]}::{NETWORK[2:]}")
    (nvme,) = guest.pci_functions(vm, guest.QEMU_NVME)
    nic_irqs, nvme_irqs = irqs_of(vm, virtio_net), irqs_of(vm, nvme)
    assert nic_irqs and nvme_irqs
    before = {n: affinity(vm, n) for n in nic_irqs + nvme_irqs}
    profile = write_profile(
        tmp_path,
        f"""\
name: e2e-irq
irq_affinity:
  - select: {{vendor: {VIRTIO}, class: {NETWORK}}}
    cpus: 1
  - select: {nvme_select()}
    cpus: 1
  - select: {{vendor: {VIRTIO}, class: {NETWORK}}}
    cpus: local
""",
    )
    plan = plan_json(vm, profile)
    assert {c["id"] for c in plan["changes"]} >= {
        f"irq_affinity:{virtio_net}:irq{n}" for n in nic_irqs if before[n] != "1"
    }
    assert any("numa_node -1" in n["message"] for n in plan["notes"]), plan["notes"]

    result = apply(vm, profile)

    try:
        assert result.code == 0, result.out + result.err
        assert {affinity(vm, n) for n in nic_irqs} == {"1"}
        refused = [line for line in result.out.splitlines() if "(Input/output error)" in line]
        managed = [n for n in nvme_irqs if affinity(vm, n) != "1"]
        assert managed, "QEMU's NVMe spreads its I/O queue vectors itself (managed IRQs)"
        assert len(refused) == len(managed), result.out
        (run,) = history(vm)
        assert run["outcome"] == "applied"
        check = tune(vm, "check", profile)
        assert check.code == 0, check.out + check.err
    finally:
        assert tune(vm, "rollback", "--yes").code == 0
    assert {n: affinity(vm, n) for n in nic_irqs + nvme_irqs} == before
