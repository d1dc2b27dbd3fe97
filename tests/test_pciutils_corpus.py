"""tune's decoding of PCI configuration space against lspci's, on pciutils' own test dumps of
real machines (tests/corpus/pciutils): for every function in every dump, MaxReadReq, the link's
speed and width (capable and trained), and whether it has a link at all, as `lspci -F DUMP -vvv`
prints them. Then what `tune plan` says of those functions: a function read whole that has no
link is never "needs root" nor "reseat the card"."""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import plan_json, write

from reconciler.facts import pcie

CORPUS = Path(__file__).resolve().parent / "corpus" / "pciutils"
DUMPS = sorted(CORPUS.glob("*.gz"))
HEADER = re.compile(r"^((?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) ")
HEX = re.compile(r"^([0-9a-f]{2,3}): ((?:[0-9a-f]{2} ?)+)$")
LSPCI = shutil.which("lspci")


@dataclass(frozen=True)
class Decoded:
    """What lspci -vvv prints of one function; None where it prints nothing."""

    max_read_request: int | None
    link_capable: tuple[str, int] | None
    link_status: tuple[str, int] | None


def functions(text: str) -> dict[str, bytes]:
    """Each function's address and configuration space, from the hex lines of a dump."""
    found: dict[str, bytearray] = {}
    current = None
    for line in text.splitlines():
        if header := HEADER.match(line):
            current = found.setdefault(header[1], bytearray())
        elif (hexline := HEX.match(line.strip())) and current is not None:
            offset, data = int(hexline[1], 16), bytes.fromhex(hexline[2])
            current[len(current) :] = bytes(max(0, offset + len(data) - len(current)))
            current[offset : offset + len(data)] = data
    return {address: bytes(config) for address, config in found.items()}


def lspci(dump: Path) -> dict[str, Decoded]:
    done = subprocess.run(
        [str(LSPCI), "-F", str(dump), "-vvv"], capture_output=True, text=True, check=True
    )
    decoded = {}
    for block in re.split(r"\n(?=\S)", done.stdout.strip()):
        address = block.split(" ", 1)[0]
        mrrs = re.search(r"MaxReadReq (\d+) bytes", block)
        cap = re.search(r"LnkCap:\s+Port #\d+, Speed (\S+), Width x(\d+)", block)
        sta = re.search(r"LnkSta:\s+Speed ([^,( ]+)(?: \([^)]*\))?, Width x(\d+)", block)
        decoded[address] = Decoded(
            int(mrrs[1]) if mrrs else None,
            (cap[1], int(cap[2])) if cap else None,
            (sta[1], int(sta[2])) if sta else None,
        )
    return decoded


def tune_decodes(config: bytes) -> Decoded:
    cap = pcie.express(config)
    if cap is None:
        return Decoded(None, None, None)
    if not cap.has_link:
        return Decoded(cap.max_read_request, None, None)
    return Decoded(
        cap.max_read_request,
        (cap.link_speed_max or "unknown", cap.link_width_max),
        (cap.link_speed or "unknown", cap.link_width),
    )


def test_the_corpus_is_every_dump_of_pciutils() -> None:
    count = sum(len(functions(gzip.decompress(d.read_bytes()).decode())) for d in DUMPS)
    assert (len(DUMPS), count) == (41, 172)


@pytest.mark.skipif(LSPCI is None, reason="needs lspci (apt pciutils; .ci/run installs it)")
@pytest.mark.parametrize("dump", DUMPS, ids=lambda d: d.name.removesuffix(".gz"))
def test_tune_decodes_every_function_as_lspci_does(tmp_path: Path, dump: Path) -> None:
    text = gzip.decompress(dump.read_bytes()).decode()
    plain = tmp_path / "dump"
    plain.write_text(text)
    oracle = lspci(plain)
    found = {address: tune_decodes(config) for address, config in functions(text).items()}
    # lspci leaves domain 0 out where no function of the dump is in another.
    assert {a.removeprefix("0000:"): d for a, d in found.items()} == {
        a.removeprefix("0000:"): d for a, d in oracle.items()
    }


def sysfs_host(root: Path, dumps: list[Path]) -> dict[str, bytes]:
    """A host whose PCI functions are those of `dumps`, as sysfs shows them to root (ids as
    text, the whole config space in binary); their addresses and config spaces."""
    addresses = {}
    for number, dump in enumerate(dumps):
        text = gzip.decompress(dump.read_bytes()).decode()
        for address, config in functions(text).items():
            # Domains of their own a dump: the same bus numbers recur from dump to dump.
            domain = int(address[:-8] or "0", 16)
            bdf = f"{number * 256 + domain:04x}:{address[-7:]}"
            base = f"/sys/bus/pci/devices/{bdf}"
            write(root, f"{base}/vendor", f"0x{pcie.u16(config, 0):04x}\n")
            write(root, f"{base}/device", f"0x{pcie.u16(config, 2):04x}\n")
            write(root, f"{base}/class", f"0x{pcie.u32(config, 8) >> 8:06x}\n")
            write(root, f"{base}/config", config)
            addresses[bdf] = config
    return addresses


def test_pci_link_remedies_fit_the_function(tmp_path: Path) -> None:
    # Every function of every dump, each selected by its vendor: a link that is there gets
    # checked; none read whole is "needs root"; one without a link (conventional PCI, or
    # inside the root complex, as lspci shows) is a note, never "reseat the card".
    addresses = sysfs_host(tmp_path / "host", DUMPS)
    vendors = sorted({f"0x{pcie.u16(config, 0):04x}" for config in addresses.values()})
    checks = "".join(f"    - {{select: {{vendor: {v}}}, width: 1}}\n" for v in vendors)
    plan = plan_json(tmp_path, tmp_path / "host", f"name: t\nchecks:\n  pci_link:\n{checks}")
    remedies = {c["subject"]: c["remedy"] for c in plan["checks"]}
    notes = " ".join(n["message"] for n in plan["notes"])
    no_link = [a for a in addresses if a not in remedies]
    assert not any("needs root" in r for r in remedies.values())
    assert all(f"{a} " in notes for a in no_link)
    # lspci -vvv prints "Root Complex Integrated Endpoint" for 10 of them, and one collector.
    assert notes.count("is a root-complex integrated endpoint: it has no PCI Express link") == 10
    assert notes.count("is a root-complex event collector") == 1
    # Exactly the functions lspci shows no LnkCap for (the test above).
    assert set(no_link) == {a for a, c in addresses.items() if not tune_decodes(c).link_capable}
    assert len(remedies) + len(no_link) == 172
