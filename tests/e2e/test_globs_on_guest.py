"""A glob that the host's shell expands out of /sys, read over SSH from a real Debian guest, whose
dash expands `.?` to `..` (issue #15, item 1): tune's read keeps only what stays under /sys.

Validation refuses such a profile; the request here is built directly, as a kind's bug would
build it, so that the guest's side of the read is what is tested.
"""

from __future__ import annotations

from reconciler.core.files import Request
from reconciler.hosts.shell import ReadScript
from reconciler.hosts.ssh import SshSettings, SshSetup
from reconciler.hosts.targets import Target

from . import guest
from .vm import HOST_NAME, Vm

THP = "/sys/kernel/mm/transparent_hugepage/enabled"
SECRET_FILE = "/root/tune-e2e-secret"
SECRET = "TOP-SECRET in the guest\n"


def test_a_dot_glob_read_from_the_guest_never_leaves_sys(vm: Vm) -> None:
    wanted = Request.of(
        THP,
        "/sys/.?/root/tune-e2e-secret",
        "/sys/.?/.?/.?/etc/ssh/ssh_host_ed25519_key",
        "/sys/.*/root/*",
        newest=[("/sys/.?/root/*", 2)],
        nodes=["/sys/.?/root/*"],
    )
    guest.write_file(vm, SECRET_FILE, SECRET, mode="600")
    try:
        # The guest's sh is dash, and it does lead the pattern out of /sys.
        expanded = vm.sh("cd / && echo ./sys/.?/root/tune-e2e-secret").stdout.strip()
        assert expanded == "./sys/../root/tune-e2e-secret"
        host = SshSetup(SshSettings(ssh_config=str(vm.ssh_config))).host(
            Target(HOST_NAME, HOST_NAME)
        )
        try:
            files = host.fetch(wanted)
            answer = host.run_script(ReadScript.of(wanted).text)  # before this side checks
        finally:
            host.close()
    finally:
        vm.run("rm", "-f", SECRET_FILE)
    assert set(files.contents) == {THP}
    assert all(found == () for pattern, found in files.matches.items() if pattern != THP)
    assert all(found == () for found in files.nodes.values())
    assert answer.status == 0
    assert b"TOP-SECRET" not in answer.stdout
    assert b"PRIVATE KEY" not in answer.stdout
    assert b"/../" not in answer.stdout
