"""Kernel parameters under /proc/sys, named as `sysctl` names them. As procps' sysctl(8) and
systemd-sysctl read a name (`slashdot`, `sysctl_normalize`), its first separator decides: a
dot makes it the dotted form, where `/` stands for a dot inside one component
(`net.ipv4.conf.eth0/100.rp_filter`); a slash makes it a path below /proc/sys, where dots are
part of names (`net/ipv4/conf/eth0.100/rp_filter`)."""

from __future__ import annotations

import re

ROOT = "/proc/sys"
_DOTTED = str.maketrans("./", "/.")


def path_of(key: str) -> str:
    first = re.search(r"[./]", key)
    if first is not None and first.group() == "/":
        return f"{ROOT}/{key}"
    return f"{ROOT}/{key.translate(_DOTTED)}"


def key_of(path: str) -> str:
    """The dotted name of a path below /proc/sys."""
    return path[len(ROOT) + 1 :].translate(_DOTTED)
