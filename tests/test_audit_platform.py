"""Audit rules that know the platform (issue #20, item 6): GPUDirect RDMA through DMA-BUF where
the driver and kernel give it, and no IOMMU passthrough where the IOMMU must stay (256 or more
CPUs) or where a Grace kernel before 6.11 needs it for DMA-BUF."""

from __future__ import annotations

from pathlib import Path

from audit_support import edit, findings, only, remarks, run_audit
from conftest import write

from reconciler.facts.nvidia_params import VERSION

CORPUS = Path(__file__).resolve().parent / "corpus" / "nvidia-params"
OPEN_565 = (CORPUS / "version-open").read_text()
PROPRIETARY_580 = (CORPUS / "version-proprietary").read_text()
PEERMEM = "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n"
# One CPU of a Grace host's /proc/cpuinfo (Neoverse V2: implementer 0x41, part 0xd4f), as a
# public question about a Quanta Grace server quotes it; the host has 72 of them.
GRACE_CPU = (
    "processor\t: {n}\n"
    "BogoMIPS\t: 2000.00\n"
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
    "asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc "
    "flagm sb paca pacg dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint "
    "svei8mm svebf16 i8mm bf16 dgh bti\n"
    "CPU implementer\t: 0x41\n"
    "CPU architecture: 8\n"
    "CPU variant\t: 0x0\n"
    "CPU part\t: 0xd4f\n"
    "CPU revision\t: 0\n\n"
)


def test_peermem_missing_is_not_an_issue_where_dma_buf_serves(tuned: Path) -> None:
    """Open kernel modules 565 on kernel 6.8: NVIDIA recommends DMA-BUF over nvidia_peermem."""
    edit(tuned, "/proc/modules", PEERMEM, "")
    write(tuned, VERSION, OPEN_565)
    report = run_audit(tuned)
    assert "peermem-missing" not in findings(report)
    assert remarks(report, "peermem-missing")[1] == ["nvidia_peermem not loaded"]
    (remark,) = [r for r in report.not_issues if r.id == "peermem-missing"]
    assert f"{VERSION}: open kernel modules 565.57.1" in remark.evidence
    assert "NVIDIA recommends over nvidia_peermem" in remark.reason


def test_peermem_missing_fires_with_the_proprietary_module(tuned: Path) -> None:
    edit(tuned, "/proc/modules", PEERMEM, "")
    write(tuned, VERSION, PROPRIETARY_580)
    finding = only(run_audit(tuned), "peermem-missing")
    assert finding.fix == "modprobe nvidia_peermem"
    assert "the driver is not NVIDIA's open kernel modules" in finding.reason


def test_peermem_missing_fires_on_a_kernel_older_than_5_12(tuned: Path) -> None:
    edit(tuned, "/proc/modules", PEERMEM, "")
    write(tuned, VERSION, OPEN_565)
    write(tuned, "/proc/sys/kernel/osrelease", "5.10.0-32-amd64\n")
    finding = findings(run_audit(tuned))["peermem-missing"]
    assert "kernel 5.10.0-32-amd64 is older than 5.12" in finding.reason


def test_iommu_translated_suggests_no_passthrough_with_256_cpus(untuned: Path) -> None:
    cpuinfo = untuned / "proc/cpuinfo"
    block = cpuinfo.read_text().split("\n\n")[0]
    number = block.splitlines()[0]
    write(
        untuned,
        "/proc/cpuinfo",
        "\n\n".join(block.replace(number, f"processor\t: {n}") for n in range(256)) + "\n\n",
    )
    report = run_audit(untuned)
    assert "iommu-translated" not in findings(report)
    (remark,) = [r for r in report.not_issues if r.id == "iommu-translated"]
    assert "/proc/cpuinfo: 256 CPUs" in remark.evidence
    assert "x2APIC needs interrupt remapping" in remark.reason


def test_iommu_translated_suggests_no_passthrough_on_grace_before_6_11(untuned: Path) -> None:
    write(untuned, "/proc/cpuinfo", "".join(GRACE_CPU.format(n=n) for n in range(72)))
    write(untuned, VERSION, OPEN_565)
    report = run_audit(untuned)
    assert "iommu-translated" not in findings(report)
    (remark,) = [r for r in report.not_issues if r.id == "iommu-translated"]
    assert "/proc/cpuinfo: arm64 (CPU implementer)" in remark.evidence
    # From 6.11 on, the rule asks for passthrough again.
    write(untuned, "/proc/sys/kernel/osrelease", "6.11.0-1004-nvidia-64k\n")
    assert "iommu-translated" in findings(run_audit(untuned))


def test_iommu_translated_still_asks_for_passthrough_on_an_x86_host(untuned: Path) -> None:
    write(untuned, VERSION, OPEN_565)
    finding = findings(run_audit(untuned))["iommu-translated"]
    assert [(c.target, c.desired) for c in finding.changes] == [("iommu", ("pt",))]
