"""LXC containers that serve from GPUs: locked-memory limit and NVIDIA device access.

```yaml
lxc:
  - container: "101"             # Proxmox: /etc/pve/lxc/101.conf
    memlock: unlimited           # lxc.prlimit.memlock
    nvidia_devices: true         # devices.allow for every NVIDIA char major in /proc/devices,
                                 # mount.entry for every /dev/nvidia* node
  - path: /var/lib/lxc/infer/config
    memlock: {value: unlimited, priority: P0, reason: "NCCL and RDMA pin host memory"}
```
Which allow lines are NVIDIA's: those for a major /proc/devices lists as `nvidia*`, for 195 (the
fixed NVIDIA frontend), and, in a container that mounts `/dev/nvidia*`, those for a dynamic
major that no device has any more; the last kind is what a kernel or driver upgrade leaves
behind, and it goes. Every other allow line is left alone.

Which mount entries are NVIDIA's: those that bind a node directly under /dev whose name starts
with `nvidia`. The desired ones bind each `/dev/nvidia*` node that exists on the host
(`create=file`, a directory such as nvidia-caps `create=dir`); one for a node that no longer
exists goes. Every other mount entry is left alone.

Each file is read and written in its own syntax: Proxmox's `key: value` in `/etc/pve`, LXC's
`lxc.key = value` in `/var/lib/lxc`, `/etc/lxc` and, elsewhere, whichever the file already
holds. Lines are compared as LXC reads them: a mount entry is an fstab line (`X`, `X 0 0` and
`X` with other blanks are one mount) whose options are a set (`bind,optional,create=file` and
`create=file,bind,optional` are one mount), an allow rule is its type, major:minor and access (a
trailing `# note` is ignored), a limit is the value LXC holds (`unlimited`, `-1`,
`unlimited:unlimited` and `18446744073709551615` are all `unlimited`; `65536:65536` is `65536`),
shown and written as LXC prints it; a line that already says what is wanted keeps its bytes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from ..core.changes import Change, Note, Outcome, Phase, Priority
from ..core.errors import HostError
from ..core.files import Files, Request
from ..core.schema import After, invalid
from ..facts import lxc as fmt
from ..steps.ops import Need, Probe, PutFile, Read, Require, Step
from .base import BootCheck, Kind, Meta, Strict, entry, missing_note, safe

ContainerId = safe(r"[0-9]{1,9}", "container id", '"101"')
ConfigPath = safe(r"(?!.*/\.\.?(/|$))/[A-Za-z0-9_./-]+", "config path", "/var/lib/lxc/x/config")
Memlock = safe(
    r"(unlimited|[0-9]+)(:(unlimited|[0-9]+))?", "memlock limit", "unlimited, 65536 or soft:hard"
)


@dataclass(frozen=True, kw_only=True)
class LxcEntry(Strict):
    container: ContainerId | None = None  # type: ignore[valid-type]
    path: ConfigPath | None = None  # type: ignore[valid-type]
    memlock: entry(Memlock) | None = None  # type: ignore[valid-type]
    nvidia_devices: entry(bool) | None = None  # type: ignore[valid-type]

    def __post_init__(self) -> None:
        if (self.container is None) == (self.path is None):
            raise ValueError("give exactly one of container (a Proxmox id) or path")

    @property
    def name(self) -> str:
        return self.container if self.container is not None else str(self.path)

    @property
    def config(self) -> str:
        return fmt.proxmox_config(self.container) if self.container else str(self.path)


def _each_config_once(entries: list[LxcEntry]) -> list[LxcEntry]:
    """Two entries for one config would plan two edits of the same lines, the second made
    against the text the first replaces: say so instead."""
    seen: dict[str, int] = {}
    for at, item in enumerate(entries, start=1):
        config = posixpath.normpath(item.config)
        if config in seen:
            raise invalid(
                "config_twice",
                "{config} is given twice (entries {first} and {second}): one entry per container",
                config=config,
                first=seen[config],
                second=at,
            )
        seen[config] = at
    return entries


class Lxc(Kind[list[LxcEntry]]):
    section = "lxc"
    spec_type = Annotated[list[LxcEntry], After(_each_config_once)]
    kind = "lxc"
    phase = Phase.REBOOT
    reads = "`/etc/pve/lxc/ID.conf` (main section), `/proc/devices`, the names in `/dev/nvidia*`"
    compared = "NVIDIA allow lines, NVIDIA mount entries, each as a sorted list"
    noun = "containers"
    entry_per_subject = True  # an entry names its container
    takes_effect = "restart the container"

    def request(self, spec: list[LxcEntry]) -> Request:
        nodes = [fmt.NVIDIA_NODES] if any(_wants_devices(e) for e in spec) else []
        configs = [e.config for e in spec]
        return Request.of(fmt.PROC_DEVICES, nodes=nodes, edited=configs)

    def compare(self, spec: list[LxcEntry], files: Files) -> Outcome:
        outcome = Outcome()
        devices = files.text(fmt.PROC_DEVICES) or ""
        for item in spec:
            text = files.text(item.config)
            if text is not None:  # absent: a note, as in LXC's own places (apply refuses)
                _refuse_foreign(item, text)
            config = _read(item, text)
            # No config: no such container on this host, the one rule for a missing knob.
            missing = text is None and item.config not in files.errors
            if text is None:
                said = f"{item.config} does not exist on this host."
                if item.config in files.errors:
                    said = f"{item.config} cannot be read ({files.errors[item.config]})."
                said = missing_note(said, _strictest(item)) if missing else said
                outcome.notes.append(Note(said, f"lxc:{item.name}"))
            self._unreadable_notes(item, config, outcome)
            if item.memlock is not None:
                current = None if text is None else _memlock(config)
                outcome.changes.append(
                    self._change(
                        item,
                        config,
                        fmt.MEMLOCK,
                        current,
                        _wanted_memlock(item.memlock.value),
                        item.memlock,
                        missing,
                    )
                )
            if item.nvidia_devices is not None and item.nvidia_devices.value:
                nodes = files.node_paths(fmt.NVIDIA_NODES)
                lines = fmt.device_lines(config, devices, nodes)
                for key, (now, desired) in lines.items():
                    found = None if text is None else tuple(now)
                    change = self._change(
                        item, config, key, found, tuple(desired), item.nvidia_devices, missing
                    )
                    outcome.changes.append(change)
                self._device_notes(item, text, devices, lines[fmt.ALLOW][0], outcome)
                self._mount_notes(item, devices, nodes, lines, outcome)
        return outcome

    def _unreadable_notes(self, item: LxcEntry, config: fmt.Config, outcome: Outcome) -> None:
        """LXC refuses a whole config for one line it cannot read: the container then does not
        start, whatever tune writes (Proxmox only warns, and skips the line)."""
        if config.syntax is not fmt.Syntax.LXC:
            return
        for bad in config.unreadable:
            outcome.notes.append(
                Note(
                    f"{item.config} line {bad.line + 1} is not one LXC reads ({bad.message}); "
                    f"LXC refuses to start the container until it is `lxc.KEY = VALUE`.",
                    f"lxc:{item.name}",
                )
            )

    def _device_notes(
        self, item: LxcEntry, text: str | None, devices: str, current: list[str], outcome: Outcome
    ) -> None:
        nvidia = fmt.nvidia_majors(devices)
        if not nvidia:
            outcome.notes.append(
                Note(
                    "/proc/devices lists no NVIDIA character device: is the driver loaded?",
                    f"lxc:{item.name}",
                )
            )
        for major, name in sorted(nvidia.items()):
            if text is not None and fmt.allow_line(major) not in current:
                outcome.notes.append(
                    Note(
                        f"{name} is now major {major}; {item.config} does not allow it.",
                        f"lxc:{item.name}",
                    )
                )
        for line in current:
            allowed = fmt.rule_major(line)
            if allowed is not None and allowed not in nvidia:
                outcome.notes.append(
                    Note(
                        f"{item.config} allows major {allowed}, which no NVIDIA device has now "
                        "(stale after a kernel or driver upgrade).",
                        f"lxc:{item.name}",
                    )
                )

    def _mount_notes(
        self,
        item: LxcEntry,
        devices: str,
        nodes: tuple[str, ...],
        lines: dict[str, tuple[list[str], list[str]]],
        outcome: Outcome,
    ) -> None:
        if fmt.MOUNT not in lines:
            if fmt.nvidia_majors(devices):
                outcome.notes.append(
                    Note(
                        f"no {fmt.NVIDIA_NODES} node exists yet (the driver creates them on first "
                        f"use, or nvidia-modprobe does); {item.config} mount entries left as they "
                        "are.",
                        f"lxc:{item.name}",
                    )
                )
            return
        present = {node.rstrip("/") for node in nodes}
        for line in lines[fmt.MOUNT][0]:
            source = fmt.mount_source(line)
            if source not in present:
                outcome.notes.append(
                    Note(
                        f"{item.config} mounts {source}, which does not exist on this host now.",
                        f"lxc:{item.name}",
                    )
                )

    def _change(
        self,
        item: LxcEntry,
        config: fmt.Config,
        key: str,
        current: str | tuple[str, ...] | None,
        desired: str | tuple[str, ...],
        meta: Meta,
        missing: bool,
    ) -> Change:
        lines = [desired] if isinstance(desired, str) else list(desired)
        restart = f"pct reboot {item.container}" if item.container else "restart the container"
        fix = (
            f"in {item.config} set "
            + "; ".join(config.syntax.line(key, v).rstrip("\n") for v in lines)
            + f" (main section), then {restart}"
        )
        return self.change(
            f"{item.name}:{key}",
            current,
            desired,
            meta,
            setting=key,
            subject=item.name,
            fix=fix,
            missing=missing,
        )

    def step(self, spec: list[LxcEntry], change: Change, files: Files) -> Step:
        """Edits of one config are cumulative: the k-th change of a file writes the first k
        edits, so undoing in reverse order passes through every earlier state exactly."""
        name = change.subject
        item = next(e for e in spec if e.name == name)
        prior = files.read(item.config)
        if prior is None:
            raise HostError(f"{change.id} cannot be made: {item.config} does not exist.")
        text = prior.decode("utf-8", "replace")
        _refuse_foreign(item, text)
        config = _read(item, text)
        devices = files.text(fmt.PROC_DEVICES) or ""
        edits = _edits(item, config, devices, files.node_paths(fmt.NVIDIA_NODES))
        keys = [key for key, _, _ in edits]
        upto = keys.index(change.setting)
        before, after = text, text
        for index, (key, owned, lines) in enumerate(edits[: upto + 1]):
            if index == upto:
                before = after
            after = fmt.replace_key(fmt.parse(after, config.syntax), key, owned, lines)
        probe = Probe(item.config, Read.TEXT)
        return Step.of(
            change,
            probe=probe,
            expect=after,
            restored=before,
            do=(PutFile(item.config, after.encode()),),
            undo=(PutFile(item.config, prior if upto == 0 else before.encode()),),
            requires=(Require(Need.WRITABLE, item.config),),
        )

    # Per container config, the NVIDIA majors its allow lines grant.
    after_boot_value = list[int]
    pending_field = "majors"

    def after_boot(self, step: Step) -> dict[str, Any]:
        if not step.target.endswith(fmt.ALLOW):
            return {}
        lines = step.desired if isinstance(step.desired, tuple) else ()
        found = (fmt.rule_major(line) for line in lines)
        return {step.probe.path: sorted(m for m in found if m is not None)}

    def after_boot_request(self, expected: Mapping[str, Any]) -> Request:
        return Request.of(fmt.PROC_DEVICES)

    def verify_after_boot(self, expected: Mapping[str, Any], files: Files) -> BootCheck:
        """Each container's allowed majors are the NVIDIA majors the new boot gave the driver
        (`/proc/devices`): a driver update can move them."""
        nvidia = fmt.nvidia_majors(files.text(fmt.PROC_DEVICES) or "")
        names = ", ".join(f"{name} is {major}" for major, name in sorted(nvidia.items()))
        done = BootCheck()
        for config, majors in expected.items():
            if sorted(nvidia) == majors:
                done.held.append(f"{config} allows the NVIDIA majors {majors}")
            else:
                done.failed.append(
                    f"{config} allows majors {majors} but /proc/devices now says "
                    f"{names or 'no NVIDIA'}"
                )
        return done

    def containers_to_restart(self, spec: list[LxcEntry]) -> list[str]:
        return [entry.config for entry in spec]


def _refuse_foreign(item: LxcEntry, config: str | None) -> None:
    """A `path:` outside LXC's and Proxmox's directories is edited only when the host already
    has it and it reads as a container config: `path: /etc/passwd` passes the profile's
    checks, and an appended `lxc.prlimit.memlock` line would corrupt it."""
    if fmt.is_standard_place(item.config):
        return
    where = "LXC's or Proxmox's directories (/var/lib/lxc, /etc/pve, /etc/lxc)"
    if config is None:
        raise HostError(
            f"lxc {item.config}: no such file, and a config outside {where} is edited only "
            "when it exists."
        )
    line = fmt.foreign_line(config)
    if line is not None:
        what = f"line {line} is neither" if line else "it holds neither"
        raise HostError(
            f"lxc {item.config} is not an LXC container config ({what} `lxc.KEY = VALUE` nor "
            f"`key: value`); outside {where} tune edits only files that read as one."
        )


Edit = tuple[str, frozenset[str] | None, list[str]]


def _strictest(item: LxcEntry) -> Meta:
    """One note speaks for a container's settings: `required` when any of them is."""
    settings = (item.memlock, item.nvidia_devices)
    return Meta(required=any(m is not None and m.required for m in settings))


