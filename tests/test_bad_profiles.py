"""Broken profiles, usage errors and unreadable hosts: one precise message with its place,
its exit code, and never a traceback."""

from __future__ import annotations

import gzip
import io
import re
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import BLACKWELL, UNTUNED, run_tune, write


@dataclass(frozen=True)
class Bad:
    """A broken profile `p.yaml` (and the parents it names) and the first error expected:
    `fragment` in the message at `where` = (file, line, column)."""

    id: str
    text: str
    fragment: str
    where: tuple[str, int, int]
    parents: dict[str, str] = field(default_factory=dict)


P = "p.yaml"
BAD = [
    Bad(
        "yaml-unclosed-flow",
        "name: x\nsysctl:\n  vm.swappiness: [1\n",
        "YAML syntax error: expected ',' or ']', but got '<stream end>' (while parsing a flow "
        "sequence at line 3, column 18)",
        (P, 4, 1),
    ),
    Bad("yaml-tab-indent", "name: x\n\tsysctl: {}\n", "YAML syntax error", (P, 2, 1)),
    Bad(
        "yaml-bad-indent",
        "name: x\nsysctl:\n  vm.swappiness: 1\n   vm.dirty_ratio: 2\n",
        "YAML syntax error",
        (P, 4, 18),
    ),
    Bad(
        "yaml-undefined-alias",
        "name: x\nsysctl:\n  vm.swappiness: *b\n",
        "undefined alias",
        (P, 3, 18),
    ),
    Bad(
        "duplicate-key",
        "name: x\nsysctl:\n  vm.swappiness: 1\n  vm.swappiness: 2\n",
        'duplicate key "vm.swappiness"',
        (P, 4, 3),
    ),
    Bad("empty-file", "", "a profile must be a YAML mapping", (P, 1, 1)),
    Bad("comments-only", "# nothing yet\n", "a profile must be a YAML mapping", (P, 1, 1)),
    Bad("top-level-list", "- name: x\n", "a profile must be a YAML mapping", (P, 1, 1)),
    Bad("top-level-scalar", "blackwell\n", "a profile must be a YAML mapping", (P, 1, 1)),
    Bad("missing-name", "description: x\nsysctl: {}\n", "missing required key 'name'", (P, 1, 1)),
    Bad("unsafe-name", "name: x;reboot\n", "'x;reboot' is not a valid profile name", (P, 1, 7)),
    Bad(
        "unknown-section",
        "name: x\nsysctls:\n  vm.swappiness: 1\n",
        "unknown key 'sysctls'; did you mean 'sysctl'?",
        (P, 2, 1),
    ),
    Bad(
        "unknown-nested-key",
        "name: x\ncpu:\n  governer: performance\n",
        "unknown key 'governer'; did you mean 'governor'?",
        (P, 3, 3),
    ),
    Bad(
        "unknown-entry-key",
        "name: x\nsysctl:\n  vm.swappiness: {value: 1, reasn: x}\n",
        "unknown key 'reasn'; did you mean 'reason'?",
        (P, 3, 29),
    ),
    Bad(
        "section-not-mapping",
        "name: x\nsysctl: 5\n",
        "sysctl: Input should be a valid dictionary",
        (P, 2, 9),
    ),
    Bad(
        "list-for-a-value",
        "name: x\nsysctl:\n  vm.swappiness: [1, 2]\n",
        "sysctl.vm.swappiness: expected a number or a string, not a list",
        (P, 3, 18),
    ),
    Bad(
        "bool-for-a-sysctl",
        "name: x\nsysctl:\n  vm.swappiness: true\n",
        "not a boolean (write 1 or 0)",
        (P, 3, 18),
    ),
    Bad(
        "bool-for-an-int",
        "name: x\npci:\n  - select: {vendor: 0x10de}\n    max_read_request: true\n",
        "pci.0.max_read_request: Input should be a valid integer",
        (P, 4, 23),
    ),
    Bad(
        "fraction-for-a-value",
        "name: x\nsysctl:\n  vm.swappiness: 0.5\n",
        "not a fraction",
        (P, 3, 18),
    ),
    Bad(
        "mrrs-not-power-of-two",
        "name: x\npci:\n  - select: {vendor: 0x10de}\n    max_read_request: 3000\n",
        "power of two in 128..4096, not 3000",
        (P, 4, 23),
    ),
    Bad(
        "mrrs-too-large",
        "name: x\npci:\n  - select: {vendor: 0x10de}\n    max_read_request: 8192\n",
        "power of two in 128..4096, not 8192",
        (P, 4, 23),
    ),
    Bad(
        "vendor-out-of-range",
        "name: x\npci:\n  - select: {vendor: 0x10000}\n    max_read_request: 4096\n",
        "pci.0.select.vendor: Input should be less than 65536",
        (P, 3, 22),
    ),
    Bad(
        "empty-selector",
        "name: x\npci:\n  - select: {}\n    max_read_request: 4096\n",
        "select needs at least one of vendor, device, class, class_prefix",
        (P, 3, 13),
    ),
    Bad(
        "link-width-out-of-range",
        "name: x\nchecks:\n  pci_link: {select: {vendor: 0x10de}, width: 64}\n",
        "checks.pci_link.width: Input should be less than or equal to 32",
        (P, 3, 47),
    ),
    Bad(
        "bad-priority",
        "name: x\nsysctl:\n  vm.swappiness: {value: 1, priority: P3}\n",
        "sysctl.vm.swappiness.priority: Input should be 'P0', 'P1' or 'P2'",
        (P, 3, 39),
    ),
    Bad(
        "acs-persist-unknown",
        "name: x\nacs:\n  - select: {vendor: 0x10de}\n    persist: grub\n",
        "acs.0.persist: Input should be 'udev' or 'cmdline'",
        (P, 4, 14),
    ),
    Bad(
        "bad-module-state",
        "name: x\nmodules:\n  nvidia: loadded\n",
        "modules.nvidia: Input should be 'loaded' or 'absent'",
        (P, 3, 11),
    ),
    Bad(
        "bad-kernel-constraint",
        "name: x\nchecks:\n  kernel: '~6.14'\n",
        "'~6.14' is not a valid kernel version constraint",
        (P, 3, 11),
    ),
    Bad(
        "lxc-both-container-and-path",
        "name: x\nlxc:\n  - {container: '101', path: /var/lib/lxc/x/config}\n",
        "give exactly one of container (a Proxmox id) or path",
        (P, 3, 5),
    ),
    Bad(
        "shell-in-sysctl-key",
        "name: x\nsysctl:\n  'vm.swappiness; rm -rf /': 1\n",
        "sysctl: key 'vm.swappiness; rm -rf /' is not a valid sysctl name",
        (P, 3, 3),
    ),
    Bad(
        "command-substitution-in-value",
        "name: x\nsysctl:\n  vm.swappiness: '$(reboot)'\n",
        "'$(reboot)' is not a valid kernel value",
        (P, 3, 18),
    ),
    Bad(
        "backticks-in-value",
        "name: x\nsysfs:\n  /sys/kernel/mm/transparent_hugepage/enabled: '`reboot`'\n",
        "'`reboot`' is not a valid kernel value",
        (P, 3, 48),
    ),
    Bad(
        "dotdot-in-sysfs-path",
        "name: x\nsysfs:\n  /sys/../etc/passwd: x\n",
        "sysfs: key '/sys/../etc/passwd' is not a valid sysfs path",
        (P, 3, 3),
    ),
    Bad(
        "dotdot-through-a-sysctl-key",
        "name: x\nsysctl:\n  kernel.//.//.//.etc.shadow: x\n",
        "key 'kernel.//.//.//.etc.shadow' is not a valid sysctl name",
        (P, 3, 3),
    ),
    Bad(
        "dotdot-in-lxc-path",
        "name: x\nlxc:\n  - {path: /../etc/shadow, memlock: unlimited}\n",
        "'/../etc/shadow' is not a valid config path",
        (P, 3, 12),
    ),
    Bad(
        "shell-in-cmdline-value",
        "name: x\ncmdline:\n  set: {amd_pstate: 'active; reboot'}\n",
        "'active; reboot' is not a valid kernel parameter value",
        (P, 3, 21),
    ),
    Bad(
        "space-in-cmdline-name",
        "name: x\ncmdline:\n  remove: ['quiet splash']\n",
        "cmdline.remove.0: 'quiet splash' is not a valid kernel parameter name",
        (P, 3, 12),
    ),
    Bad(
        "cmdline-value-and-contains",
        "name: x\ncmdline:\n  set:\n    console: {value: tty1, contains: ttyS0}\n",
        "cmdline.set.console: give one of value, contains or exactly, not value and contains",
        (P, 4, 14),
    ),
    Bad(
        "cmdline-exactly-nothing",
        "name: x\ncmdline:\n  set:\n    console: {exactly: []}\n",
        "exactly needs at least one value; to drop every occurrence, list the parameter under "
        "cmdline.remove",
        (P, 4, 14),
    ),
    Bad(
        "shell-in-cmdline-occurrence",
        "name: x\ncmdline:\n  set:\n    console: [tty1, 'ttyS0; reboot']\n",
        "cmdline.set.console.1: 'ttyS0; reboot' is not a valid kernel parameter value",
        (P, 4, 21),
    ),
    Bad(
        "shell-in-container-id",
        "name: x\nlxc:\n  - {container: '101 && reboot'}\n",
        "'101 && reboot' is not a valid container id",
        (P, 3, 17),
    ),
    Bad(
        "newline-in-module-param",
        'name: x\nmodules:\n  nvidia: {value: loaded, params: {NVreg_X: "1\\nreboot"}}\n',
        "is not a valid module parameter value",
        (P, 3, 45),
    ),
    Bad(
        "extends-not-a-path",
        "name: x\nextends: 5\n",
        "extends: expected a path or a list of paths",
        (P, 2, 10),
    ),
    Bad(
        "missing-parent",
        "name: x\nextends: nothere.yaml\n",
        "no such profile 'nothere.yaml'",
        (P, 2, 10),
    ),
    Bad(
        "cyclic-extends",
        "name: a\nextends: b.yaml\n",
        "extends cycle: a.yaml -> b.yaml -> a.yaml",
        ("b.yaml", 2, 11),
        {"b.yaml": "name: b\nextends: [a.yaml]\n", "a.yaml": "name: a\nextends: b.yaml\n"},
    ),
    Bad(
        "error-in-parent",
        "name: x\nextends: [ok.yaml, base.yaml]\n",
        "sysctl.vm.swappiness.priority: Input should be 'P0', 'P1' or 'P2'",
        ("base.yaml", 3, 40),
        {
            "ok.yaml": "name: ok\n",
            "base.yaml": "name: base\nsysctl:\n  vm.swappiness: {value: 10, priority: P5}\n",
        },
    ),
    Bad(
        "syntax-error-in-parent",
        "name: x\nextends: base.yaml\n",
        "end of stream (while scanning a quoted scalar at line 3, column 18)",
        ("base.yaml", 4, 1),
        {"base.yaml": "name: base\nsysctl:\n  vm.swappiness: 'unterminated\n"},
    ),
    Bad(
        # YAML 1.2 reads an unquoted 020 as 20, where sysctl.conf and the kernel read 16.
        "leading-zero-number",
        "name: x\nsysctl:\n  vm.swappiness: 1\n  vm.dirty_ratio: 020\n",
        "020 is ambiguous: YAML reads an unquoted 020 as 20, the kernel reads it as octal 16; "
        "write the number without leading zeros, or quote it ('020')",
        (P, 4, 19),
    ),
    Bad("not-utf8", "name: x\ndescription: caf\udcff\n", "not UTF-8 text (byte 0xff)", (P, 2, 17)),
    Bad(
        "service-name-with-shell-characters",
        "name: x\nservices:\n  'a;b.service': {limits: {LimitCORE: 0}}\n",
        "'a;b.service' is not a valid systemd unit name",
        (P, 3, 3),
    ),
    Bad(
        "service-limit-not-systemds",
        "name: x\nservices:\n  containerd.service: {limits: {LimitMEMLOCK: unlimited}}\n",
        "'unlimited' is not a valid systemd limit",
        (P, 3, 47),
    ),
    Bad(
        "service-count-limit-with-a-size",
        "name: x\nservices:\n  containerd.service:\n    limits: {LimitNOFILE: 64K}\n",
        "LimitNOFILE=64K: systemd takes a size suffix only for limits in bytes",
        (P, 4, 13),
    ),
    Bad(
        "logind-settings-under-another-unit",
        "name: x\nservices:\n  docker.service:\n    logind: {RemoveIPC: no}\n",
        "docker.service: logind settings belong to systemd-logind.service",
        (P, 3, 3),
    ),
    Bad(
        "gpu-locked-clocks-cannot-be-read-back",
        "name: x\ngpus:\n  all:\n    locked_clocks: {min: 1500, max: 1980}\n",
        "gpus.all: locked_clocks is not a setting tune manages: neither nvidia-smi's query nor "
        "NVML can read locked clocks back",
        (P, 4, 5),
    ),
]

