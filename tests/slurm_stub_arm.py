"""`tune` with one call replaced, for the programs slurmd runs in tests/test_slurm.py: arming
(`tune apply --reboot-phase --arm`, which another part of the engines work adds) is
`tune apply --reboot-phase` until then: the same boot configuration and pending.json, written
for every boot rather than for one, and no reboot either way. Everything else is tune's."""

from __future__ import annotations

import sys

from reconciler.cli.main import main
from reconciler.engines import slurm


def arm_without_arm(self: slurm.Tune, profile: str, digest: str | None) -> slurm.Ran:
    pin = ["--profile-digest", digest] if digest else []
    argv = [*self.argv, "apply", profile, *pin, "--reboot-phase", "--yes", *self._root()]
    return slurm.run_bounded(argv, slurm.ARM_TIMEOUT, self.run)


if __name__ == "__main__":
    slurm.Tune.arm = arm_without_arm  # type: ignore[method-assign]
    main(sys.argv[1:])
