"""tune's irqbalance policy script, run as irqbalance runs it (`/bin/sh -c "exec SCRIPT DEVICE
IRQ"`, classify.c's run_script_for_policy), and the command line it extends, read from the
units irqbalance really ships with (tests/corpus/irqbalance)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import write

from reconciler.core.files import Files
from reconciler.facts import irqbalance, systemd
from reconciler.hosts.directory import SnapshotHost

CORPUS = Path(__file__).parent / "corpus/irqbalance"
BANNED = ("0000:c2:00.0", "0000:c2:00.1")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "etc/tune/irqbalance-policy"
    path.parent.mkdir(parents=True)
    path.write_text(irqbalance.policy_script(BANNED))
    path.chmod(0o755)
    return path


def ask(script: Path, device: str, irq: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """What irqbalance reads from the script about IRQ `irq` of `device`: it builds this very
    command line with sprintf and hands it to popen."""
    return subprocess.run(
        ["/bin/sh", "-c", f"exec {script} {device} {irq}"],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def test_the_irqs_of_a_banned_device_are_banned(script: Path, tmp_path: Path) -> None:
    for address in BANNED:
        ran = ask(script, f"/sys/bus/pci/devices/{address}", "120", tmp_path)
        assert (ran.returncode, ran.stdout) == (0, "ban=true\n")


@pytest.mark.parametrize(
    "device",
    [
        "/sys/bus/pci/devices/0000:01:00.0",  # a device tune does not pin
        "/sys",  # irqbalance's path for an IRQ without a sysfs device
        "/sys/bus/pci/devices/0000:c2:00.0/extra",
        "/sys/bus/pci/devices/x0000:c2:00.0",
    ],
)
def test_any_other_irq_gets_no_policy(script: Path, tmp_path: Path, device: str) -> None:
    ran = ask(script, device, "90", tmp_path)
    # Exit 0 with nothing said: irqbalance balances it as before (non-zero would be an error).
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")


def test_the_script_executes_nothing_it_is_given(script: Path, tmp_path: Path) -> None:
    hostile = ["$(touch made)", "`touch made`", "*", "0000:c2:00.0;touch made", "-e"]
    for argument in hostile:
        ran = subprocess.run(
            [str(script), argument, "120"], capture_output=True, text=True, cwd=tmp_path
        )
        assert (ran.returncode, ran.stdout) == (0, "")
    assert not (tmp_path / "made").exists()


def test_only_pci_addresses_reach_the_script() -> None:
    with pytest.raises(ValueError, match="not a PCI address"):
        irqbalance.policy_script(["0000:c2:00.0') touch x ;; ('"])
    with pytest.raises(ValueError):
        irqbalance.policy_script([])


def unit_files(root: Path, unit: Path, extra: dict[str, str] | None = None) -> Files:
    """A snapshot holding `unit` as the installed irqbalance.service, and `extra` files."""
    found = {"/lib/systemd/system/irqbalance.service": unit.read_text(), **(extra or {})}
    for path, text in found.items():
        write(root, path.lstrip("/"), text)
    return SnapshotHost(root).fetch(irqbalance.request())


@pytest.mark.parametrize(
    "unit",
    [CORPUS / "debian-bookworm/irqbalance.service", CORPUS / "upstream/irqbalance.service.in"],
)
def test_the_command_line_is_the_units_own(unit: Path, tmp_path: Path) -> None:
    files = unit_files(tmp_path, unit)
    start = irqbalance.exec_start(files, systemd.resolve(files, irqbalance.UNIT))
    expected = {
        "irqbalance.service": "/usr/sbin/irqbalance --foreground $IRQBALANCE_ARGS",
        "irqbalance.service.in": "/usr/sbin/irqbalance $IRQBALANCE_ARGS",
    }
    assert start == expected[unit.name]


def test_tunes_own_drop_in_is_not_read_as_the_units_command_line(tmp_path: Path) -> None:
    ours = irqbalance.dropin_text("/usr/sbin/irqbalance --foreground $IRQBALANCE_ARGS")
    admins = "[Service]\nExecStart=\nExecStart=/usr/sbin/irqbalance --foreground --journal\n"
    files = unit_files(
        tmp_path,
        CORPUS / "debian-bookworm/irqbalance.service",
        {irqbalance.DROPIN: ours, "/etc/systemd/system/irqbalance.service.d/50-admin.conf": admins},
    )
    unit = systemd.resolve(files, irqbalance.UNIT)
    assert irqbalance.exec_start(files, unit) == "/usr/sbin/irqbalance --foreground --journal"
    # systemd itself reads tune's drop-in last: its line is the one that runs.
    assert systemd.setting(files, unit, "Service", "ExecStart")[0] == (
        f"/usr/sbin/irqbalance --foreground $IRQBALANCE_ARGS {irqbalance.OPTION}"
    )


def test_the_shipped_environment_files_give_no_policy_script(tmp_path: Path) -> None:
    files = unit_files(
        tmp_path,
        CORPUS / "debian-bookworm/irqbalance.service",
        {"/etc/default/irqbalance": (CORPUS / "debian-bookworm/default-irqbalance").read_text()},
    )
    assert irqbalance.own_policy(files, systemd.resolve(files, irqbalance.UNIT)) is None


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("/etc/default/irqbalance", 'IRQBALANCE_ARGS="--policyscript=/etc/irqbalance.d"\n'),
        ("/etc/default/irqbalance", "export IRQBALANCE_ARGS='-l /usr/local/bin/ban'\n"),
        (
            "/etc/systemd/system/irqbalance.service.d/override.conf",
            "[Service]\nExecStart=\nExecStart=/usr/sbin/irqbalance --foreground -l/opt/ban\n",
        ),
    ],
)
def test_an_administrators_own_policy_script_is_found(tmp_path: Path, path: str, text: str) -> None:
    files = unit_files(tmp_path, CORPUS / "debian-bookworm/irqbalance.service", {path: text})
    assert irqbalance.own_policy(files, systemd.resolve(files, irqbalance.UNIT)) == path
