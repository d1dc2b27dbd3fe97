"""The registry imports a kind's module the first time the kind is used: a plan pays for the
kinds its profile has, not for every kind tune knows. Checked in a fresh interpreter, by what
`sys.modules` holds after `tune plan` (a behaviour, not a timing: benchmarks/plan.py times it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT, write

from reconciler import kinds
from reconciler.kinds.base import Kind

# The modules in sys.modules once `main` has run, as JSON on the last line of stderr.
MODULES_AFTER_MAIN = (
    "import json, sys\n"
    "from reconciler.cli.main import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit:\n"
    "    pass\n"
    "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
)

SYSCTL_ONLY = "name: one-kind\nsysctl:\n  vm.swappiness: 10\n"

# What a local plan never needs, whatever its profile: SSH and its libraries, the comparison
# of saved plans, schema and property-test tools, archives, the fleet's and other commands'
# modules, shell completion, the IRQ facts of a profile without `irq_affinity`.
NEVER_IN_A_PLAN = (
    *("fabric", "paramiko", "invoke", "deepdiff", "hypothesis", "jsonschema", "tarfile"),
    *("click.shell_completion", "reconciler.hosts.archive", "reconciler.hosts.ssh"),
    *("reconciler.hosts.targets", "reconciler.render.fleet", "reconciler.facts.irq"),
    *("reconciler.apply", "reconciler.audit", "reconciler.probes", "reconciler.rollout"),
    "reconciler.steps.records",  # the journal's records: 44 classes, 11 ms to import
)
# And, with the profile's validated form read from the cache, its parser and validator.
NEVER_FROM_THE_CACHE = ("pydantic", "ruamel")


def modules(tmp_path: Path, *args: str, cache: str) -> tuple[list[str], str]:
    """The modules a `tune ARGS` process imported, and what it printed."""
    argv = [sys.executable, "-c", MODULES_AFTER_MAIN, *args]
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "TUNE_CACHE_DIR": cache}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stderr.splitlines()[-1]), done.stdout


def kind_modules(tmp_path: Path, *args: str, cache: str) -> tuple[list[str], str]:
    """The kind modules a `tune ARGS` process imported, and what it printed."""
    found, shown = modules(tmp_path, *args, cache=cache)
    return kinds_of(found), shown


def planned(
    tmp_path: Path, one_kind: tuple[Path, Path], cache: str, *more: str
) -> tuple[list[str], str]:
    """The modules `tune plan` of the one-kind profile imported, and what it printed; with
    `cache`, from a profile cache that an earlier plan filled."""
    profile, root = one_kind
    folder = str(tmp_path / cache) if cache else ""
    args = ["plan", str(profile), "--root", str(root), "--save", str(tmp_path / "plan.json")]
    if cache:
        modules(tmp_path, *args, cache=folder)  # fills the cache
    return modules(tmp_path, *args, *more, cache=folder)


def kinds_of(found: list[str]) -> list[str]:
    prefix = "reconciler.kinds."
    return [m[len(prefix) :] for m in found if m.startswith(prefix)]


def within(module: str, names: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


@pytest.fixture
def one_kind(tmp_path: Path) -> tuple[Path, Path]:
    """A profile of one sysctl, and a host whose value differs."""
    root = tmp_path / "host"
    write(root, "/proc/sys/vm/swappiness", "60\n")
    return write(tmp_path, "one.yaml", SYSCTL_ONLY), root


@pytest.mark.parametrize("cache", ["", "cache"], ids=["validated", "from-the-cache"])
def test_planning_a_profile_of_one_kind_imports_no_other_kind(
    tmp_path: Path, one_kind: tuple[Path, Path], cache: str
) -> None:
    """Validated from its YAML or read back from the profile cache alike: only `sysctl`, and
    `files` (tune's boot-time files, planned for every profile) with `base`, their interface."""
    found, shown = planned(tmp_path, one_kind, cache)
    assert kinds_of(found) == ["base", "files", "sysctl"]
    assert "vm.swappiness" in shown
    bare, _ = planned(tmp_path, one_kind, cache, "--no-persist")
    assert kinds_of(bare) == ["base", "sysctl"]


@pytest.mark.parametrize("cache", ["", "cache"], ids=["validated", "from-the-cache"])
def test_a_local_plan_imports_nothing_it_does_not_use(
    tmp_path: Path, one_kind: tuple[Path, Path], cache: str
) -> None:
    """Each of these once cost every `tune plan` its import (benchmarks/plan.py times it):
    pinned by name, so that a new import at the top of a module on plan's path shows here."""
    found, shown = planned(tmp_path, one_kind, cache)
    assert "vm.swappiness" in shown
    never = NEVER_IN_A_PLAN + (NEVER_FROM_THE_CACHE if cache else ())
    assert [m for m in found if within(m, never)] == []
    # The cache decides what is validated: the run without it did validate, with it did not.
    assert ("pydantic" in found) == (not cache)


def test_a_section_that_derives_kernel_options_brings_the_cmdline_kind(
    tmp_path: Path,
) -> None:
    """`acs` with `persist: cmdline` plans its options through the `cmdline` kind, which the
    profile does not name: the registry imports it for what `acs` asks."""
    profile = write(
        tmp_path,
        "acs.yaml",
        "name: acs\nacs:\n  - select: {vendor: 0x10de}\n    persist: cmdline\n",
    )
    root = tmp_path / "host"
    write(root, "/proc/cmdline", "BOOT_IMAGE=/vmlinuz ro quiet\n")
    args = ["plan", str(profile), "--root", str(root), "--save", str(tmp_path / "plan.json")]
    found, _ = kind_modules(tmp_path, *args, "--no-persist", cache="")
    assert {"acs", "cmdline"} <= set(found)
    assert not {"sysctl", "lxc", "gpus", "services", "hugepages"} & set(found)


def test_each_registry_line_names_its_kind() -> None:
    """A line says what its module's kind says: the kind, its section, the section it derives
    from (what the registry decides by before it imports the module)."""
    for line in kinds.LINES:
        kind = kinds.load(line)
        assert isinstance(kind, Kind)
        assert type(kind).__module__ == f"reconciler.kinds.{line.module}"
        assert (kind.kind, kind.section, kind.parent_section) == (
            line.kind,
            line.section,
            line.parent,
        )
        assert kind.persistence == (not line.section and not line.parent)
    assert len({line.kind for line in kinds.LINES}) == len(kinds.LINES)
