"""Numbers a hostile host prints: a run of thousands of digits (Python's int() refuses more than
4,300 and huge ones make arithmetic slow), digits outside ASCII, a `/proc/PID/limits` line cut
short. Each used to end in "internal error" (exit 70); each now reads as what it is, text that
is no number, and the plan says what it can."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import PROJECT, deadline, run_tune, write
from small_host import SmallHost, build, gpu_line, write_profile

from reconciler.facts import numbers

HUGE = "9" * 5000
SERVICES_CASE = PROJECT / "tests/kinds/services/memlock-drop-in-for-containerd"


def small(root: Path, **how: object) -> Path:
    return build(root, SmallHost(sysctls={"vm.swappiness": "60"}, **how))  # type: ignore[arg-type]


def planned(tmp_path: Path, root: Path, profile: dict[str, object]) -> int:
    result = run_tune("plan", write_profile(tmp_path / "p.yaml", profile), "--root", root)
    assert result.code != 70, result.err
    assert "internal error" not in result.err
    return result.code


def test_the_shared_parser_reads_only_numbers_the_kernel_can_print() -> None:
    assert numbers.unsigned("18446744073709551615") == 2**64 - 1
    assert numbers.unsigned("0" * 6000 + "42") == 42
    for text in ("18446744073709551616", HUGE, "²", "٣", "", "-1", " 1", "1_000", "0x1f"):
        assert numbers.unsigned(text) is None, text
    assert numbers.signed("-12") == -12
    assert numbers.kernel_integer("0x1F") == 31
    assert numbers.kernel_integer("017") == 15
    assert numbers.kernel_integer("-" + HUGE) is None
    assert numbers.kernel_integer("0x" + "f" * 5000) is None


def test_a_limits_line_with_too_few_fields_is_not_an_internal_error(tmp_path: Path) -> None:
    """`soft, hard = words[:2]` took a `Max locked memory` line of one field (a process that
    changed under the read, a hostile /proc) as a ValueError."""
    root = shutil.copytree(SERVICES_CASE / "host", tmp_path / "host", symlinks=True)
    for limits in root.glob("proc/*/limits"):
        limits.write_text("Max locked memory         8388608\nMax stack size\n")
    profile = (SERVICES_CASE / "profile.yaml").read_text()
    (tmp_path / "p.yaml").write_text(profile)
    result = run_tune("plan", tmp_path / "p.yaml", "--root", root)
    assert result.code == 2, result.err
    assert "internal error" not in result.err


def test_a_kernel_release_of_thousands_of_digits_is_no_version(tmp_path: Path) -> None:
    root = small(tmp_path / "host")
    write(root, "/proc/sys/kernel/osrelease", f"6.{HUGE}-pve\n")
    assert planned(tmp_path, root, {"checks": {"kernel": ">=6.14"}}) == 2
    assert run_tune("audit", "--root", root).code != 70


@pytest.mark.parametrize("major", [HUGE, "²"])
def test_a_proc_devices_major_that_is_no_number_is_skipped(tmp_path: Path, major: str) -> None:
    root = small(tmp_path / "host")
    write(root, "/proc/devices", f"Character devices:\n{major} nvidia\n195 nvidia-frontend\n")
    write(root, "/etc/pve/lxc/101.conf", "arch: amd64\n")
    write(root, "/dev/nvidia0", "")
    assert planned(tmp_path, root, {"lxc": [{"container": "101", "nvidia_devices": True}]}) == 2


def test_a_module_parameter_of_thousands_of_digits_compares_as_text(tmp_path: Path) -> None:
    root = small(tmp_path / "host", modules=["nvidia_peermem"])
    write(root, "/sys/module/nvidia_peermem/parameters/foo", HUGE + "\n")
    profile = {"modules": {"nvidia_peermem": {"value": "loaded", "params": {"foo": 1}}}}
    assert planned(tmp_path, root, profile) == 2


def test_an_nvidia_driver_parameter_of_thousands_of_digits_compares_as_text(
    tmp_path: Path,
) -> None:
    root = small(tmp_path / "host", modules=["nvidia"])
    write(root, "/proc/driver/nvidia/params", f"EnableStreamMemOPs: {HUGE}\n")
    write(root, "/etc/modprobe.d/nvidia.conf", f"options nvidia NVreg_EnableStreamMemOPs={HUGE}\n")
    profile = {
        "modules": {"nvidia": {"value": "loaded", "params": {"NVreg_EnableStreamMemOPs": 1}}}
    }
    assert planned(tmp_path, root, profile) == 2


def test_nvidia_smi_power_limits_that_are_no_numbers_are_a_sentence(tmp_path: Path) -> None:
    """The power limit is checked against the GPU's range before the write: a range printed
    as thousands of digits or as words made float() raise in the middle of an apply."""
    line = gpu_line("00000000:01:00.0").replace("150.00 W", f"{HUGE} W", 1)
    line = line.replace("600.00 W, Default", "lots W, Default")
    header = (
        "pci.bus_id, persistence_mode, power.limit [W], power.default_limit [W], "
        "power.min_limit [W], power.max_limit [W], compute_mode, ecc.mode.current, "
        "ecc.mode.pending\n"
    )
    root = small(tmp_path / "host", nvidia_smi=header + line)
    profile = write_profile(tmp_path / "p.yaml", {"gpus": {"all": {"power_limit": 400}}})
    for command in (("plan", profile), ("apply", profile, "-y", "--runtime-only")):
        result = run_tune(*command, "--root", root)
        assert result.code != 70, result.err
        assert "internal error" not in result.err


def test_one_container_named_twice_is_a_profile_error(tmp_path: Path) -> None:
    """Two entries for one config made apply edit the same lines twice: the second edit
    looked for a line the first had moved (ValueError, exit 70)."""
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: twice\n"
        "lxc:\n"
        '  - container: "101"\n'
        "    memlock: unlimited\n"
        "  - path: /etc/pve/lxc//101.conf\n"
        "    nvidia_devices: true\n"
    )
    result = run_tune("validate", path)
    assert result.code == 65, result.err
    assert result.err.startswith(f"{path}:3:3: lxc: "), result.err
    assert "/etc/pve/lxc/101.conf" in result.err and "twice" in result.err


def test_a_cpulist_of_four_billion_cpus_is_no_list_not_a_wait(tmp_path: Path) -> None:
    """`0-4294967295` in a node's cpulist or an IRQ's affinity was expanded CPU by CPU:
    minutes of a plan and gigabytes, for 13 bytes of a snapshot."""
    root = small(tmp_path / "host", gpus=[512])
    device = "/sys/bus/pci/devices/0000:01:00.0"
    write(root, f"{device}/numa_node", "0\n")
    write(root, f"{device}/irq", f"{HUGE}\n")
    write(root, f"{device}/msi_irqs/²", "msi\n")
    write(root, f"{device}/msi_irqs/40", "msi\n")
    write(root, "/proc/irq/40/smp_affinity_list", "0-4294967295\n")
    write(root, "/sys/devices/system/node/node0/cpulist", "0-4294967295\n")
    write(root, "/sys/devices/system/cpu/online", ",".join(["0-65535"] * 200) + "\n")
    profile = {"irq_affinity": [{"select": {"vendor": 0x10DE}, "cpus": "local"}]}
    with deadline(10):
        assert planned(tmp_path, root, profile) in (0, 2)


def test_audit_reads_hostile_sysctls_and_idle_latencies_as_no_numbers(tmp_path: Path) -> None:
    root = small(tmp_path / "host")
    write(root, "/proc/sys/vm/swappiness", HUGE + "\n")
    write(root, "/proc/sys/kernel/nmi_watchdog", "--1\n")
    write(root, "/proc/sys/net/core/rmem_max", "²\n")
    write(root, "/proc/sys/net/ipv4/tcp_rmem", f"4096 87380 {HUGE}\n")
    write(root, "/sys/devices/system/cpu/cpu0/cpuidle/state2/latency", "²\n")
    write(root, "/sys/devices/system/cpu/cpu0/cpuidle/state1/latency", HUGE + "\n")
    result = run_tune("audit", "--root", root)
    assert result.code in (0, 2), result.err


def test_a_refusal_marker_that_is_no_errno_is_a_sentence_not_a_python_error(
    tmp_path: Path,
) -> None:
    """The emulation's marker of an attribute the kernel refuses holds an errno: `x` there
    failed the step with Python's `invalid literal for int()`."""
    root = small(tmp_path / "host")
    write(root, "/.tune-emulate/refuses/proc/sys/vm/swappiness", "x\n")
    profile = write_profile(tmp_path / "p.yaml", {"sysctl": {"vm.swappiness": 10}})
    result = run_tune("apply", profile, "--root", root, "-y")
    assert result.code == 3, result.err
    assert "invalid literal" not in result.err
    assert "holds 'x', not the number of an errno" in result.err
