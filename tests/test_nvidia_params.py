"""The NVIDIA driver's parameters as facts: the known list is nv-reg.h's, the proc file reads as
the driver prints it (a real copy), and modprobe.d's options as modprobe and the kernel take
them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reconciler.facts import nvidia_params as nv
from reconciler.facts.modules import modprobe_order, module_options

CORPUS = Path(__file__).resolve().parent / "corpus" / "nvidia-params"
HEADER = (CORPUS / "nv-reg.h").read_text()
PARAMS = (CORPUS / "params").read_text()


def declared() -> tuple[list[str], list[str], dict[str, str]]:
    """nv-reg.h's integer and string parameters (less NVreg_), and the proc names that differ."""
    names = dict(re.findall(r"#define\s+(__NV_\w+)\s+(?:\\\s*)?(\w+)\s*\n", HEADER))
    ints = re.findall(r"NV_DEFINE_REG_ENTRY(?:_GLOBAL)?\((__NV_\w+)", HEADER)
    strings = re.findall(r"NV_DEFINE_REG_STRING_ENTRY\((__NV_\w+)", HEADER)
    custom = re.findall(
        r"NV_DEFINE_PARAMS_TABLE_ENTRY_CUSTOM_NAME\((__NV_\w+),\s*(__NV_\w+)\)", HEADER
    )
    return (
        [names[m] for m in ints],
        [names[m] for m in strings],
        {names[param]: names[proc] for proc, param in custom},
    )


def test_the_known_parameters_are_those_nv_reg_h_declares() -> None:
    ints, strings, renamed = declared()
    assert list(nv.INTEGERS) == ints
    assert list(nv.STRINGS) == strings
    assert renamed == nv.PROC_NAMES


def test_a_real_params_file_reads_by_the_names_it_prints() -> None:
    params = nv.parse(PARAMS)
    assert params is not None and len(params) == 32
    assert nv.running(params, "NVreg_EnableGpuFirmware") == "18"
    assert nv.running(params, "NVreg_RestrictProfilingToAdminUsers") == "1"  # RmProfilingAdminOnly
    assert nv.running(params, "NVreg_RegistryDwords") is None  # not in the quoted part
    assert nv.parse(None) is None


@pytest.mark.parametrize(
    ("param", "given", "printed"),
    [
        # nv-reg.h's defaults, and what the real file prints for them (`%u`).
        ("NVreg_ResmanDebugLevel", "-1", "ResmanDebugLevel"),
        ("NVreg_UsePageAttributeTable", "0xffffffff", "UsePageAttributeTable"),
        ("NVreg_DeviceFileMode", "0666", "DeviceFileMode"),
        ("NVreg_EnableGpuFirmware", "0x12", "EnableGpuFirmware"),
        (
            "NVreg_S0ixPowerManagementVideoMemoryThreshold",
            "256",
            "S0ixPowerManagementVideoMemoryThreshold",
        ),
    ],
)
def test_integers_compare_as_the_driver_prints_them(param: str, given: str, printed: str) -> None:
    params = nv.parse(PARAMS)
    assert params is not None
    assert nv.normalize(param, given) == params[printed]


def test_strings_are_printed_quoted_and_compare_unquoted() -> None:
    # nv_procfs_read_params: `seq_printf(s, "RegistryDwords: \"%s\"\n", ...)`.
    params = nv.parse('RegistryDwords: "PeerMappingOverride=1;"\nRmMsg: ""\n')
    assert params == {"RegistryDwords": "PeerMappingOverride=1;", "RmMsg": ""}
    assert nv.normalize("NVreg_RegistryDwords", '"PeerMappingOverride=1;"') == (
        "PeerMappingOverride=1;"
    )
    assert nv.normalize("NVreg_TemporaryFilePath", "010") == "010"  # a string, not octal


def test_a_misspelt_parameter_names_the_nearest() -> None:
    assert nv.nearest("NVreg_EnableStreamMemOps") == "NVreg_EnableStreamMemOPs"
    assert nv.nearest("NVreg_EnableGPUFirmware") == "NVreg_EnableGpuFirmware"
    assert nv.nearest("NVreg_Xyzzy") is None


def test_only_nvidia_s_nvreg_parameters_are_the_driver_s() -> None:
    assert nv.driver_param("nvidia", "NVreg_EnableGpuFirmware")
    assert not nv.driver_param("nvidia", "rm_firmware_active")
    assert not nv.driver_param("nvidia-drm", "NVreg_X")


def test_modprobe_reads_files_by_name_across_directories() -> None:
    paths = [
        "/usr/lib/modprobe.d/nvidia.conf",
        "/etc/modprobe.d/nvidia.conf",
        "/lib/modprobe.d/50-nvidia.conf",
        "/etc/modprobe.d/zz-site.conf",
        "/run/modprobe.d/tune.conf",
    ]
    assert modprobe_order(paths) == [
        "/lib/modprobe.d/50-nvidia.conf",
        "/etc/modprobe.d/nvidia.conf",  # hides /usr/lib's of the same name
        "/run/modprobe.d/tune.conf",
        "/etc/modprobe.d/zz-site.conf",
    ]


def test_options_lines_give_every_option_in_order() -> None:
    text = (
        "# options nvidia NVreg_X=commented\n"
        "options nvidia-drm modeset=1\n"
        'options nvidia NVreg_RegistryDwords="A=1; B=2" \\\n'
        "  NVreg_EnableMSI=0\n"
        "options nvidia NVreg_EnableMSI=1\n"
    )
    assert module_options(text, "nvidia") == [
        # As the module receives it: parse_args takes the quotes off.
        ("NVreg_RegistryDwords", "A=1; B=2"),
        ("NVreg_EnableMSI", "0"),
        ("NVreg_EnableMSI", "1"),
    ]
    assert module_options(text, "nvidia_drm") == [("modeset", "1")]


@pytest.mark.parametrize(
    ("name", "is_open", "version"),
    [
        ("version-open", True, (565, 57, 1)),
        ("version-proprietary", False, (580, 173, 2)),
        ("version-jetson", True, (35, 3, 1)),
    ],
)
def test_the_driver_build_from_real_version_files(
    name: str, is_open: bool, version: tuple[int, ...]
) -> None:
    found = nv.build((CORPUS / name).read_text())
    assert found == nv.Build(is_open, version)


def test_a_version_file_tune_cannot_read_is_no_build() -> None:
    assert nv.build(None) is None
    assert nv.build("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64 malformed\n") is None