DIAGNOSTIC = re.compile(r"(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<message>.+)")


def write_bad(tmp_path: Path, case: Bad) -> Path:
    for name, text in case.parents.items():
        write(tmp_path, name, text)
    target = tmp_path / ("a.yaml" if "a.yaml" in case.parents else P)
    target.write_bytes(case.text.encode("utf-8", "surrogateescape"))
    return target


def test_there_are_at_least_twenty_broken_profiles() -> None:
    assert len(BAD) >= 20
    assert len({case.id for case in BAD}) == len(BAD)


@pytest.mark.parametrize("command", ["validate", "plan"])
@pytest.mark.parametrize("case", BAD, ids=[case.id for case in BAD])
def test_broken_profile(tmp_path: Path, case: Bad, command: str) -> None:
    path = write_bad(tmp_path, case)
    args = ["plan", path, "--root", UNTUNED] if command == "plan" else ["validate", path]
    result = run_tune(*args)
    assert result.code == 65, result
    assert result.out == ""
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    parsed = [DIAGNOSTIC.fullmatch(line) for line in lines]
    assert all(parsed), f"every line is FILE:LINE:COL: message: {lines}"
    first = parsed[0]
    assert first is not None
    file, line, col = case.where
    where = (Path(first["file"]).name, int(first["line"]), int(first["col"]))
    assert where == (file, line, col), lines[0]
    assert Path(first["file"]).resolve() == (tmp_path / file).resolve()
    assert case.fragment in first["message"], lines[0]