def _memlock(config: fmt.Config) -> str | None:
    """The locked-memory limit LXC holds, as LXC prints it (a value it refuses as written)."""
    value = fmt.prlimit(config, fmt.MEMLOCK)
    return None if value is None else fmt.meaning(fmt.MEMLOCK, value)


def _wanted_memlock(value: str) -> str:
    """The profile's limit as LXC prints it: `unlimited:unlimited` is `unlimited`, the value
    tune writes, and what a config that says it in any other spelling already holds."""
    return fmt.meaning(fmt.MEMLOCK, value)


def _wants_devices(item: LxcEntry) -> bool:
    return item.nvidia_devices is not None and item.nvidia_devices.value


def _read(item: LxcEntry, text: str | None) -> fmt.Config:
    """The config as its reader takes it; an absent one as an empty one of its syntax."""
    return fmt.parse(text or "", fmt.syntax_of(item.config, text))


def _edits(item: LxcEntry, config: fmt.Config, devices: str, nodes: tuple[str, ...]) -> list[Edit]:
    """The edits `item` needs on `config`, in the order `compare` lists its changes."""
    edits: list[Edit] = []
    if item.memlock is not None:
        wanted = _wanted_memlock(item.memlock.value)
        if _memlock(config) != wanted:
            edits.append((fmt.MEMLOCK, None, [wanted]))
    if _wants_devices(item):
        for key, (current, desired) in fmt.device_lines(config, devices, nodes).items():
            if current != desired:
                edits.append((key, frozenset(current), desired))
    # The plan's order (priority, then this order) is the order apply makes them in.
    metas = {
        fmt.MEMLOCK: item.memlock,
        fmt.ALLOW: item.nvidia_devices,
        fmt.MOUNT: item.nvidia_devices,
    }
    return sorted(edits, key=lambda e: list(Priority).index(_priority(metas[e[0]])))


def _priority(meta: Meta | None) -> Priority:
    return meta.priority if meta is not None else Priority.P1


KIND = Lxc()
