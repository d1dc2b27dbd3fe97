"""Application clocks (`gpus` `application_clocks`) through both engines: set with `nvidia-smi
-ac MEMORY,GRAPHICS`, read back from their own query, undone with `-rac` where the GPU ran its
defaults and with `-ac` and the prior pair where it did not; a second apply changes nothing and
rollback gives the query's answer back byte for byte. On the three real captures (drivers 590
and 595, which answer them deprecated) a profile that asks for them gets one note per entry and
no change."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import PROJECT, profile, write
from small_host import CLOCKS_HEADER, GPU_HEADER, clocks_line, gpu_line, tree

from reconciler.apply.work import prepare
from reconciler.facts import nvidia_smi
from reconciler.hosts import recorded
from reconciler.hosts.directory import SnapshotHost
from reconciler.kinds.gpus import DEPRECATED
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile

from .drive import Engine

BUSES = ("00000000:17:00.0", "00000000:3D:00.0")
PROFILE = "name: clocks\ngpus:\n  all: {application_clocks: {memory: 877, graphics: 1530}}\n"
CAPTURES = sorted((PROJECT / "tests/corpus/nvidia-smi").glob("*.query-gpu.csv"))


def answer(root: Path, query: tuple[str, ...], text: str | bytes) -> None:
    where = recorded.where(query)
    write(root, f"{where}/status", "0\n")
    write(root, f"{where}/stdout", text)


def clocks_host(root: Path) -> Path:
    """Two GPUs: the first at its default application clocks, the second at 877,1380 MHz."""
    answer(root, nvidia_smi.QUERY, GPU_HEADER + "".join(gpu_line(b, "Enabled") for b in BUSES))
    answer(
        root,
        nvidia_smi.CLOCKS_QUERY,
        CLOCKS_HEADER + clocks_line(BUSES[0]) + clocks_line(BUSES[1], 877, 1380),
    )
    return root


def test_application_clocks_are_set_read_back_and_restored(engine: Engine, tmp_path: Path) -> None:
    root = clocks_host(tmp_path / "host")
    before = tree(root)
    text = profile(tmp_path, PROFILE)
    work = engine.prepare(root, text, with_persistence=False)
    assert [(s.id, s.undo[0].describe()) for s in work.steps] == [
        (f"gpu:{BUSES[0]}:application_clocks", f"run nvidia-smi -i {BUSES[0]} -rac"),
        (f"gpu:{BUSES[1]}:application_clocks", f"run nvidia-smi -i {BUSES[1]} -ac 877,1380"),
    ]
    assert engine.apply(root, text, with_persistence=False) is not None
    clocks = root / recorded.where(nvidia_smi.CLOCKS_QUERY).lstrip("/") / "stdout"
    assert clocks.read_text() == CLOCKS_HEADER + "".join(clocks_line(b, 877, 1530) for b in BUSES)
    assert engine.apply(root, text, with_persistence=False) is None
    (done,) = engine.rollback(root)
    assert done.result.failures == []
    assert tree(root) == before


def test_application_clocks_persist_in_the_boot_time_unit(tmp_path: Path) -> None:
    """NVML forgets them at a reboot or a driver reload, as the power limit."""
    root = clocks_host(tmp_path / "host")
    loaded = load_profile(profile(tmp_path, PROFILE))
    unit = next(
        c.desired
        for c in make_plan(loaded, observe(SnapshotHost(root), loaded.profile, True)).changes
        if c.target == "/etc/systemd/system/tune-gpus.service"
    )
    assert isinstance(unit, tuple)
    assert [line for line in unit if line.startswith("ExecStart=")] == [
        f"ExecStart=/usr/bin/nvidia-smi -i {bus} -ac 877,1530" for bus in BUSES
    ]


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name.split("__")[1])
def test_a_driver_that_deprecated_them_gets_one_note_per_entry(
    tmp_path: Path, capture: Path
) -> None:
    """The real captures hold every field: both queries are answered with their bytes, read by
    the header's names."""
    root = tmp_path / "host"
    for query in (nvidia_smi.QUERY, nvidia_smi.CLOCKS_QUERY):
        answer(root, query, capture.read_bytes())
    (gpu,) = nvidia_smi.parse(capture.read_text())
    text = PROFILE + f'  "{gpu.bus_id}": {{application_clocks: {{memory: 1, graphics: 2}}}}\n'
    loaded = load_profile(profile(tmp_path, text))
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, False), False)
    assert plan.changes == ()
    # The GPU's own entry wins over `all`, which then applies to no GPU: one note, for it.
    assert [(n.about, DEPRECATED in n.message) for n in plan.notes] == [(f"gpu:{gpu.bus_id}", True)]
    host = SnapshotHost(root)
    assert prepare(host, loaded, runtime_only=True, with_persistence=True).steps == ()


def test_an_entry_for_every_gpu_gets_one_note_not_one_per_gpu(tmp_path: Path) -> None:
    root = tmp_path / "host"
    answer(root, nvidia_smi.QUERY, GPU_HEADER + "".join(gpu_line(b) for b in BUSES))
    answer(root, nvidia_smi.CLOCKS_QUERY, CLOCKS_HEADER + "".join(clocks_line(b, 0) for b in BUSES))
    loaded = load_profile(profile(tmp_path, PROFILE))
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, False), False)
    assert plan.changes == ()
    assert [(n.about, DEPRECATED in n.message) for n in plan.notes] == [("gpu:all", True)]


def test_a_driver_that_refuses_the_clocks_query_says_why_and_keeps_the_other_settings(
    tmp_path: Path,
) -> None:
    """A driver that dropped the fields fails the clocks query (nvidia-smi exits 2 for a field
    it does not know); the main query and its settings are unaffected."""
    root = tmp_path / "host"
    answer(root, nvidia_smi.QUERY, GPU_HEADER + gpu_line(BUSES[0]))
    where = recorded.where(nvidia_smi.CLOCKS_QUERY)
    write(root, f"{where}/status", "2\n")
    write(root, f"{where}/stdout", "")
    text = PROFILE.replace("{application_clocks", "{persistence: true, application_clocks")
    loaded = load_profile(profile(tmp_path, text))
    plan = make_plan(loaded, observe(SnapshotHost(root), loaded.profile, False), False)
    assert [c.id for c in plan.changes] == [f"gpu:{BUSES[0]}:persistence"]
    assert [n.message.split(" Skipped:")[0] for n in plan.notes] == [
        f"GPU {BUSES[0]}'s application_clocks cannot be read: nvidia-smi failed here "
        "(exit status 2)."
    ]
