"""What the lock's record says of the run holding it: a run pushed over SSH names the machine it
was pushed from; a run of this machine's own `tune` (a pull timer's apply, through the local sh
executor) names only its command. Found by the e2e pull test: a pull's lock said "pushed from"
its own host."""

from __future__ import annotations

import socket

from reconciler.apply.journal import Run
from reconciler.apply.sh_script import holder_line, rollback_script
from reconciler.hosts.local import LocalShell
from reconciler.hosts.shell import ShellHost


def test_a_local_run_names_its_command_a_pushed_one_also_where_from() -> None:
    pushed_from = f", pushed from {socket.gethostname()}"
    assert pushed_from in holder_line(pushed=True)
    assert pushed_from not in holder_line(pushed=False)
    assert "HOLDER='tune " in holder_line(pushed=False)
    assert ShellHost.pushed is True
    assert LocalShell.pushed is False


def test_the_rollback_script_says_the_same() -> None:
    run = Run(run_id="20261207T000000Z-000000")
    assert "pushed from" not in rollback_script(run, pushed=False)
    assert "pushed from" in rollback_script(run, pushed=True)
