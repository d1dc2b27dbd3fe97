"""Which CPUs the interrupts of selected PCI devices go to.

```yaml
irq_affinity:
  - select: {vendor: 0x15b3, class: 0x0200}     # as `pci` selects: ConnectX Ethernet
    cpus: local                                 # the CPUs of the device's NUMA node
    priority: P1
    reason: "completions handled on the NIC's own socket"
  - select: {vendor: 0x10de, class: 0x0302}
    cpus: 0-7                                   # or an explicit cpulist
    irqbalance: ban                             # irqbalance leaves these IRQs alone
```
Every IRQ of a matched function (its MSI/MSI-X vectors, else its legacy line) gets the list in
`/proc/irq/N/smp_affinity_list`, compared as a set of CPUs. `local` needs the firmware to say
where the device hangs off (`numa_node` -1 is a note, not a guess). A managed IRQ, whose CPUs
its driver chose (NVMe's), refuses the write with EIO: apply skips it and says so, as for any
IRQ the kernel does not let user space move. IRQ affinity does not survive a reboot or a driver
reload (the IRQs are numbered anew when the driver loads), so tune writes no boot-time file for
it: run `tune apply` again after either; `tune check` shows the IRQs that moved.

irqbalance, when it runs, moves them back: the plan says so. `irqbalance: ban` bans the
IRQs of the entry's devices from it, by device address, so the ban holds across driver reloads
and reboots: tune writes its policy script `/etc/tune/irqbalance-policy` (`ban=true` for those
addresses) and a drop-in `irqbalance.service.d/91-tune-irqbalance.conf` that starts irqbalance
as its unit does plus `--policyscript`, then runs `systemctl daemon-reload` and `systemctl
try-restart irqbalance.service` (a restart only if it runs). The distribution's environment
file is not touched. Without irqbalance installed it is a note; where irqbalance already has a
policy script of its administrator's (irqbalance keeps only the last), a note says which file
gives it, and tune writes nothing. Or disable irqbalance whole:
`services: {irqbalance.service: {state: disabled}}`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from ..core.changes import Change, Note, Outcome, Phase
from ..core.errors import HostError
from ..core.files import Files, Request
from ..facts import irq, irqbalance, systemd
from ..facts.numa import format_list, node_cpus, parse_list
from ..facts.pci import PciDevice, Selector, numa_node, pci_devices, request_devices
from ..steps.ops import Command, Need, Read, Require, Step
from .base import Kind, Meta, attribute_step, file_step, missing_note, safe_scalar
from .pci import no_match, no_match_note

LOCAL = "local"
CpusSpec = safe_scalar(
    rf"{LOCAL}|[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*",
    "CPU list (local, or a cpulist of numbers and ranges)",
    "local, or 0-23,48-71",
)

NOT_PERSISTED = (
    "IRQ affinity does not survive a reboot or a reload of the driver (its IRQs are numbered "
    "anew): run tune apply again after either; tune check shows IRQs that moved."
)
IRQBALANCE = (
    "irqbalance is active: it moves IRQs to CPUs of its choosing every 10 seconds and will undo "
    "this. Fix: `irqbalance: ban` on this entry (its devices' IRQs, by address, survive driver "
    "reloads), or disable irqbalance (services: {irqbalance.service: {state: disabled}})."
)
NOT_INSTALLED = (
    "irqbalance is not installed on this host (no irqbalance.service): there is nothing to ban "
    "these IRQs from."
)
NO_EXEC_START = (
    "irqbalance.service has no ExecStart= to add tune's policy script to: its IRQs are not banned."
)
BAN = "ban"
OWN_POLICY = (
    "{path} already gives irqbalance a policy script of its own (--policyscript or -l), and "
    "irqbalance keeps only the last one it is given: tune does not replace it. Ban these "
    "devices' IRQs in that script (print ban=true for them), or remove it there."
)
UNBANNED = "no irq_affinity entry bans its devices' IRQs from irqbalance any more"
RELOAD = Command(("systemctl", "daemon-reload"))
RESTART = Command(("systemctl", "try-restart", irqbalance.UNIT))


@dataclass(frozen=True, kw_only=True)
class IrqEntry(Meta):
    select: Selector
    cpus: CpusSpec  # type: ignore[valid-type]
    irqbalance: Literal["ban"] | None = field(
        default=None,
        metadata={
            "description": "ban: irqbalance leaves the IRQs of the selected devices alone "
            "(a policy script by device address, which survives driver reloads)"
        },
    )

    def __post_init__(self) -> None:
        if self.cpus != LOCAL and not parse_list(self.cpus):
            raise ValueError(f"cpus {self.cpus!r} has a range that runs backwards")


class IrqAffinity(Kind[list[IrqEntry]]):
    section = "irq_affinity"
    spec_type = list[IrqEntry]
    kind = "irq_affinity"
    phase = Phase.RUNTIME
    reads = (
        "`/sys/bus/pci/devices/*/{msi_irqs/*,irq,numa_node}`, "
        "`/sys/devices/system/node/node*/cpulist`, `/proc/irq/*/smp_affinity_list`; "
        "`irqbalance: ban`: irqbalance.service's unit and drop-ins, `/etc/tune/irqbalance-policy`"
    )
    compared = (
        "per IRQ, as a set of CPUs (`0-3,8` and `8,0,1,2,3` alike); a managed IRQ the kernel "
        "refuses (EIO) is skipped; not persisted: IRQs are numbered anew at each driver load; "
        "the ban's policy script and drop-in as whole files"
    )
    noun = "IRQs"

    def request(self, spec: list[IrqEntry]) -> Request:
        edited = Request.of(edited=[irqbalance.POLICY, irqbalance.DROPIN])
        return request_devices() | irq.request() | irqbalance.request() | edited

    def compare(self, spec: list[IrqEntry], files: Files) -> Outcome:
        outcome = Outcome()
        devices = pci_devices(files)
        online = irq.online_cpus(files)
        nodes = node_cpus(files)
        planned: dict[int, str] = {}  # IRQ -> the device whose entry planned it first
        banned: dict[str, IrqEntry] = {}  # address -> the first entry that bans its IRQs
        for item in spec:
            about = f"irq_affinity:{item.select.describe()}"
            matched = [d for d in devices if item.select.matches(d)]
            if not matched:
                target = item.select.describe()
                outcome.changes.append(
                    self._change(target, None, item.cpus, item, subject="", missing=True)
                )
                outcome.notes.append(no_match_note(self.kind, item.select, item))
                continue
            before = len(planned)
            for device in matched:
                desired, why_not = self._cpus(item, device, files, nodes, online)
                if desired is None:
                    outcome.notes.append(Note(why_not, f"irq_affinity:{device.address}"))
                    continue
                self._device(item, device, desired, files, planned, outcome)
                if item.irqbalance == BAN:
                    banned.setdefault(device.address, item)
            if len(planned) == before:
                continue  # no IRQ of this entry's: nothing to persist or to keep irqbalance off
            outcome.notes.append(Note(NOT_PERSISTED, about))
            if irq.irqbalance_active(files) and item.irqbalance != BAN:
                outcome.notes.append(Note(IRQBALANCE, about))
        ban = self._ban(spec, banned, files)
        ban.extend(outcome)
        return ban

    def _ban(self, spec: list[IrqEntry], banned: dict[str, IrqEntry], files: Files) -> Outcome:
        """tune's policy script and drop-in: present while an entry bans a device, removed
        (tune owns both) when none does. Planned first, so that irqbalance leaves the IRQs
        alone before they move."""
        outcome = Outcome()
        asked = [item for item in spec if item.irqbalance == BAN]
        present = {p: files.text(p) for p in (irqbalance.POLICY, irqbalance.DROPIN)}
        if not asked and not any(t is not None for t in present.values()):
            return outcome
        about = "irq_affinity:irqbalance"
        unit = systemd.resolve(files, irqbalance.UNIT)
        if not unit.exists:
            if asked:
                outcome.notes.append(Note(NOT_INSTALLED, about))
            return outcome
        start = irqbalance.exec_start(files, unit)
        if start is None:
            outcome.notes.append(Note(NO_EXEC_START, about))
            return outcome
        theirs = irqbalance.own_policy(files, unit)
        if theirs is not None and asked:
            outcome.notes.append(Note(OWN_POLICY.format(path=theirs), about))
            return outcome
        wanted = _ban_files(start, banned)
        meta = next(iter(banned.values()), asked[0] if asked else Meta(reason=UNBANNED))
        for path, text in wanted.items():
            current, desired = _lines(present[path]), _lines(text)
            outcome.changes.append(
                self.change(
                    path,
                    current,
                    desired,
                    replace(meta, optional=False),
                    setting="irqbalance's banned IRQs",
                    subject=path,
                )
            )
        return outcome

    def _cpus(
        self,
        item: IrqEntry,
        device: PciDevice,
        files: Files,
        nodes: dict[int, frozenset[int]],
        online: frozenset[int] | None,
    ) -> tuple[str | None, str]:
        """The cpulist `device`'s IRQs should get, or None and why there is none."""
        if item.cpus == LOCAL:
            node = numa_node(files, device)
            if node is None:
                return None, (
                    f"{device.address}: the firmware does not say which NUMA node it is attached "
                    "to (numa_node -1), so cpus: local has no CPUs; tune does not guess. Give "
                    "an explicit cpulist for it."
                )
            cpus = nodes.get(node, frozenset())
            if not cpus:
                return None, f"{device.address}: NUMA node {node} lists no CPUs."
        else:
            cpus = frozenset(parse_list(item.cpus))
        if online is not None and not cpus <= online:
            return None, (
                f"{device.address}: CPUs {format_list(cpus - online)} of {item.cpus} are not "
                f"online on this host (online: {format_list(online)}); nothing is written."
            )
        return format_list(cpus), ""

    def _device(
        self,
        item: IrqEntry,
        device: PciDevice,
        desired: str,
        files: Files,
        planned: dict[int, str],
        outcome: Outcome,
    ) -> None:
        address = device.address
        numbers = irq.device_irqs(files, address)
        if not numbers:
            said = _no_irqs(address)
            outcome.changes.append(
                self._change(f"{address}:irqs", None, desired, item, subject="", missing=True)
            )
            outcome.notes.append(Note(missing_note(said, item), f"irq_affinity:{address}"))
            return
        for number in numbers:
            if number in planned:
                # A legacy line shared by two functions, or two entries selecting one device.
                said = (
                    f"IRQ {number} of {address} is also {planned[number]}'s; "
                    "the first entry that selects it sets it."
                )
                outcome.notes.append(Note(said, f"irq_affinity:{address}"))
                continue
            planned[number] = address
            path = irq.affinity_path(number)
            cpus = irq.affinity(files, number)
            current = None if cpus is None else format_list(cpus)
            missing = cpus is None and path not in files.errors
            outcome.changes.append(
                self._change(
                    f"{address}:irq{number}",
                    current,
                    desired,
                    item,
                    subject=f"irq{number}",
                    missing=missing,
                    fix=f"echo {desired} > {path}",
                )
            )
            if cpus is None:
                error = files.errors.get(path)
                what = "does not exist" if error is None else f"cannot be read ({error})"
                said = f"{path} {what} on this host."
                outcome.notes.append(
                    Note(missing_note(said, item) if missing else said, f"irq_affinity:{address}")
                )

    def _change(
        self,
        target: str,
        current: str | None,
        desired: str,
        item: IrqEntry,
        *,
        subject: str,
        missing: bool,
        fix: str = "",
    ) -> Change:
        # Always optional: the kernel refuses a managed IRQ (EIO) and that is this host's
        # driver's choice, not a failed run.
        return self.change(
            target,
            current,
            desired,
            replace(item, optional=True),
            setting=f"IRQs of {item.select.describe()}",
            subject=subject,
            fix=fix,
            missing=missing,
        )

    def step(self, spec: list[IrqEntry], change: Change, files: Files) -> Step:
        if change.target in (irqbalance.POLICY, irqbalance.DROPIN):
            return self._ban_step(spec, change, files)
        subject, _, name = change.target.rpartition(":")
        if not subject:
            raise HostError(f"{change.id} cannot be set: {no_match(change.target)}")
        if not name.removeprefix("irq").isdigit():
            raise HostError(f"{change.id} cannot be set: {_no_irqs(subject)}")
        number = int(name.removeprefix("irq"))
        return attribute_step(change, irq.affinity_path(number), files, Read.WORDS)

    def _ban_step(self, spec: list[IrqEntry], change: Change, files: Files) -> Step:
        path = change.target
        if path in files.errors:
            raise HostError(f"{change.id}: {path} cannot be read ({files.errors[path]}).")
        desired = None if change.desired is None else "".join(f"{x}\n" for x in change.desired)
        prior = files.read(path)
        after = None if desired is None else desired.encode()
        if path == irqbalance.POLICY:
            # irqbalance asks the script about each IRQ when it starts: a new list takes effect
            # at a restart, which the drop-in's step makes where the drop-in is not there yet.
            tool: tuple[Command, ...] = (
                (RESTART,) if files.text(irqbalance.DROPIN) is not None else ()
            )
            mode = 0o755
        else:
            tool, mode = (RELOAD, RESTART), 0o644
        step = file_step(change, path, prior, after, tool, mode=mode)
        needs = (Require(Need.COMMAND, "systemctl"),) if tool else ()
        return replace(step, requires=(*step.requires, *needs))


def _lines(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(text.splitlines())


def _ban_files(start: str, banned: dict[str, IrqEntry]) -> dict[str, str | None]:
    """What tune's two files hold: the policy script and the drop-in that starts irqbalance
    with it while a device is banned; neither when none is."""
    if not banned:
        return {irqbalance.POLICY: None, irqbalance.DROPIN: None}
    return {
        irqbalance.POLICY: irqbalance.policy_script(banned),
        irqbalance.DROPIN: irqbalance.dropin_text(start),
    }


def _no_irqs(address: str) -> str:
    return f"{address} has no IRQs (no driver bound, or none requested one)."


KIND = IrqAffinity()
