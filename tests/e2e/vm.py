"""A throwaway Debian 12 VM with a real kernel and real GRUB, reached over SSH on 127.0.0.1.

`GuestImage` builds the guest disk once per recipe and caches it outside the checkout;
`Vm` boots a disposable copy of it under QEMU and stops it by its pid. Standard library only, so
`python -m tests.e2e.vm up` works without the project installed. Nothing here changes the
machine it runs on: the image is made from files (`mkfs.ext4 -d`, `debugfs`), never mounted.

    python -m tests.e2e.vm build     # build (or find) the cached image
    python -m tests.e2e.vm up        # boot a VM, print the ssh command, leave it running
    python -m tests.e2e.vm down      # stop it
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

CACHE = Path(os.environ.get("TUNE_E2E_CACHE", "/var/cache/tune-e2e"))
RUNS = Path(os.environ.get("TUNE_E2E_RUNS", "/var/tmp"))
MIRROR = os.environ.get("TUNE_E2E_MIRROR", "http://deb.debian.org/debian")
# TCG boots take 25 s on an idle 2-core host and minutes on a loaded one.
BOOT_TIMEOUT = float(os.environ.get("TUNE_E2E_BOOT_TIMEOUT", "600"))
RUN_PREFIX = "tune-e2e-"
HOST_NAME = "tune-e2e"
# The MBR partition starts at 1 MiB, leaving room for GRUB's core.img before it.
PART_OFFSET = 1 << 20
# SSH options shared by every connection; host-key checking stays on.
SSH_OPTIONS = {
    "User": "root",
    "HostName": "127.0.0.1",
    "StrictHostKeyChecking": "yes",
    "GlobalKnownHostsFile": "/dev/null",
    "IdentitiesOnly": "yes",
    "BatchMode": "yes",
    "ConnectTimeout": "5",
    # User-mode networking keeps the host side of a connection open across a guest reboot:
    # keepalives are what notice that the guest went away.
    "ServerAliveInterval": "2",
    "ServerAliveCountMax": "5",
    "LogLevel": "ERROR",
}

# GRUB_DEFAULT=saved: what tune's try-once boot needs (`grub-reboot`). No recovery entries:
# update-grub runs 10_linux at about 100 ms per exec under TCG, and tune's try-once entry runs
# it a second time. loglevel=6 keeps the kernel's notices (its banner, "reboot: Restarting
# system", which the harness watches for) and warnings on the serial console but not its 500
# lines of info.
GRUB_DEFAULTS = """\
GRUB_DEFAULT=saved
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=Debian
GRUB_DISABLE_RECOVERY=true
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="console=ttyS0 loglevel=6"
GRUB_TERMINAL=serial
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
GRUB_DISABLE_OS_PROBER=true
"""

# Runs once, on the first boot of the freshly built image, from the guest's own kernel: GRUB
# can only be installed from inside (no loop mounts on the build host).
PROVISION_SCRIPT = """\
#!/bin/sh
set -eu
trap 'sync; systemctl poweroff --no-block' EXIT
grub-install --target=i386-pc /dev/vda
update-grub
systemctl disable tune-e2e-provision.service
rm -f /etc/systemd/system/tune-e2e-provision.service /usr/local/sbin/tune-e2e-provision
echo TUNE-E2E-PROVISIONED > /dev/console
"""

PROVISION_UNIT = """\
[Unit]
Description=tune e2e: install GRUB from the guest's own kernel, then power off
After=local-fs.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/tune-e2e-provision
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
"""

# The address QEMU's user-mode network forwards SSH to, on the virtio NIC (enp0s1 in this
# machine's layout), set without a DHCP client: systemd-networkd took 6-9 s to start under TCG,
# on ssh's critical chain (network.target) at every boot.
NET_UNIT = """\
[Unit]
Description=tune e2e: the address QEMU's user-mode network forwards SSH to
BindsTo=sys-subsystem-net-devices-enp0s1.device
After=sys-subsystem-net-devices-enp0s1.device

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/ip address add 10.0.2.15/24 dev enp0s1
ExecStart=/usr/sbin/ip link set enp0s1 up

