"""Promotion after a verified boot (`tune apply --reboot` on a try-once boot loader): steps
appended to an applied run, against both engines. A promotion that holds joins the run, which
one rollback then undoes whole; one that fails restores what it wrote and the run's boot
configuration, so that the host boots its prior configuration whatever becomes of tune."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import profile
from small_host import tree
from test_reboot_phase import PROFILE

from reconciler.apply.journal import read_run
from reconciler.core.errors import ApplyFailed
from reconciler.hosts.directory import SnapshotHost
from reconciler.steps.ops import DeleteFile, Probe, PutFile, Read, SetAttr, Step

from .drive import Engine
from .test_reboot_phase import configured, layout

DEFAULT = "/boot/loader/entries/tune-default.conf"
PROMOTE = Step(
    id="cmdline:default",
    kind="cmdline",
    target="default entry",
    prior=None,
    desired="tune",
    probe=Probe(DEFAULT, Read.TEXT),
    expect="title tune\n",
    restored=None,
    do=(PutFile(DEFAULT, b"title tune\n"),),
    undo=(DeleteFile(DEFAULT),),
)
BROKEN = Step(
    id="cmdline:oneshot",
    kind="cmdline",
    target="one-shot entry",
    prior=None,
    desired="0",
    probe=Probe("/sys/firmware/efi/efivars/nosuch", Read.WORDS),
    expect="0",
    restored=None,
    do=(SetAttr("/sys/firmware/efi/efivars/nosuch", "0"),),
    undo=(),
)


def applied(engine: Engine, tmp_path: Path) -> tuple[Path, str, dict[str, bytes]]:
    root = layout(tmp_path, "grubby")
    before = tree(root)
    run_id = engine.apply(
        root, profile(tmp_path, PROFILE), phase="reboot", runtime_only=False, reboot_phase=True
    )
    assert run_id is not None
    return root, run_id, before


def test_a_promotion_joins_the_run_and_one_rollback_undoes_it_all(
    engine: Engine, tmp_path: Path
) -> None:
    root, run_id, before = applied(engine, tmp_path)
    engine.promote(root, run_id, (PROMOTE,))
    assert (root / DEFAULT.lstrip("/")).read_text() == "title tune\n"
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None and run.outcome == "applied"
    assert [step.id for _, step in run.steps][-1] == PROMOTE.id
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == before


def test_a_failed_promotion_restores_the_prior_boot_configuration(
    engine: Engine, tmp_path: Path
) -> None:
    root, run_id, before = applied(engine, tmp_path)
    with pytest.raises(ApplyFailed) as failed:
        engine.promote(root, run_id, (PROMOTE, BROKEN))
    assert str(failed.value) == (
        "apply failed (cmdline:oneshot: /sys/firmware/efi/efivars/nosuch: cannot open for "
        f"writing (No such file or directory).); rolled back 5 writes (run {run_id})."
    )
    assert tree(root) == before
    assert "amd_pstate" not in configured(root)
    run = read_run(SnapshotHost(root), run_id)
    assert run is not None and run.outcome == "boot-rolled-back"
