"""tune's decoding of PCI configuration space against lspci's, on pciutils' own test dumps of
real machines (tests/corpus/pciutils): for every function in every dump, MaxReadReq, the link's
speed and width (capable and trained), whether it has a link at all, Relaxed Ordering, and the
Access Control Services capability and control (found by walking the extended capability list),
as `lspci -F DUMP -vvv` prints them. Then what `tune plan` says of those functions: a function
read whole that has no link is never "needs root" nor "reseat the card"."""

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
    relaxed_ordering: bool | None
    acs: tuple[str, str] | None  # ACSCap, ACSCtl


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
        relaxed = re.search(r"DevCtl:.*\n\s+RlxdOrd([+-])", block)
        acs = re.search(r"ACSCap:\s+(.*)\n\s+ACSCtl:\s+(.*)", block)
        decoded[address] = Decoded(
            int(mrrs[1]) if mrrs else None,
            (cap[1], int(cap[2])) if cap else None,
            (sta[1], int(sta[2])) if sta else None,
            relaxed[1] == "+" if relaxed else None,
            (acs[1].strip(), acs[2].strip()) if acs else None,
        )
    return decoded


def tune_decodes(config: bytes) -> Decoded:
    cap = pcie.express(config)
    if cap is None:
        return Decoded(None, None, None, None, None)
    found = pcie.acs(config)
    acs = (pcie.acs_flags(found.capability), pcie.acs_flags(found.control)) if found else None
    linked = cap.has_link
    return Decoded(
        cap.max_read_request,
        (cap.link_speed_max or "unknown", cap.link_width_max) if linked else None,
        (cap.link_speed or "unknown", cap.link_width) if linked else None,
        cap.relaxed_ordering,
        acs,
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


def with_word(text: str, address: str, at: int, word: int) -> str:
    """The dump with the 16-bit word at `at` of `address`'s config space set to `word`."""
    row = at & ~0xF
    lines, current = [], None
    for line in text.splitlines():
        if header := HEADER.match(line):
            current = header[1]
        hexline = HEX.match(line.strip())
        if current == address and hexline and int(hexline[1], 16) == row:
            data = bytearray(bytes.fromhex(hexline[2]))
            data[at - row : at - row + 2] = word.to_bytes(2, "little")
            line = f"{hexline[1]}: {data.hex(' ')}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_the_corpus_has_functions_with_acs() -> None:
    texts = [gzip.decompress(d.read_bytes()).decode() for d in DUMPS]
    with_acs = [c for t in texts for c in functions(t).values() if pcie.acs(c)]
    assert len(with_acs) == 13


@pytest.mark.skipif(LSPCI is None, reason="needs lspci (apt pciutils; .ci/run installs it)")
@pytest.mark.parametrize("control", [0x0000, 0x001D, 0x002C, 0x007F, 0xFF80])
def test_tune_reads_every_acs_control_word_as_lspci_does(tmp_path: Path, control: int) -> None:
    # The dumps' ports all have ACS off: the same bytes with other control words, each decoded
    # by lspci, prove the offset and every bit.
    for dump in DUMPS:
        text = gzip.decompress(dump.read_bytes()).decode()
        for address, config in functions(text).items():
            if pcie.acs(config) is None:
                continue
            acs = pcie.acs(config)
            assert acs is not None
            changed = with_word(text, address, acs.offset + pcie.ACS_CONTROL, control)
            plain = tmp_path / "dump"
            plain.write_text(changed)
            short = address.removeprefix("0000:")
            oracle = {a.removeprefix("0000:"): d for a, d in lspci(plain).items()}[short]
            found = pcie.acs(functions(changed)[address])
            assert found is not None and found.control == control
            assert oracle.acs == (pcie.acs_flags(found.capability), pcie.acs_flags(control))


@pytest.mark.skipif(LSPCI is None, reason="needs lspci (apt pciutils; .ci/run installs it)")
@pytest.mark.parametrize("dump", DUMPS[::4], ids=lambda d: d.name.removesuffix(".gz"))
def test_the_relaxed_ordering_write_is_what_lspci_reads(tmp_path: Path, dump: Path) -> None:
    # The masked write `CAP_EXP+8.w=V:0010` applied to each function's Device Control, both
    # ways: lspci sees RlxdOrd flip and every other DevCtl field stay.
    text = gzip.decompress(dump.read_bytes()).decode()
    before = lspci_of(tmp_path, text)
    for address, config in functions(text).items():
        cap = pcie.express(config)
        if cap is None:
            continue
        flipped = cap.device_control ^ pcie.RELAXED_ORDERING
        after = lspci_of(tmp_path, with_word(text, address, cap.offset + pcie.DEVCTL, flipped))
        short = address.removeprefix("0000:")
        assert after[short].relaxed_ordering is (not cap.relaxed_ordering)
        assert after[short].max_read_request == before[short].max_read_request


def lspci_of(tmp_path: Path, text: str) -> dict[str, Decoded]:
    plain = tmp_path / "dump"
    plain.write_text(text)
    return {a.removeprefix("0000:"): d for a, d in lspci(plain).items()}


def test_a_config_read_without_the_extended_space_says_so() -> None:
    text = gzip.decompress((CORPUS / "tree-asus-p6t6.gz").read_bytes()).decode()
    config = next(c for c in functions(text).values() if pcie.acs(c))
    assert pcie.extended_readable(config)
    assert not pcie.extended_readable(config[: pcie.CONVENTIONAL_BYTES])
    assert pcie.acs(config[: pcie.CONVENTIONAL_BYTES]) is None


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
