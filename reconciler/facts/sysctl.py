"""Kernel parameters under /proc/sys, named as `sysctl` names them: dotted, with a `/` standing
for a dot inside one component (`net.ipv4.conf.eth0/100.rp_filter`), as in sysctl.conf."""

from __future__ import annotations

ROOT = "/proc/sys"


def path_of(key: str) -> str:
    return ROOT + "/" + "/".join(part.replace("/", ".") for part in key.split("."))


def key_of(path: str) -> str:
    return ".".join(p.replace(".", "/") for p in path[len(ROOT) + 1 :].split("/"))
