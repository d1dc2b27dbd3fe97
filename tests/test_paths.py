"""Glob matching over an observation's paths: the literal-prefix shortcut (`matching`) finds
exactly what matching each path (`path_matches`) finds, and a file written into a plan's view
of the host (`with_file`) joins or leaves the globs it matches."""

from __future__ import annotations

import fnmatch
import random

import pytest

from reconciler.core.files import Files
from reconciler.core.paths import matching, overlay_order, path_matches
from reconciler.facts.cmdline import with_file

PATHS = [
    "/etc/default/grub",
    "/etc/default/grub.d/50-cloud.cfg",
    "/etc/default/grub.d/99-tune.cfg",
    "/etc/default/grub.d/sub/x.cfg",
    "/etc/default/grub.dx/a.cfg",
    "/sys/class/net/eth0/mtu",
    "/sys/class/net/eth[0/mtu",
    "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
    "/sys/devices/system/cpu/cpu12/cpufreq/scaling_governor",
    "/sys/devices/system/cpu/cpufreq/boost",
]


@pytest.mark.parametrize(
    "pattern",
    [
        "/etc/default/grub.d/*.cfg",
        "/etc/default/grub*/*.cfg",
        "/etc/default/grub",
        "/sys/class/net/*/mtu",
        "/sys/class/net/eth[0/mtu",  # an unclosed bracket is literal for fnmatch
        "/sys/class/net/eth[0-9]/mtu",
        "/sys/devices/system/cpu/cpu?/cpufreq/scaling_governor",
        "/sys/devices/system/cpu/cpu*/cpufreq/*",
        "/*/default/grub",
        "*",
    ],
)
def test_matching_finds_what_path_matches_finds(pattern: str) -> None:
    assert matching(pattern, PATHS) == [p for p in PATHS if path_matches(pattern, p)]


def per_component(pattern: str, path: str) -> bool:
    """The definition: fnmatch on each component, as many components in both."""
    patterns, parts = pattern.split("/"), path.split("/")
    return len(patterns) == len(parts) and all(map(fnmatch.fnmatchcase, parts, patterns))


def test_path_matches_is_fnmatch_per_component() -> None:
    """path_matches runs one regex over the whole path: on random globs (brackets, negations,
    ranges, stars next to slashes) and paths it answers as fnmatch per component does."""
    draw = random.Random(19)
    for _ in range(20000):
        pattern = "".join(draw.choices("ab/*?[]!-", k=draw.randint(0, 9)))
        path = "".join(draw.choices("ab/-[]!", k=draw.randint(0, 9)))
        assert path_matches(pattern, path) == per_component(pattern, path), (pattern, path)


def test_a_star_never_crosses_a_slash() -> None:
    assert matching("/etc/default/grub.d/*", PATHS) == [
        "/etc/default/grub.d/50-cloud.cfg",
        "/etc/default/grub.d/99-tune.cfg",
    ]


def test_a_written_or_removed_file_changes_the_globs_it_matches() -> None:
    # A dot file, read as a file of its own: the host's glob (a shell's) does not list it.
    contents = {p: b"x\n" for p in [*PATHS, "/etc/default/grub.d/.hidden.cfg"]}
    glob = "/etc/default/grub.d/*.cfg"
    expanded = ("/etc/default/grub.d/50-cloud.cfg", "/etc/default/grub.d/99-tune.cfg")
    files = Files(contents, {glob: expanded, "/sys/class/net/*/mtu": ()})
    written = with_file(files, "/etc/default/grub.d/60-new.cfg", b"y\n")
    assert written.glob(glob) == (
        "/etc/default/grub.d/50-cloud.cfg",
        "/etc/default/grub.d/60-new.cfg",
        "/etc/default/grub.d/99-tune.cfg",
    )
    # A glob keeps what the host's expansion found (here nothing, and no dot file above), not
    # every file read whose name it would match: grub-mkconfig's shell glob skips dot files.
    assert written.glob("/sys/class/net/*/mtu") == ()
    removed = with_file(written, "/etc/default/grub.d/50-cloud.cfg", None)
    assert removed.glob(glob) == (
        "/etc/default/grub.d/60-new.cfg",
        "/etc/default/grub.d/99-tune.cfg",
    )
    assert files.glob(glob) == (
        "/etc/default/grub.d/50-cloud.cfg",
        "/etc/default/grub.d/99-tune.cfg",
    )


def test_overlay_order_sorts_by_name_and_an_earlier_directory_hides_a_later_one() -> None:
    dirs = ("/etc/modprobe.d", "/run/modprobe.d", "/usr/lib/modprobe.d")
    paths = [
        "/usr/lib/modprobe.d/50-nvidia.conf",
        "/usr/lib/modprobe.d/10-a.conf",
        "/etc/modprobe.d/50-nvidia.conf",
        "/run/modprobe.d/90-b.conf",
    ]
    assert overlay_order(dirs, paths) == [
        "/usr/lib/modprobe.d/10-a.conf",
        "/etc/modprobe.d/50-nvidia.conf",
        "/run/modprobe.d/90-b.conf",
    ]