[Install]
WantedBy=multi-user.target
"""

BLACKLISTED_MODULES = (
    "kvm",
    "kvm_amd",
    "kvm_intel",
    "pcspkr",
    "iTCO_wdt",
    "iTCO_vendor_support",
    "i2c_i801",
    "lpc_ich",
    "ahci",
    "psmouse",
    "serio_raw",
)

# Files written into the guest tree: path -> (mode, content).
GUEST_FILES: dict[str, tuple[int, str]] = {
    "/etc/hostname": (0o644, HOST_NAME + "\n"),
    "/etc/hosts": (0o644, f"127.0.0.1 localhost\n127.0.1.1 {HOST_NAME}\n"),
    # fsck pass 0: a throwaway disk, and fsck sat on ssh's critical chain at every boot.
    "/etc/fstab": (0o644, "LABEL=rootfs / ext4 defaults,errors=remount-ro 0 0\n"),
    "/etc/default/grub": (0o644, GRUB_DEFAULTS),
    "/etc/ssh/sshd_config.d/tune-e2e.conf": (
        0o644,
        "HostKey /etc/ssh/ssh_host_ed25519_key\nPasswordAuthentication no\n"
        "PermitRootLogin prohibit-password\nUseDNS no\n",
    ),
    "/etc/systemd/system/tune-e2e-net.service": (0o644, NET_UNIT),
    "/usr/local/sbin/tune-e2e-provision": (0o755, PROVISION_SCRIPT),
    # A 7 MB initrd with only what mounts the root file system, instead of 36 MB: GRUB reads it
    # through BIOS calls, slowly under TCG. Built in the chroot, at native speed.
    "/etc/initramfs-tools/conf.d/tune-e2e.conf": (0o644, "MODULES=list\n"),
    "/etc/initramfs-tools/modules": (0o644, "virtio_pci\nvirtio_blk\next4\ncrc32c_generic\n"),
    # Nested KVM, the PC speaker, q35's watchdog, SMBus, LPC and AHCI functions and the PS/2
    # mouse probe only cost boot time in a TCG guest (the NVMe and e1000e keep their drivers).
    "/etc/modprobe.d/tune-e2e.conf": (
        0o644,
        "".join(f"blacklist {module}\n" for module in BLACKLISTED_MODULES),
    ),
    "/etc/systemd/system/tune-e2e-provision.service": (0o644, PROVISION_UNIT),
    # The journal of this boot is all a test reads (`journalctl -b`): kept in /run, it needs no
    # flush to disk on ssh's critical chain.
    "/etc/systemd/journald.conf.d/tune-e2e.conf": (0o644, "[Journal]\nStorage=volatile\n"),
    # sshd -t before each start: one more exec on ssh's critical chain, for a fixed config.
    "/etc/systemd/system/ssh.service.d/tune-e2e.conf": (0o644, "[Service]\nExecStartPre=\n"),
}
ENABLED_UNITS = ("tune-e2e-net.service", "tune-e2e-provision.service")
# Nothing periodic, nothing slow at boot.
MASKED_UNITS = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "systemd-networkd-wait-online.service",
    "getty@tty1.service",
    "getty-static.service",
    # The console is a log file, nobody logs in on it.
    "serial-getty@ttyS0.service",
    # The image's users exist already; sysusers, and the utmp record after it, sat on ssh's
    # critical chain.
    "systemd-sysusers.service",
    "systemd-update-utmp.service",
    # Modules systemd loads early for features no test uses.
    "modprobe@dm_mod.service",
    "modprobe@drm.service",
    "modprobe@efi_pstore.service",
    "modprobe@fuse.service",
    "modprobe@loop.service",
)
# update-grub skips /etc/grub.d scripts that are not executable: 20_linux_xen finds no Xen and
# costs 2 s of every update-grub under TCG.
UNEXECUTABLE = ("/etc/grub.d/20_linux_xen",)
# Module trees no test loads: a smaller image copies and boots faster.
PRUNED_MODULES = (
    "drivers/gpu",
    "drivers/media",
    "drivers/net/wireless",
    "sound",
    "drivers/staging",
    "drivers/iio",
    "drivers/infiniband",
    "net/wireless",
    "net/mac80211",
    "net/bluetooth",
    "drivers/bluetooth",
    "drivers/usb",
)


class Unavailable(Exception):
    """This host cannot run the e2e tests (missing tools, no root, no mirror): a skip reason."""


class VmError(Exception):
    """The VM or the image build failed: a real failure."""


def log(message: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(
    argv: Sequence[str | os.PathLike[str]], **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run a host command; a failure raises VmError with the command's own error output."""
    args = [str(a) for a in argv]
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()[-2000:]
        raise VmError(f"{shlex.join(args)} failed ({result.returncode}): {detail}")
    return result  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Recipe:
    """Everything the guest image is made of; its hash names the cache entry."""

    suite: str = "bookworm"
    packages: tuple[str, ...] = (
        "systemd-sysv",
        "udev",
        "dbus",
        "openssh-server",
        "kmod",
        "pciutils",
        "procps",
        "iproute2",
        "linux-image-amd64",
        "grub-pc",
        # tune itself runs in the guest (the pull-mode timers, tests/e2e/test_pull_timer.py);
        # its dependencies come from the controller (tests/e2e/guest_tune.py).
        "python3",
    )
    image_mib: int = 2048
    files: dict[str, tuple[int, str]] = field(default_factory=lambda: dict(GUEST_FILES))
    enabled: tuple[str, ...] = ENABLED_UNITS
    masked: tuple[str, ...] = MASKED_UNITS
    pruned: tuple[str, ...] = PRUNED_MODULES
    unexecutable: tuple[str, ...] = UNEXECUTABLE
    # Bump when the build steps change in a way the fields above do not show.
    revision: int = 1

    def packages_key(self) -> str:
        return _digest({"suite": self.suite, "packages": self.packages})

    def key(self) -> str:
        return _digest(asdict(self))


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _missing(tools: Sequence[str]) -> list[str]:
    return [t for t in tools if shutil.which(t) is None]


