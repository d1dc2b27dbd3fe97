"""What a run needs of the host, checked before its first write: the journal's directory, each
step's requirements (a writable path, a command, a loadable module), on a host tune runs
commands on directly. A remote host checks the same requirements in its script
(`apply.sh_engine`), with the same sentences (`apply.messages`).
"""

from __future__ import annotations

from ..hosts.base import Host
from ..steps.ops import Need, Require, Step
from .journal import RUNS
from .messages import unmet_message

NO_JOURNAL = f"{RUNS} is not writable, so tune cannot keep its journal there."


def unloadable_here(host: Host, modules: tuple[str, ...]) -> dict[str, str]:
    """`ModuleCheck` on a host tune runs commands on directly (this machine, a snapshot)."""
    said = {name: _modprobe_said(host, name) for name in modules}
    return {name: line for name, line in said.items() if line is not None}


def _modprobe_said(host: Host, module: str) -> str | None:
    """None when `modprobe --dry-run` can load `module`, else the first line it printed."""
    done = host.run(["modprobe", "--dry-run", module])
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0].strip() if lines else "modprobe failed"


def preflight(host: Host, steps: tuple[Step, ...] | list[Step]) -> list[str]:
    """Every requirement of every step, checked once, before the first write."""
    problems = []
    if not host.writable(RUNS):
        problems.append(NO_JOURNAL)
    checked: set[Require] = set()
    for step in steps:
        for need in step.requires:
            if need in checked:
                continue
            checked.add(need)
            problem = _unmet(host, need, step)
            if problem:
                problems.append(problem)
    return problems


def _unmet(host: Host, need: Require, step: Step) -> str | None:
    if need.need is Need.WRITABLE:
        met = host.writable(need.arg)
    elif need.need is Need.COMMAND:
        met = host.has_command(need.arg)
    else:
        said = _modprobe_said(host, need.arg)
        return None if said is None else "".join(unmet_message(need, step, said))
    return None if met else "".join(unmet_message(need, step, ""))
