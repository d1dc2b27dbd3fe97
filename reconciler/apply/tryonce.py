"""Try-once boots: boot a new kernel command line once, make it the default only once verified.

With GRUB and `GRUB_DEFAULT=saved`, `grub-reboot ENTRY` makes only the next boot start ENTRY;
any boot after it starts the saved default again. So `tune apply --reboot` does not write the
drop-in at first: it installs `/etc/grub.d/42_tune_try`, a script that `update-grub` runs like
the distribution's own, which prints the first entry of `10_linux` (the newest kernel) with the
new command line under the id `tune-try`, and points `grub-reboot` at it. The default entry
keeps the old line. After the boot, verification passes and the pending record's `promote`
steps make it permanent (try entry removed, the usual drop-in and `update-grub`), appended to
the same run so one `tune rollback` undoes all of it; or it fails, the run's boot configuration
is rolled back and the host already boots the old line again.

With systemd-boot (a loader directory with Type #1 entries on the ESP: /boot/efi/loader,
/efi/loader or /boot/loader, on hosts whose command line is /etc/kernel/cmdline, Proxmox's
proxmox-boot-tool included), the try entry is `loader/entries/tune-try.conf`: a copy of the
default entry (loader.conf's `default`, else the entry of the running kernel) whose `options`
are the new command line, booted once by `bootctl set-oneshot tune-try.conf`. Promotion writes
/etc/kernel/cmdline and runs the refresh tool as the cmdline kind does, and removes the entry.

Where no one-time boot is possible, `Boot.try_once` is None and `Boot.why` says why, so the
confirmation can say so before anything is written.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass

from ..core.changes import Change, Phase
from ..core.files import Files
from ..facts import cmdline as fmt
from ..facts.shell_values import Unknown
from ..kinds import cmdline, named
from ..steps.ops import BootTool, DeleteFile, Need, Op, Probe, PutFile, Read, Require, Step

TRY_ENTRY = "tune-try"
MARKER = fmt.TRY_MARKER
UPDATE_GRUB = BootTool(("update-grub",))
# GRUB reads the entry to boot once from `next_entry` in /boot/grub/grubenv.
FORGET_NEXT = BootTool(("grub-editenv", "-", "unset", "next_entry"))

# Boot tools that write systemd-boot entries from /etc/kernel/cmdline, where a loader directory
# with entries means `bootctl set-oneshot` can boot a copy of the default entry once.
SYSTEMD_BOOT_TOOLS = frozenset({"proxmox-boot-tool", "kernel-cmdline"})
LOOKED_FOR_ENTRIES = ", ".join(f"{d}/entries" for d in fmt.LOADER_DIRS)
NO_ONE_TIME_BOOT = {
    "proxmox-boot-tool": "proxmox-boot-tool regenerates every boot entry from "
    f"/etc/kernel/cmdline and no systemd-boot default entry was found ({LOOKED_FOR_ENTRIES})",
    "kernel-cmdline": "kernel-install writes the default boot entry itself and no "
    f"systemd-boot default entry was found ({LOOKED_FOR_ENTRIES})",
    "grubby": "grubby changes every boot entry at once",
    "proxmox-boot-tool-grub": "proxmox-boot-tool keeps GRUB and its environment block on the "
    "ESPs, where grub-reboot does not write",
}


@dataclass(frozen=True)
class Boot:
    """How the reboot phase of one apply reaches the next boot."""

    try_once: str | None  # the one-time boot mechanism ("grub-reboot", "bootctl"), else None
    why: str  # one line for the confirmation
    now: tuple[Step, ...]  # what the apply run writes before the reboot
    promote: tuple[Step, ...] = ()  # written after the boot is verified, appended to the run


def arrange(steps: tuple[Step, ...], files: Files) -> Boot:
    """The steps of a rebooting apply: with a one-time boot, the command-line steps wait for
    the promotion and a try entry takes their place."""
    line = [s for s in steps if _tried(s)]
    if not line:
        return Boot(None, "no kernel command-line change: the boot itself is not at risk", steps)
    boot = fmt.boot_config(files)
    assert boot is not None  # a cmdline step exists only where a boot configuration does
    others = tuple(s for s in steps if not _tried(s))
    if boot.tool == "grub":
        return _grub(steps, tuple(line), others, files)
    loader = fmt.loader(files) if boot.tool in SYSTEMD_BOOT_TOOLS else None
    if loader is not None:
        return _systemd_boot(tuple(line), others, files, loader)
    return Boot(None, f"not try-once: {NO_ONE_TIME_BOOT[boot.tool]}", steps)


def at_risk(steps: tuple[Step, ...]) -> bool:
    """Whether `steps` change the kernel command line: what a one-time boot would protect."""
    return any(_tried(s) for s in steps)


def _tried(step: Step) -> bool:
    kind = named(step.kind)
    return kind is not None and kind.try_once


def _grub(
    steps: tuple[Step, ...], line: tuple[Step, ...], others: tuple[Step, ...], files: Files
) -> Boot:
    default = fmt.grub_env(files).get("GRUB_DEFAULT")
    if default != "saved":
        said = (
            f"cannot be known ({default})" if isinstance(default, Unknown) else repr(default or "0")
        )
        return Boot(
            None,
            f"not try-once: GRUB_DEFAULT is {said}, not 'saved', so grub-reboot cannot "
            "boot the new command line once; if the host does not come back, it needs its "
            "console",
            steps,
        )
    after = fmt.grub_variables(_after(files, line[-1]))
    # The command-line steps were made only where the line with them is known exactly.
    assert not isinstance(after, Unknown)
    script = entry_script(*after)
    entry = TryEntry(fmt.TRY_SCRIPT, 0o755, entry_cmdline)
    install = entry.step(
        "try-once",
        files.read(fmt.TRY_SCRIPT),
        script,
        do=(UPDATE_GRUB, BootTool(("grub-reboot", TRY_ENTRY))),
        undo=(UPDATE_GRUB, FORGET_NEXT),
    )
    remove = entry.step("try-once-removed", script, None, do=(UPDATE_GRUB,), undo=(UPDATE_GRUB,))
    return Boot(
        "grub-reboot",
        "try-once: grub-reboot boots the new command line once (GRUB_DEFAULT=saved); it "
        "becomes the default only after verification",
        (*others, install),
        (remove, *line),
    )


def _systemd_boot(
    line: tuple[Step, ...], others: tuple[Step, ...], files: Files, loader: fmt.Loader
) -> Boot:
    """A copy of the default entry with the new `options`, booted once by `bootctl
    set-oneshot`; /etc/kernel/cmdline and the default entry wait for the promotion."""
    after = _after(files, line[-1]).value(fmt.KERNEL_CMDLINE) or ""
    text = fmt.try_entry(files.text(loader.default) or "", " ".join(after.split()))
    entry = TryEntry(loader.try_entry, 0o644, _entry_options)
    install = entry.step(
        "try-once",
        files.read(loader.try_entry),
        text.encode(),
        do=(BootTool(("bootctl", "set-oneshot", fmt.TRY_CONF)),),
        # An empty id removes the LoaderEntryOneShot EFI variable.
        undo=(BootTool(("bootctl", "set-oneshot", "")),),
    )
    remove = entry.step("try-once-removed", text.encode(), None, do=(), undo=())
    return Boot(
        "bootctl",
        f"try-once: bootctl set-oneshot boots the new command line once (systemd-boot, "
        f"{fmt.TRY_CONF} copied from {loader.default}); it becomes the default only after "
        "verification",
        (*others, install),
        (remove, *line),
    )


def _entry_options(data: bytes | None) -> str | None:
    return None if data is None else fmt.entry_options(data.decode("utf-8", "replace"))


def entry_script(linux: str, default: str) -> bytes:
    """/etc/grub.d/42_tune_try: the first entry `10_linux` prints for these variables, renamed
    so that `grub-reboot tune-try` finds it. The marker line states the command line it boots
    (a snapshot's emulated reboot reads it)."""
    words = " ".join(fmt.split(f"{linux} {default}"))
    program = (
        "/^menuentry /,/^}/{"
        "s/^menuentry '[^']*'/menuentry 'tune: try once'/;"
        f"s/menuentry_id_option '[^']*'/menuentry_id_option '{TRY_ENTRY}'/;"
        "p;/^}/q;}"
    )
    return (
        "#! /bin/sh\n"
        "# Written by tune apply --reboot: the new kernel command line, for one boot only\n"
        f"# (grub-reboot {TRY_ENTRY}). tune removes it once the boot is verified.\n"
        f"{MARKER}{words}\n"
        'test -x "${0%/*}/10_linux" || exit 0\n'
        f"GRUB_CMDLINE_LINUX={_quoted(linux)} GRUB_CMDLINE_LINUX_DEFAULT={_quoted(default)} "
        f'"${{0%/*}}/10_linux" | sed -n "{program}"\n'
    ).encode()


def entry_cmdline(script: bytes | None) -> str | None:
    """The command line a try entry script boots (its marker line), None without one."""
    for line in (script or b"").decode("utf-8", "replace").splitlines():
        if line.startswith(MARKER):
            return line[len(MARKER) :]
    return None


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _after(files: Files, last: Step) -> Files:
    """`files` as the last command-line step leaves them (the GRUB drop-in, /etc/kernel/cmdline)."""
    for op in last.do:
        if isinstance(op, PutFile | DeleteFile):
            files = fmt.with_file(files, op.path, op.data if isinstance(op, PutFile) else None)
    return files


@dataclass(frozen=True)
class TryEntry:
    """The file that describes the one-time boot, and how to read back the line it boots."""

    path: str
    mode: int
    booted_line: Callable[[bytes | None], str | None]

    def _file(self, data: bytes | None) -> Op:
        return DeleteFile(self.path) if data is None else PutFile(self.path, data, self.mode)

    def step(
        self,
        target: str,
        before: bytes | None,
        after: bytes | None,
        *,
        do: tuple[Op, ...],
        undo: tuple[Op, ...],
    ) -> Step:
        probe = Probe(self.path, Read.TEXT)
        change = Change(
            cmdline.KIND.kind,
            target,
            self.booted_line(before),
            self.booted_line(after),
            Phase.REBOOT,
            reason="boot the new kernel command line once before making it the default",
        )
        return Step.of(
            change,
            probe=probe,
            expect=probe.value(after),
            restored=probe.value(before),
            do=(self._file(after), *do),
            undo=(self._file(before), *undo),
            requires=(Require(Need.WRITABLE, posixpath.dirname(self.path)),),
        )