class GuestImage:
    """The provisioned base disk of a recipe, built once and cached under `cache/<hash>/`."""

    def __init__(self, recipe: Recipe | None = None, cache: Path = CACHE) -> None:
        self.recipe = recipe or Recipe()
        self.cache = cache
        self.dir = cache / self.recipe.key()
        self.disk = self.dir / "disk.img"
        self.packages = cache / f"debs-{self.recipe.suite}-{self.recipe.packages_key()}.tgz"

    def is_cached(self) -> bool:
        return self.disk.is_file()

    def check_buildable(self) -> None:
        """Raise Unavailable with the reason this host cannot build the image."""
        if os.geteuid() != 0:
            raise Unavailable(f"no cached guest image in {self.dir} and building one needs root")
        missing = _missing(["debootstrap", "sfdisk", "mkfs.ext4", "chroot"])
        if missing:
            raise Unavailable(f"building the guest image needs {', '.join(missing)} (see .ci/run)")
        if not self.packages.is_file():
            url = f"{MIRROR}/dists/{self.recipe.suite}/Release"
            try:
                with urllib.request.urlopen(url, timeout=15) as response:
                    response.read(1)
            except OSError as exc:
                raise Unavailable(
                    f"debootstrap cannot reach the Debian mirror ({url}: {exc})"
                ) from exc

    def ensure(self) -> Path:
        """The cached disk, built first if needed (one builder at a time)."""
        if self.is_cached():
            return self.disk
        self.check_buildable()
        self.cache.mkdir(parents=True, exist_ok=True)
        with _flock(self.cache / "build.lock"):
            if not self.is_cached():
                self._build()
        return self.disk

    def _build(self) -> None:
        started = time.monotonic()
        for leftover in [*self.cache.glob("build-*"), *self.cache.glob("fetch-*")]:
            shutil.rmtree(leftover, ignore_errors=True)  # from a build that was killed
        work = Path(tempfile.mkdtemp(prefix="build-", dir=self.cache))
        try:
            self._fetch_packages()
            rootfs = work / "rootfs"
            t = time.monotonic()
            self._debootstrap(f"--unpack-tarball={self.packages}", rootfs)
            self._configure(rootfs)
            log(f"root file system ready in {time.monotonic() - t:.0f}s")
            kernel, initrd = self._boot_files(rootfs, work)
            disk = work / "disk.img"
            self._make_disk(rootfs, disk)
            shutil.rmtree(rootfs)
            self._provision(disk, kernel, initrd, work)
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "recipe.json").write_text(json.dumps(asdict(self.recipe), indent=1))
            os.replace(disk, self.disk)
            self._prune_old()
            log(f"guest image built in {time.monotonic() - started:.0f}s: {self.disk}")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _fetch_packages(self) -> None:
        if self.packages.is_file():
            return
        t = time.monotonic()
        scratch = Path(tempfile.mkdtemp(prefix="fetch-", dir=self.cache))
        part = self.packages.with_suffix(".part")
        try:
            self._debootstrap(f"--make-tarball={part}", scratch / "root")
            os.replace(part, self.packages)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            part.unlink(missing_ok=True)
        log(f"packages downloaded in {time.monotonic() - t:.0f}s: {self.packages}")

    def _debootstrap(self, action: str, target: Path) -> None:
        options = ["--variant=minbase", "--include=" + ",".join(self.recipe.packages), action]
        run(
            ["debootstrap", *options, self.recipe.suite, target, MIRROR],
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )

    def _configure(self, root: Path) -> None:
        for path, (mode, content) in self.recipe.files.items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            target.chmod(mode)
        for unit in self.recipe.enabled:
            run(["chroot", root, "systemctl", "enable", unit])
        for unit in self.recipe.masked:
            run(["chroot", root, "systemctl", "mask", unit])
        for script in self.recipe.unexecutable:
            (root / script.lstrip("/")).chmod(0o644)
        # Each session gets its own host key and client key (written into its copy of the disk).
        for key in (root / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
        for version in os.listdir(root / "lib/modules"):
            for tree in self.recipe.pruned:
                shutil.rmtree(root / "lib/modules" / version / "kernel" / tree, ignore_errors=True)
            run(["chroot", root, "depmod", version])  # the guest's own kmod
        run(["chroot", root, "update-initramfs", "-u", "-k", "all"])
        for junk in ("usr/share/doc", "usr/share/man", "usr/share/info", "var/cache/apt"):
            shutil.rmtree(root / junk, ignore_errors=True)
            (root / junk).mkdir()

    def _boot_files(self, root: Path, work: Path) -> tuple[Path, Path]:
        kernels = sorted((root / "boot").glob("vmlinuz-*"))
        if not kernels:
            raise VmError(f"debootstrap left no kernel in {root / 'boot'}")
        version = kernels[-1].name.removeprefix("vmlinuz-")
        kernel, initrd = work / "vmlinuz", work / "initrd.img"
        shutil.copy(kernels[-1], kernel)
        shutil.copy(root / "boot" / f"initrd.img-{version}", initrd)
        return kernel, initrd

    def _make_disk(self, root: Path, disk: Path) -> None:
        with open(disk, "wb") as handle:
            handle.truncate(self.recipe.image_mib << 20)
        run(["sfdisk", "-q", disk], input="start=2048, type=83, bootable\n")
        mkfs = ["mkfs.ext4", "-q", "-F", "-L", "rootfs", "-E", f"offset={PART_OFFSET}"]
        run([*mkfs, "-d", root, disk, f"{self.recipe.image_mib - 1}M"])

    def _provision(self, disk: Path, kernel: Path, initrd: Path, work: Path) -> None:
        t = time.monotonic()
        vm = Vm(disk, run_dir=work / "provision", accel=Accel("tcg", "max", "provisioning"))
        # No host key yet: sshd would only fail and retry, taking CPU from the provisioning.
        append = "root=LABEL=rootfs ro console=ttyS0 systemd.mask=ssh.service"
        vm.boot_kernel = (kernel, initrd, append)
        vm.launch(in_place=True)
        vm.wait_exit(BOOT_TIMEOUT)
        if "TUNE-E2E-PROVISIONED" not in vm.console():
            raise VmError("provisioning boot did not install GRUB; console:\n" + vm.console_tail())
        log(f"GRUB installed by the provisioning boot in {time.monotonic() - t:.0f}s")

    def _prune_old(self) -> None:
        for entry in self.cache.iterdir():
            stale_image = entry.is_dir() and len(entry.name) == 16 and entry != self.dir
            stale_debs = entry.name.startswith("debs-") and entry != self.packages
            if stale_image:
                shutil.rmtree(entry, ignore_errors=True)
            elif stale_debs:
                entry.unlink(missing_ok=True)


@dataclass(frozen=True)
class Accel:
    name: str  # "tcg" or "kvm"
    cpu: str
    why: str


def choose_accel() -> Accel:
    """TCG unless KVM really works. This kind of machine's /dev/kvm is PVM (nested paravirtual
    KVM): a stock guest kernel hangs in its decompressor there. TUNE_E2E_ACCEL=tcg|kvm|auto."""
    wanted = os.environ.get("TUNE_E2E_ACCEL", "auto")
    if wanted == "tcg":
        return Accel("tcg", "max", "TUNE_E2E_ACCEL=tcg")
    if wanted == "kvm":
        return Accel("kvm", "host", "TUNE_E2E_ACCEL=kvm")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return Accel("tcg", "max", "no usable /dev/kvm")
    if Path("/sys/module/kvm_pvm").exists():
        return Accel("tcg", "max", "/dev/kvm is PVM, which a stock guest kernel cannot boot on")
    return Accel("kvm", "host", "probe")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Vm:
    """One disposable QEMU guest: q35, 2 vCPUs on 2 NUMA nodes, e1000e and NVMe on PCIe root
    ports, SSH forwarded from 127.0.0.1 only. Always stopped by the pid QEMU wrote.

    A guest reboot is a cold one: QEMU runs with -no-reboot, so the guest's reset ends it, and
    `supervise` starts it again on the same disk and port (SeaBIOS, then the disk's GRUB). A warm
    reset inside one QEMU process is what real hardware does, but Debian's QEMU 7.2 under TCG
    then often crawls for minutes (GRUB loading the initrd, the kernel clearing pages).
    """

    def __init__(
        self,
        disk: Path | None,
        *,
        run_dir: Path | None = None,
        accel: Accel | None = None,
        memory_mib: int = 2048,
    ) -> None:
        self.base = disk
        self.run_dir = run_dir or Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=RUNS))
        self.accel = accel or choose_accel()
        self.memory_mib = memory_mib
        self.port = 0
        self.disk = self.run_dir / "disk.img"
        self.pidfile = self.run_dir / "qemu.pid"
        self.key = self.run_dir / "id_ed25519"
        self.known_hosts = self.run_dir / "known_hosts"
        self.ssh_config = self.run_dir / "ssh_config"
        self.monitor_socket = self.run_dir / "monitor.sock"
        self.console_log = self.run_dir / "console.log"
        self.stopping = self.run_dir / "stopping"  # tells a supervisor not to restart QEMU
        # (kernel, initrd, append) to boot without the disk's GRUB (provisioning only).
        self.boot_kernel: tuple[Path, Path, str] | None = None
        self.host_key_line: list[str] | None = None
        self.boots = 0
        self.ended: str | None = None  # why the supervisor gave up, if it did
        self._console_offset = 0
        self._watcher: threading.Thread | None = None

    @classmethod
    def attach(cls, held: dict[str, object]) -> Vm:
        """A handle on a VM recorded in the slot: enough to find its pid and stop it."""
        return cls(None, run_dir=Path(str(held["run_dir"])), accel=Accel("tcg", "max", "attached"))

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = BOOT_TIMEOUT, supervise: bool = True) -> float:
        """Boot a fresh copy of the base disk and wait until SSH answers; returns the seconds.
        With `supervise`, a thread restarts QEMU whenever the guest reboots."""
        started = time.monotonic()
        if self.base is None:
            raise VmError("an attached VM handle cannot start")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        run(["cp", "--sparse=always", self.base, self.disk])
        self._install_keys()
        self.launch()
        if self.accel.why == "probe" and not self._kernel_started(within=60):
            log("KVM did not get the guest kernel going; falling back to TCG")
            self._kill()
            self.accel = Accel("tcg", "max", "KVM probe failed")
            self.launch()
        if supervise:
            self._watcher = threading.Thread(
                target=self.supervise, name="vm-supervisor", daemon=True
            )
            self._watcher.start()
        self.wait_ssh(started + timeout)
        elapsed = time.monotonic() - started
        log(f"VM up in {elapsed:.0f}s ({self.accel.name}: {self.accel.why}): {self.ssh_command()}")
        return elapsed

    def launch(self, in_place: bool = False, port: int | None = None) -> None:
        """Start QEMU as a daemon on the run's disk (or on `base` itself when `in_place`)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        disk = self.base if in_place and self.base else self.disk
        for _attempt in range(3):
            self.port = port or free_port()
            self._write_ssh_files()
            self._console_offset = (
                self.console_log.stat().st_size if self.console_log.exists() else 0
            )
            result = subprocess.run(self._qemu_argv(disk), capture_output=True, text=True)
            if result.returncode == 0:
                self.boots += 1
                return
            # Another process took the port between free_port() and QEMU binding it.
            if port is not None or "host forwarding" not in result.stderr:
                break
        raise VmError(f"qemu-system-x86_64 did not start: {result.stderr.strip()}")

    def _qemu_argv(self, disk: Path) -> list[str]:
        half = self.memory_mib // 2
        nvme = self.run_dir / "nvme.img"
        if not nvme.exists():
            with open(nvme, "wb") as handle:
                handle.truncate(64 << 20)
        argv = [
            "qemu-system-x86_64", "-name", HOST_NAME, "-nodefaults", "-no-reboot",
            "-machine", "q35", "-accel", self.accel.name, "-cpu", self.accel.cpu,
            "-smp", "2,sockets=2,cores=1,threads=1", "-m", str(self.memory_mib),
            "-object", f"memory-backend-ram,id=m0,size={half}M",
            "-numa", "node,nodeid=0,cpus=0,memdev=m0",
            "-object", f"memory-backend-ram,id=m1,size={half}M",
            "-numa", "node,nodeid=1,cpus=1,memdev=m1",
            # restrict=on: the guest reaches nothing outside; only the SSH forward comes in.
            "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{self.port}-:22",
            "-device", "virtio-net-pci,netdev=n0",
            "-device", "pcie-root-port,id=rp1,bus=pcie.0,chassis=1,slot=1",
            "-netdev", "user,id=n1,restrict=on", "-device", "e1000e,bus=rp1,netdev=n1",
            "-device", "pcie-root-port,id=rp2,bus=pcie.0,chassis=2,slot=2",
            "-drive", f"if=none,id=nv0,file={nvme},format=raw",
            "-device", "nvme,bus=rp2,serial=tune0,drive=nv0",
            "-drive", f"file={disk},if=virtio,format=raw",
            "-display", "none",
            "-chardev", f"file,id=console,path={self.console_log},append=on",
            "-serial", "chardev:console",
            "-monitor", f"unix:{self.monitor_socket},server,nowait",
            "-pidfile", str(self.pidfile), "-daemonize",
        ]  # fmt: skip
        if self.boot_kernel is not None:
            kernel, initrd, append = self.boot_kernel
            argv += ["-kernel", str(kernel), "-initrd", str(initrd), "-append", append]
        return argv

    def supervise(self) -> None:
        """Restart QEMU each time the guest reboots; return when it ends any other way (a
        power-off, a crash, `stop`)."""
        while not self.stopping.exists():
            if self.pid() is None:
                if self.stopping.exists():
                    return
                if not self._reset_requested():
                    self.ended = "QEMU exited and the guest had not asked for a reboot"
                    return
                try:
                    self.launch(port=self.port)
                except VmError as exc:
                    self.ended = f"could not restart QEMU after the guest rebooted: {exc}"
                    return
            time.sleep(0.2)

    def _reset_requested(self) -> bool:
        """Whether the guest kernel's last words in this QEMU run were a restart."""
        try:
            with open(self.console_log, "rb") as handle:
                handle.seek(self._console_offset)
                return b"reboot: Restarting system" in handle.read()
        except OSError:
            return False

    def pid(self) -> int | None:
        """QEMU's pid, if it is still running this VM (never a recycled pid)."""
        try:
            pid = int(self.pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if str(self.pidfile).encode() in cmdline else None

    def running(self) -> bool:
        """QEMU is up, or between two QEMU runs of a reboot the supervisor is handling."""
        if self._watcher is not None and self._watcher.is_alive():
            return True
        return self.pid() is not None

    def wait_exit(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.pid() is not None:
            if time.monotonic() > deadline:
                self._kill()
                raise VmError(
                    f"no power-off within {timeout:.0f}s; console:\n{self.console_tail()}"
                )
            time.sleep(1)

    def stop(self, keep_run_dir: bool = False) -> None:
        """Stop QEMU by its pid and delete the run's files. Idempotent; safe from any thread."""
        if self.run_dir.is_dir():
            self.stopping.touch()
        watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=5)
        if self.ssh_config.exists():
            self.drop_connection()
        self._kill()
        if not keep_run_dir and os.environ.get("TUNE_E2E_KEEP") != "1":
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _kill(self) -> None:
        """TERM, then KILL, QEMU's pid as its pidfile names it."""
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                if not pid_alive(pid):
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)
        self.pidfile.unlink(missing_ok=True)

    def console_tail(self) -> str:
        return self.console()[-3000:]

    def console(self) -> str:
        try:
            return self.console_log.read_text(errors="replace")
        except OSError:
            return ""

    def _kernel_started(self, within: float) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if "Linux version" in self.console():
                return True
            time.sleep(1)
        return False

    # -- keys and SSH ----------------------------------------------------------------------

    def _install_keys(self) -> None:
        """A fresh client key and host key per session, written into this run's disk copy."""
        host_key = self.run_dir / "ssh_host_ed25519_key"
        for path in (self.key, host_key):
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", HOST_NAME, "-f", path])
        authorized = self.run_dir / "authorized_keys"
        shutil.copy(self.key.with_suffix(".pub"), authorized)
        authorized.chmod(0o600)
        image = f"{self.disk}?offset={PART_OFFSET}"
        writes = [
            (authorized, "/root/.ssh/authorized_keys"),
            (host_key, "/etc/ssh/ssh_host_ed25519_key"),
            (host_key.with_suffix(".pub"), "/etc/ssh/ssh_host_ed25519_key.pub"),
        ]
        script = "".join(f"write {local} {guest}\n" for local, guest in writes)
        run(["debugfs", "-w", "-f", "-", image], input=script)
        # debugfs exits 0 even when a command fails: read one back.
        back = run(["debugfs", "-R", "cat /root/.ssh/authorized_keys", image]).stdout
        if back != authorized.read_text():
            raise VmError(f"could not write the session's SSH key into {self.disk}")
        self.host_key_line = host_key.with_suffix(".pub").read_text().split()[:2]

    def _write_ssh_files(self) -> None:
        if self.host_key_line is None:  # the provisioning boot has no SSH
            return
        kind, key = self.host_key_line
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {kind} {key}\n")
        lines = [f"Host {HOST_NAME}", f"  Port {self.port}", f"  IdentityFile {self.key}"]
        lines += [f"  UserKnownHostsFile {self.known_hosts}"]
        lines += [f"  {k} {v}" for k, v in SSH_OPTIONS.items()]
        self.ssh_config.write_text("\n".join(lines) + "\n")

    def ssh_argv(self) -> list[str]:
        """`ssh` with this VM's config, ready for a remote command."""
        return ["ssh", "-F", str(self.ssh_config), HOST_NAME]

    def ssh_command(self) -> str:
        return shlex.join(self.ssh_argv())

    def _mux_argv(self) -> list[str]:
        """The harness's own commands share one connection: a TCG guest takes a second or two
        per SSH handshake. Not in ssh_config, which is what tune itself reads."""
        ssh, *rest = self.ssh_argv()
        mux = ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.run_dir / 'mux'}"]
        return [ssh, *mux, "-o", "ControlPersist=60", *rest]

    def drop_connection(self) -> None:
        """Close the shared connection: after a reboot it would hang until keepalives notice."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            exit_master = [*self._mux_argv()[:-1], "-O", "exit", HOST_NAME]
            subprocess.run(exit_master, capture_output=True, timeout=15, check=False)

    def sh(
        self,
        script: str,
        *,
        check: bool = True,
        timeout: float = 120,
        stdin: str | bytes | None = None,
        binary: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run a POSIX sh script in the guest as root."""
        argv = [*self._mux_argv(), "sh", "-c", shlex.quote(script)]
        try:
            result = subprocess.run(
                argv, input=stdin, capture_output=True, text=not binary, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise VmError(f"guest command timed out after {timeout:.0f}s: {script}") from exc
        if check and result.returncode != 0:
            raise VmError(
                f"guest command failed ({result.returncode}): {script}\n"
                f"{result.stderr if isinstance(result.stderr, str) else result.stderr.decode()}"
            )
        return result

    def run(
        self, *argv: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run one command (an argv list, quoted for the remote shell) in the guest."""
        return self.sh(shlex.join(argv), check=check, timeout=timeout)

    def wait_ssh(self, deadline: float) -> None:
        while True:
            with contextlib.suppress(VmError):
                if self.sh("true", check=False, timeout=30).returncode == 0:
                    return
            if not self.running():
                raise VmError(
                    f"QEMU exited during boot ({self.ended}); console:\n{self.console_tail()}"
                )
            if time.monotonic() > deadline:
                raise VmError(f"no SSH from the guest in time; console:\n{self.console_tail()}")
            time.sleep(1)

    def boot_id(self) -> str:
        return self.sh("cat /proc/sys/kernel/random/boot_id").stdout.strip()

    def reboot(self, timeout: float = BOOT_TIMEOUT) -> float:
        """Reboot the guest and wait for a new boot id; returns the seconds it took."""
        started = time.monotonic()
        before = self.boot_id()
        # Detached: an SSH session open across the reboot hangs (user-mode networking keeps the
        # host side of the TCP connection open).
        self.sh("nohup sh -c 'sleep 1; systemctl reboot' >/dev/null 2>&1 &", timeout=30)
        self.drop_connection()
        self.wait_new_boot(before, started + timeout)
        elapsed = time.monotonic() - started
        log(f"rebooted in {elapsed:.0f}s")
        return elapsed

    def wait_new_boot(self, before: str, deadline: float) -> str:
        """Wait until the guest answers with a boot id other than `before` (also after a reboot
        that something else, e.g. tune, started)."""
        self.drop_connection()
        while True:
            with contextlib.suppress(VmError):
                result = self.sh("cat /proc/sys/kernel/random/boot_id", check=False, timeout=20)
                now = result.stdout.strip()
                if result.returncode == 0 and now and now != before:
                    return now
            if not self.running():
                raise VmError(
                    f"QEMU ended during the reboot ({self.ended}); console:\n{self.console_tail()}"
                )
            if time.monotonic() > deadline:
                raise VmError(f"the guest did not come back; console:\n{self.console_tail()}")
            time.sleep(1)

    def monitor(self, command: str) -> str:
        """One QEMU human-monitor command, e.g. `hostfwd_remove n0 tcp:127.0.0.1:PORT` to cut
        SSH off from the host side."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(self.monitor_socket))
            sock.sendall(command.encode() + b"\n")
            time.sleep(0.5)
            return sock.recv(65536).decode(errors="replace")


class Slot:
    """One VM at a time on this machine: `vm.json` in the cache names the live one and the
    process that owns it (a test session, or the detached supervisor of `vm up`). A VM whose
    owner died without stopping it is stopped by the next claimer.
    """

    def __init__(self, cache: Path = CACHE) -> None:
        cache.mkdir(parents=True, exist_ok=True)
        self.lock = cache / "vm.lock"
        self.state = cache / "vm.json"

    def read(self) -> dict[str, object] | None:
        try:
            data = json.loads(self.state.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def claim(self, vm: Vm, wait: float = 1800) -> None:
        """Record `vm` as this process's, once no live VM holds the slot (waiting up to `wait`
        seconds for another test session; never for a `vm up`)."""
        deadline = time.monotonic() + wait
        while True:
            with _flock(self.lock):
                held = self.read()
                owner = held.get("owner") if held else None
                if held is None or not (isinstance(owner, int) and pid_alive(owner)):
                    if held is not None:
                        self._stop_stale(held)
                    self.write(vm, os.getpid())
                    return
                if held.get("detached"):
                    raise VmError(
                        f"a VM started by `vm up` is running ({held['run_dir']}); "
                        "stop it with `python -m tests.e2e.vm down`"
                    )
            if time.monotonic() > deadline:
                raise VmError(f"another test session holds the VM slot: {held}")
            time.sleep(5)

    def write(self, vm: Vm, owner: int, detached: bool = False) -> None:
        record = {"run_dir": str(vm.run_dir), "owner": owner, "detached": detached}
        self.state.write_text(json.dumps(record))

    def release(self, vm: Vm) -> None:
        with _flock(self.lock):
            held = self.read()
            if held is not None and held.get("run_dir") == str(vm.run_dir):
                self.state.unlink(missing_ok=True)

    @staticmethod
    def _stop_stale(held: dict[str, object]) -> None:
        stale = Vm.attach(held)
        if stale.pid() is not None:
            log(f"stopping a VM left behind by a dead session: {stale.run_dir}")
        if stale.run_dir.name.startswith(RUN_PREFIX):
            stale.stop()


def up(image: GuestImage, slot: Slot) -> str:
    """Boot a VM that outlives this process: a detached child supervises its reboots."""
    image.ensure()
    vm = Vm(image.disk)
    slot.claim(vm, wait=0)
    try:
        vm.start(supervise=False)
    except BaseException:
        vm.stop()
        slot.release(vm)
        raise
    child = os.fork()
    if child == 0:  # the supervisor: detached from the terminal, gone when the VM is
        os.setsid()
        with open(vm.run_dir / "supervisor.log", "ab") as out:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
        try:
            vm.supervise()
        finally:
            os._exit(0)
    slot.write(vm, child, detached=True)
    return vm.ssh_command()


def _ssh_config_of(held: dict[str, object]) -> Path:
    return Path(str(held["run_dir"])) / "ssh_config"


def preflight() -> GuestImage:
    """The image to boot, or Unavailable with the reason this host cannot run the e2e tests."""
    if os.environ.get("TUNE_E2E") == "0":
        raise Unavailable("e2e tests disabled by TUNE_E2E=0")
    missing = _missing(["qemu-system-x86_64", "ssh", "ssh-keygen", "debugfs", "cp"])
    if missing:
        raise Unavailable(
            f"needs {', '.join(missing)} (apt-get install qemu-system-x86 ...; see .ci/run)"
        )
    image = GuestImage()
    if not image.is_cached():
        image.check_buildable()
    return image


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.e2e.vm", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("command", choices=["build", "up", "down", "status"])
    args = parser.parse_args(argv)
    try:
        image = preflight()
        if args.command == "build":
            print(image.ensure())
            return 0
        slot = Slot(image.cache)
        if args.command == "status":
            held = slot.read()
            owner = held.get("owner") if held else None
            supervised = isinstance(owner, int) and pid_alive(owner)
            if held is None or not (supervised or Vm.attach(held).running()):
                print("no VM")
            else:
                print(f"ssh -F {_ssh_config_of(held)} {HOST_NAME}")
            return 0
        if args.command == "down":
            held = slot.read()
            if held is None:
                print("no VM")
                return 0
            Vm.attach(held).stop()
            slot.state.unlink(missing_ok=True)
            print("stopped")
            return 0
        print(up(image, slot))
        return 0
    except (Unavailable, VmError) as exc:
        print(f"e2e: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
