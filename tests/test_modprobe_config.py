"""modprobe.d as kmod reads it (issue 34, item 3): logical lines (`freadline_wrapped`: a
backslash before a newline joins the lines, before any other character it is dropped), the
`options MODULE REST` lines of every file in modprobe's order (a file in /etc hides one of the
same name in /run, /usr/local/lib, /usr/lib and /lib), the options of one module concatenated
in that order, and the kernel's parse_args reading the result (lib/cmdline.c `next_arg`:
quotes keep blanks, around a value or around the whole `NAME=VALUE`; the last of a name wins).
`modprobe -c -C DIR...` (kmod, reading config only) and kmod's own test data are the oracles."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import write

from reconciler.facts.modules import (
    MODPROBE_DIRS,
    config_lines,
    kernel_args,
    modprobe_order,
    next_load_options,
    options_lines,
)
from reconciler.hosts.directory import SnapshotHost
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile
from reconciler.steps import persist

CORPUS = Path(__file__).resolve().parent / "corpus" / "kmod"
MODPROBE = next((p for p in ("/usr/sbin/modprobe", "/sbin/modprobe") if Path(p).exists()), None)
MODPROBE = MODPROBE or shutil.which("modprobe")


def kmod_options(root: Path) -> list[tuple[str, str]]:
    """The `options` lines `modprobe -c` prints for the config directories under `root` (the
    host's own module directory and kernel command line left out: `-d` an empty root, and only
    lines of the modules the tests name)."""
    if MODPROBE is None:
        pytest.skip("modprobe is not installed (Debian's kmod package; CI installs it)")
    dirs = [str(root / d.lstrip("/")) for d in MODPROBE_DIRS]
    empty = root / "empty-root"
    empty.mkdir(exist_ok=True)
    args = [MODPROBE, "-c", "-d", str(empty)] + [f"--config={d}" for d in dirs]
    done = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    found = []
    for line in done.stdout.split("\n# End of configuration files")[0].splitlines():
        if line.startswith("options "):
            _, module, options = line.split(" ", 2)
            if module in NAMED:
                found.append((module, options))
    return found


NAMED = {"nvidia", "nvidia_drm", "bonding", "dummy", "ifb", "snd_hda_intel"}


def tune_options(root: Path) -> list[tuple[str, str]]:
    paths = [
        f"{d}/{p.name}"
        for d in MODPROBE_DIRS
        if (root / d.lstrip("/")).is_dir()
        for p in (root / d.lstrip("/")).iterdir()
        if p.name.endswith(".conf")
    ]
    found = []
    for path in modprobe_order(paths):
        text = (root / path.lstrip("/")).read_text()
        found += [(m, o) for m, o in options_lines(text) if m in NAMED]
    return found


REAL = sorted(p for p in (CORPUS / "modprobe.d").rglob("*.conf"))

# Forms kmod's reader takes, one file each (what packaged files and guides write).
FORMS = {
    "quoted-value.conf": 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;RMForceX=1"\n',
    "quoted-whole.conf": 'options nvidia "NVreg_DynamicPowerManagement=0x02"\n',
    "continued.conf": "options nvidia NVreg_EnableStreamMemOPs=1 \\\n  NVreg_EnableGpuFirmware=0\n",
    "continued-mid-word.conf": "options nvidia NVreg_Enable\\\nPCIeGen3=1\n",
    "escaped.conf": "options nvidia NVreg_TemporaryFilePath=/var/\\tmp\\\\x\n",
    "tabs.conf": "\toptions\tnvidia-drm\tmodeset=1\tfbdev=1\n",
    "blank-lead.conf": "   options  nvidia   NVreg_A=1\n# options nvidia NVreg_B=2\n",
    "no-options.conf": "options nvidia\noptions\n",
}


@pytest.mark.parametrize("source", REAL, ids=[p.parent.name for p in REAL])
def test_kmod_and_tune_take_the_same_options_from_real_files(tmp_path: Path, source: Path) -> None:
    write(tmp_path, f"/lib/modprobe.d/{source.name}", source.read_bytes())
    assert tune_options(tmp_path) == kmod_options(tmp_path) != []


@pytest.mark.parametrize("name", sorted(FORMS))
def test_kmod_and_tune_take_the_same_options_in_every_form(tmp_path: Path, name: str) -> None:
    write(tmp_path, f"/etc/modprobe.d/{name}", FORMS[name])
    assert tune_options(tmp_path) == kmod_options(tmp_path)


def test_a_file_in_etc_hides_its_namesake_and_names_sort_across_directories(
    tmp_path: Path,
) -> None:
    write(tmp_path, "/usr/lib/modprobe.d/nvidia.conf", "options nvidia NVreg_A=usr\n")
    write(tmp_path, "/lib/modprobe.d/nvidia.conf", "options nvidia NVreg_A=lib\n")
    write(tmp_path, "/etc/modprobe.d/nvidia.conf", "options nvidia NVreg_A=etc\n")
    write(tmp_path, "/lib/modprobe.d/50-first.conf", "options nvidia NVreg_B=1\n")
    write(tmp_path, "/run/modprobe.d/zz-last.conf", "options nvidia NVreg_B=2\n")
    assert tune_options(tmp_path) == kmod_options(tmp_path)
    assert [o for _, o in tune_options(tmp_path)] == ["NVreg_B=1", "NVreg_A=etc", "NVreg_B=2"]


def test_logical_lines_are_kmods() -> None:
    text = (CORPUS / "testsuite" / "freadline_wrapped-input.txt").read_text()
    expected = (CORPUS / "testsuite" / "freadline_wrapped-correct.txt").read_text().splitlines()
    assert config_lines(text) == expected[0::2]


@pytest.mark.parametrize(
    ("args", "parsed"),
    [
        ("a=1 b=2", [("a", "1"), ("b", "2")]),
        ('"a=1 2" b', [("a", "1 2"), ("b", None)]),
        ('a="x y" b="z"', [("a", "x y"), ("b", "z")]),
        ('a=x"y z"w', [("a", 'x"y z"w')]),
        ('R="P=1;"', [("R", "P=1;")]),
        ("  a=1   b=2  ", [("a", "1"), ("b", "2")]),
        ("a==1", [("a", "=1")]),
        ('a="', [("a", "")]),
    ],
)
def test_the_kernel_splits_a_modules_options_as_parse_args(
    args: str, parsed: list[tuple[str, str | None]]
) -> None:
    assert kernel_args(args) == parsed


def test_several_lines_for_one_module_the_last_of_a_name_wins() -> None:
    texts = [
        "options nvidia NVreg_A=1 NVreg_B=1\n",
        'options nvidia "NVreg_A=2"\noptions nvidia-drm modeset=1\n',
        "options nvidia NVreg_B=\\\n3\n",
    ]
    options = dict(next_load_options(texts, "nvidia"))
    assert options == {"NVreg_A": "2", "NVreg_B": "3"}


PARAMS = Path(__file__).resolve().parent / "corpus" / "nvidia-params" / "params"


def nvreg_plan(root: Path, tmp_path: Path, value: str) -> tuple[list[str], list[str]]:
    profile = write(
        tmp_path,
        "p.yaml",
        "name: t\nmodules:\n  nvidia:\n    value: loaded\n"
        f"    params: {{NVreg_DynamicPowerManagement: {value}}}\n",
    )
    loaded = load_profile(profile)
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, False), False)
    changes = [c.id for c in plan.changes if c.kind == "nvreg"]
    pending = [p.target for p in plan.pending if p.kind == "nvreg"]
    return changes, pending


def nvidia_host(root: Path) -> Path:
    # The running driver's own params (DynamicPowerManagement: 3), nvidia loaded.
    write(root, "/proc/driver/nvidia/params", PARAMS.read_text())
    write(root, "/proc/modules", "nvidia 11649024 0 - Live 0x0000000000000000 (POE)\n")
    write(root, "/usr/sbin/update-initramfs", "")
    return root


@pytest.mark.parametrize(
    "packaged",
    [
        (CORPUS / "modprobe.d" / "nvidia-kmod-common" / "nvidia.conf").read_text(),
        FORMS["quoted-whole.conf"],
        'options nvidia NVreg_DynamicPowerManagement="0x02"\n',
        "options nvidia \\\n  NVreg_DynamicPowerManagement=2\n",
        "options nvidia NVreg_DynamicPower\\\nManagement=2\n",
        "options nvidia NVreg_DynamicPowerManagement=3\n"
        "options nvidia NVreg_DynamicPowerManagement=2\n",
    ],
)
def test_a_parameter_a_packaged_file_sets_is_pending_never_a_second_file(
    tmp_path: Path, packaged: str
) -> None:
    root = nvidia_host(tmp_path / "host")
    write(root, "/usr/lib/modprobe.d/nvidia.conf", packaged)
    # Given to the next load, not used by the running driver (3): pending a reboot.
    assert nvreg_plan(root, tmp_path, "2") == ([], ["NVreg_DynamicPowerManagement"])
    # The running driver's own value, while the next load gets 2: tune's file says 3.
    assert nvreg_plan(root, tmp_path, "3") == (["nvreg:NVreg_DynamicPowerManagement"], [])


def test_a_packaged_file_hidden_by_its_namesake_in_etc_sets_nothing(tmp_path: Path) -> None:
    root = nvidia_host(tmp_path / "host")
    write(root, "/usr/lib/modprobe.d/nvidia.conf", FORMS["quoted-whole.conf"])
    write(root, "/etc/modprobe.d/nvidia.conf", "blacklist nouveau\n")
    assert nvreg_plan(root, tmp_path, "2") == (["nvreg:NVreg_DynamicPowerManagement"], [])


KMS = CORPUS / "modprobe.d" / "pop-os" / "nvidia-graphics-drivers-kms.conf"


@pytest.mark.parametrize(("modeset", "tunes"), [("1", False), ("0", True)])
def test_a_module_parameter_a_packaged_file_sets_is_not_written_again(
    tmp_path: Path, modeset: str, tunes: bool
) -> None:
    # Pop!_OS's and Ubuntu's nvidia-kernel-common ship `options nvidia-drm modeset=1`.
    root = tmp_path / "host"
    write(root, "/proc/modules", "nvidia_drm 135168 0 - Live 0x0000000000000000 (POE)\n")
    write(root, "/sys/module/nvidia_drm/parameters/modeset", "Y\n")
    write(root, f"/lib/modprobe.d/{KMS.name}", KMS.read_bytes())
    profile = write(
        tmp_path,
        "p.yaml",
        f"name: t\nmodules:\n  nvidia-drm: {{value: loaded, params: {{modeset: {modeset}}}}}\n",
    )
    loaded = load_profile(profile)
    files = observe(SnapshotHost(root), loaded.profile, True).files
    written = persist.contents(loaded.profile, files)
    options = [line for line in written.get(persist.MODPROBE, "").splitlines() if "options" in line]
    assert options == (["options nvidia_drm modeset=" + modeset] if tunes else [])
    assert "nvidia_drm" in written[persist.MODULES_LOAD]