def test_every_error_in_a_profile_is_reported_together(tmp_path: Path) -> None:
    text = "name: x\nsysctl:\n  vm.swappiness: true\ncpu:\n  governer: x\nmodules:\n  a: b\n"
    result = run_tune("validate", write(tmp_path, P, text))
    assert result.code == 65
    assert [line.split(": ")[0].rsplit(":", 2)[1:] for line in result.err.splitlines()] == [
        ["3", "18"],
        ["5", "3"],
        ["7", "6"],
    ]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((), "Usage: tune"),
        (("bogus",), "No such command 'bogus'"),
        (("plan",), "Missing argument 'PROFILE'"),
        (("plan", "no-such-profile.yaml"), "no such file"),
        (("plan", BLACKWELL, "--format", "xml"), "'xml' is not one of"),
        (("plan", BLACKWELL, "--root"), "requires an argument"),
        (("validate", "/"), "is a directory"),
        (("snapshot", BLACKWELL), "Missing option '-o'"),
    ],
)
def test_usage_errors_exit_64(args: tuple[str, ...], fragment: str) -> None:
    result = run_tune(*args)
    assert result.code == 64
    assert fragment in result.err
    assert "Traceback" not in result.err


def test_missing_root_directory_exits_1(tmp_path: Path) -> None:
    result = run_tune("plan", BLACKWELL, "--root", tmp_path / "nothere")
    assert result.code == 1
    assert result.err == f"{tmp_path / 'nothere'}: no such snapshot directory or archive.\n"


