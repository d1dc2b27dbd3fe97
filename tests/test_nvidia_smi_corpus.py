"""The GPU query's parser on nvidia-smi's real output (tests/corpus/nvidia-smi), and the sh
engine's reading of it (lib.sh `reading gpu`) held to the Python one on the same files."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import write
from lab import lab_env

from reconciler.apply.sh_script import LIBRARY
from reconciler.core.files import CommandOutput, Files, Request
from reconciler.facts import nvidia_smi
from reconciler.hosts import recorded
from reconciler.hosts.directory import SnapshotHost
from reconciler.steps.ops import Probe, Read

CORPUS = Path(__file__).resolve().parent / "corpus" / "nvidia-smi"
H200 = CORPUS / "linux-x86_64__nvidia-h200__590.48.01.query-gpu.csv"
GEFORCE = CORPUS / "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.query-gpu.csv"
L40S = CORPUS / "linux-x86_64__nvidia-l40s__595.80.query-gpu.csv"
CAPTURES = (H200, GEFORCE, L40S)


def test_every_field_tune_queries_is_one_nvidia_smi_documents() -> None:
    help_text = (CORPUS / "linux-x86_64__nvidia-h200__590.48.01.help-query-gpu.txt").read_text()
    documented = set(re.findall(r'^"([^"]+)"', help_text, re.MULTILINE))
    assert set(nvidia_smi.FIELDS) <= documented


def test_real_captures_parse_by_the_header_names() -> None:
    (h200,) = nvidia_smi.parse(H200.read_text())
    assert h200.bus_id == "00000000:83:00.0"
    wanted = ("Enabled", "700", "200", "700", "Default", "Enabled", "Enabled")
    fields = (
        nvidia_smi.PERSISTENCE,
        nvidia_smi.POWER_LIMIT,
        nvidia_smi.POWER_MIN,
        nvidia_smi.POWER_MAX,
        nvidia_smi.COMPUTE_MODE,
        nvidia_smi.ECC_CURRENT,
        nvidia_smi.ECC_PENDING,
    )
    assert tuple(nvidia_smi.value(h200, f) for f in fields) == wanted
    (geforce,) = nvidia_smi.parse(GEFORCE.read_text())
    assert nvidia_smi.value(geforce, nvidia_smi.PERSISTENCE) == "Disabled"
    assert nvidia_smi.value(geforce, nvidia_smi.POWER_LIMIT) == "320"
    # A GeForce has no ECC: `[N/A]` is a setting it lacks, not a value.
    assert nvidia_smi.value(geforce, nvidia_smi.ECC_PENDING) is None
    # Deprecated since driver 590: bracketed, so absent.
    assert geforce.get("clocks.applications.graphics") is None


def test_a_bus_id_in_the_kernels_form_names_the_same_gpu() -> None:
    assert nvidia_smi.bus_id("0000:3d:00.0") == "00000000:3D:00.0"
    assert nvidia_smi.bus_id("00000000:3D:00.0") == "00000000:3D:00.0"
    assert nvidia_smi.bus_id("3d:00.0") is None


def test_output_that_is_not_the_query_is_one_sentence() -> None:
    said = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    for output, problem in (
        (CommandOutput(9, said.encode()), "nvidia-smi failed here (exit status 9)."),
        (CommandOutput(0, b"garbage\n1, 2\n"), "nvidia-smi's answer cannot be read: its header"),
        (CommandOutput(0, b""), "nvidia-smi lists no GPU on this host."),
    ):
        reading = nvidia_smi.reading(Files(commands={nvidia_smi.QUERY: output}))
        assert reading.gpus == ()
        assert (reading.problem or "").startswith(problem)


def snapshot_with(root: Path, capture: Path) -> Path:
    answer = CommandOutput(0, capture.read_bytes())
    for path, data in recorded.record(nvidia_smi.QUERY, answer).items():
        write(root, path, data)
    return root


def sh_reading(root: Path, bus: str, field: str) -> str | None:
    script = LIBRARY + f"reading gpu '{bus}' '{field}'\n"
    env = {"PATH": os.environ["PATH"], **lab_env(root)}
    done = subprocess.run(["sh"], input=script.encode(), capture_output=True, env=env)
    return done.stdout.decode() if done.returncode == 0 else None


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name.split("__")[1])
def test_the_sh_engine_reads_each_field_as_the_python_engine(tmp_path: Path, capture: Path) -> None:
    root = snapshot_with(tmp_path / "host", capture)
    output = (
        SnapshotHost(root).fetch(Request.of(commands=[nvidia_smi.QUERY])).output(nvidia_smi.QUERY)
    )
    (gpu,) = nvidia_smi.parse(output.stdout.decode())
    for field in (*nvidia_smi.FIELDS, "clocks.applications.graphics", "no.such.field"):
        python = Probe(gpu.bus_id, Read.GPU, field).value(output.stdout)
        assert sh_reading(root, gpu.bus_id, field) == python, field
    assert sh_reading(root, "00000000:99:00.0", nvidia_smi.PERSISTENCE) is None
