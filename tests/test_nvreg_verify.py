"""`tune verify` after the boot a reboot-phase apply of NVIDIA driver parameters prepared: the
driver must use what tune's modprobe.d file gives it, or the file is rolled back."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import profile, run_tune, write
from engines.test_nvreg import PROFILE, gpu_host

from reconciler.facts.kernel import BOOT_ID
from reconciler.facts.nvidia_params import PARAMS, proc_name
from reconciler.hosts.directory import SnapshotHost
from reconciler.kinds.nvreg import KIND as NVREG_KIND
from reconciler.kinds.nvreg import configured
from reconciler.steps.persist import NVREG

PENDING = "var/lib/tune/pending.json"


def applied(tmp_path: Path) -> Path:
    root = gpu_host(tmp_path / "host", "update-initramfs")
    write(root, BOOT_ID, "00000000-0000-4000-8000-000000000001\n")
    done = run_tune("apply", profile(tmp_path, PROFILE), "--reboot-phase", "--root", root, "-y")
    assert done.code == 0, done.err
    return root


def boot(root: Path, *, loads_options: bool) -> None:
    """The snapshot boots: a new boot id; the driver prints what modprobe.d gives it (the
    initramfs was rebuilt), or, `loads_options` false, what it printed before."""
    write(root, BOOT_ID, "00000000-0000-4000-8000-000000000002\n")
    if not loads_options:
        return
    host = SnapshotHost(root)
    given = configured(host.fetch(NVREG_KIND.request(())))
    lines = []
    for line in (root / PARAMS.lstrip("/")).read_text().splitlines():
        name = line.split(":", 1)[0]
        value = next((v for p, v in given.items() if proc_name(p) == name), None)
        quoted = line.endswith('"')
        lines.append(
            line if value is None else f'{name}: "{value}"' if quoted else f"{name}: {value}"
        )
    write(root, PARAMS, "\n".join(lines) + "\n")


def test_the_boot_brought_the_parameters_and_verify_says_so(tmp_path: Path) -> None:
    root = applied(tmp_path)
    recorded = json.loads((root / PENDING).read_text())
    assert recorded["expected"]["nvreg"] == {
        "EnableStreamMemOPs": "1",
        "RegistryDwords": "PeerMappingOverride=1;",
        "RmProfilingAdminOnly": "0",
    }
    boot(root, loads_options=True)
    result = run_tune("verify", "--root", root)
    assert result.code == 0, result.err
    assert "ok  /proc/driver/nvidia/params has RmProfilingAdminOnly: 0" in result.out
    assert "ok  /proc/driver/nvidia/params has RegistryDwords: PeerMappingOverride=1;" in result.out
    assert not (root / PENDING).exists()


def test_a_driver_that_did_not_get_them_fails_verify_and_rolls_the_file_back(
    tmp_path: Path,
) -> None:
    root = applied(tmp_path)
    assert (root / NVREG.lstrip("/")).exists()
    boot(root, loads_options=False)
    result = run_tune("verify", "--root", root)
    assert result.code == 3
    assert "/proc/driver/nvidia/params has EnableStreamMemOPs: 0, not 1" in result.err
    assert not (root / NVREG.lstrip("/")).exists()