def damage_second_header(archive: bytes) -> bytes:
    """A valid gzip of a tar whose second member's header is garbage: tarfile would stop there
    without a word."""
    data = gzip.decompress(archive)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        second = tar.getmembers()[1].offset
    return gzip.compress(data[:second] + b"\x01" * 512 + data[second + 512 :])


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        (lambda data: data[: len(data) // 2], "corrupt or truncated gzip data"),
        (lambda data: data[:40], "corrupt or truncated gzip data"),
        (lambda data: data[:2000] + b"\0" * 100 + data[2100:], "corrupt or truncated gzip data"),
        (lambda data: b"this is not an archive\n" * 40, "not a tar archive"),
        (damage_second_header, "damaged tar header"),
    ],
    ids=["half", "header-only", "zeroed-block", "not-an-archive", "damaged-tar-header"],
)
def test_unreadable_snapshot_archive_exits_1(
    tmp_path: Path, damage: Callable[[bytes], bytes], fragment: str
) -> None:
    good = tmp_path / "good.tar.gz"
    assert run_tune("snapshot", BLACKWELL, "--root", UNTUNED, "-o", good).code == 0
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(damage(good.read_bytes()))
    result = run_tune("plan", BLACKWELL, "--root", bad)
    assert result.code == 1, result
    assert result.out == ""
    assert result.err.startswith(f"{bad}: cannot read snapshot archive (")
    assert fragment in result.err
    assert len(result.err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "No such file or directory"),
        (b"\xffgpu\n", "not UTF-8 text (byte 0xff at offset 0)"),
    ],
    ids=["missing", "not utf-8"],
)
def test_a_file_that_cannot_be_read_is_a_sentence_not_a_python_repr(
    tmp_path: Path, content: bytes | None, reason: str
) -> None:
    """`[Errno 2] No such file or directory: '/x'` and `'utf-8' codec can't decode byte` are
    Python's words: the system's reason ends a sentence that already names the file."""
    inventory = write(tmp_path, "hosts.ini", "[gpu]\ng1\n")
    patterns = tmp_path / "limit.txt"
    if content is not None:
        patterns.write_bytes(content)
    result = run_tune("plan", BLACKWELL, "-i", inventory, "--limit", f"@{patterns}")
    assert (result.code, result.out) == (64, "")
    assert result.err == f"--limit @{patterns}: cannot read the file ({reason}).\n"
