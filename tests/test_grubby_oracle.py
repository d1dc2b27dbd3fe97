"""tune's model of grubby (`facts.grubby`, the emulator's `_grubby`) against the real script:
the same files in, `grubby --update-kernel=ALL ...` run by bash (tests/grubby_oracle.py), the
same bytes out; and the default entry as `grubby --default-index` names it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from grubby_oracle import CORPUS, MISSING, grubby, tree, write

from reconciler.facts import grubby as model
from reconciler.hosts.directory import DirectoryHost
from reconciler.hosts.emulate import _grubby as emulated

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

GRUB_CORPUS = Path(__file__).parent / "corpus" / "grub"
ENTRIES = model.ENTRIES
MACHINE = "0123456789abcdef0123456789abcdef"
# Written: a RHEL 9 host as anaconda leaves it (the entry's options literal, GRUB_CMDLINE_LINUX
# in /etc/default/grub), two kernels and the rescue entry, no /etc/kernel/cmdline yet.
RHEL9_OPTIONS = (
    "root=/dev/mapper/rhel-root ro crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M "
    "resume=/dev/mapper/rhel-swap rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap rhgb quiet"
)
RHEL9_DEFAULT_GRUB = (
    "GRUB_TIMEOUT=5\n"
    "GRUB_DISTRIBUTOR=\"$(sed 's, release .*$,,g' /etc/system-release)\"\n"
    "GRUB_DEFAULT=saved\n"
    'GRUB_CMDLINE_LINUX="crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M '
    'resume=/dev/mapper/rhel-swap rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap rhgb quiet"\n'
    "GRUB_ENABLE_BLSCFG=true\n"
)


def entry(version: str, options: str, title: str | None = None) -> str:
    return (
        f"title {title or f'Red Hat Enterprise Linux ({version}) 9.4 (Plow)'}\n"
        f"version {version}\nlinux /vmlinuz-{version}\ninitrd /initramfs-{version}.img\n"
        f"options {options}\ngrub_users $grub_users\ngrub_arg --unrestricted\n"
        "grub_class rhel\n"
    )


def grubenv(**values: str) -> str:
    body = model.GRUBENV_HEADER + "".join(f"{k}={v}\n" for k, v in values.items())
    return body + "#" * (model.GRUBENV_SIZE - len(body))


def rhel9(root: Path, options: str = RHEL9_OPTIONS, saved: str | None = None) -> Path:
    write(root, "/etc/machine-id", MACHINE + "\n")
    write(root, "/etc/redhat-release", "Red Hat Enterprise Linux release 9.4 (Plow)\n")
    write(root, "/etc/default/grub", RHEL9_DEFAULT_GRUB)
    (root / "etc/kernel").mkdir(parents=True, exist_ok=True)
    for version in ("5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64"):
        write(root, f"{ENTRIES}/{MACHINE}-{version}.conf", entry(version, options))
    rescue = f"{MACHINE}-0-rescue"
    write(root, f"{ENTRIES}/{rescue}.conf", entry(rescue, RHEL9_OPTIONS, "Rescue"))
    write(root, model.GRUBENV, grubenv(**({"saved_entry": saved} if saved else {})))
    return root


def rhel8_kernelopts(root: Path, captured: bool = False) -> Path:
    """RHEL 8.4 (tests/corpus/grub/rhel8: the entry and the environment block of a real host).
    The block as captured ends in a line break after its padding, where grub-editenv finds no
    free space; a host's own is padded with `#` to the end, as here unless `captured`."""
    write(root, "/etc/machine-id", MACHINE + "\n")
    write(root, "/etc/default/grub", 'GRUB_CMDLINE_LINUX="crashkernel=auto rhgb quiet"\n')
    (root / "etc/kernel").mkdir(parents=True, exist_ok=True)
    name = "295e1ba1696e4fad9e062f096f92d147-4.18.0-305.el8.x86_64.conf"
    write(root, f"{ENTRIES}/{name}", (GRUB_CORPUS / "rhel8/loader-entry.conf").read_bytes())
    block = (GRUB_CORPUS / "rhel8/grubenv").read_text()
    if not captured:
        block = block.rstrip("#\n") + "\n"
        block += "#" * (model.GRUBENV_SIZE - len(block))
    write(root, model.GRUBENV, block)
    return root


def rhel8_captured(root: Path) -> Path:
    return rhel8_kernelopts(root, captured=True)


def rhel80(root: Path) -> Path:
    """RHEL 8.0 (tests/corpus/grubby/entries: two real entries with literal options, one
    with `$tuned_params` amid them); no /etc/default/grub, no /etc/kernel."""
    write(root, "/etc/machine-id", MACHINE + "\n")
    for path in sorted((CORPUS / "entries").iterdir()):
        write(root, f"{ENTRIES}/{path.name}", path.read_bytes())
    return root


def boot_of(root: Path) -> model.GrubbyFiles:
    found = tree(root)
    paths = [p for p in found if p.startswith(ENTRIES + "/")]
    paths += [model.GRUBENV, model.ETC_DEFAULT_GRUB, model.KERNEL_CMDLINE]
    texts = {p: found[p].decode() if p in found else None for p in paths}
    return model.GrubbyFiles(texts, kernel_dir=(root / "etc/kernel").is_dir())


def predicted(root: Path, remove: str, add: str) -> dict[str, bytes]:
    before = tree(root)
    after = model.update_all(boot_of(root), remove, add)
    out = dict(before)
    out.update({p: t.encode() for p, t in after.files.items() if t is not None})
    return out


def args_of(remove: str, add: str) -> list[str]:
    return [
        "--update-kernel=ALL",
        *([f"--remove-args={remove}"] if remove else []),
        *([f"--args={add}"] if add else []),
    ]


def real(root: Path, remove: str, add: str) -> dict[str, bytes]:
    done = grubby(root, *args_of(remove, add))
    assert done.returncode == 0, done.stderr
    return tree(root)


def options(files: dict[str, bytes], path: str) -> str:
    return model.bls_value(files[path].decode(), "options")


HOSTS = {
    "rhel9": rhel9,
    "rhel8 kernelopts": rhel8_kernelopts,
    "rhel8 kernelopts, block as captured": rhel8_captured,
    "rhel8.0": rhel80,
}
CALLS = [
    ("", "processor.max_cstate=1"),
    ("noapic", ""),
    ("quiet", ""),
    ("", "iommu=pt"),
    ("iommu", ""),
    ("", "rd.lvm.lv=rhel/root"),
    ("", "console=tty0 console=ttyS0,115200n8"),
    ("rhgb quiet", "nosmt"),
    ("console=tty0", ""),
    ("crashkernel", "crashkernel=2G"),
]


@pytest.mark.parametrize("call", CALLS, ids=[" ".join(args_of(*c)[1:]) for c in CALLS])
@pytest.mark.parametrize("host", list(HOSTS))
def test_the_model_leaves_what_the_real_grubby_leaves(
    tmp_path: Path, host: str, call: tuple[str, str]
) -> None:
    root = HOSTS[host](tmp_path / "host")
    try:
        expected = predicted(root, *call)
    except model.GrubbyCannot as exc:
        # The captured block's padding ends in a line break, so grub2-editenv moves that
        # `#` line when a value shrinks: not predicted, and tune then writes nothing.
        assert host == "rhel8 kernelopts, block as captured", exc
        assert "a `#` line amid its variables" in str(exc)
        return
    assert real(root, *call) == expected


def test_iommu_leaves_amd_iommu_alone_and_a_repeated_parameter_ends_once_last(
    tmp_path: Path,
) -> None:
    """The names are anchored at a blank: `iommu` is not found in `amd_iommu=on`. Every
    occurrence of an `--args` name goes and the new word comes last."""
    line = "root=/dev/sda1 amd_iommu=on iommu=soft quiet iommu=nopt intel_iommu=on"
    root = rhel9(tmp_path / "host", options=line)
    path = f"{ENTRIES}/{MACHINE}-5.14.0-503.11.1.el9_5.x86_64.conf"
    after = real(root, "", "iommu=pt")
    assert options(after, path) == "root=/dev/sda1 amd_iommu=on quiet intel_iommu=on iommu=pt"
    root2 = rhel9(tmp_path / "host2", options=line)
    assert predicted(root2, "", "iommu=pt") == after


def test_two_bare_words_side_by_side_need_two_passes(tmp_path: Path) -> None:
    """A bare match takes the blank after it, so `quiet quiet` loses only the first to one
    `--remove-args=quiet`; naming it twice is two passes."""
    root = rhel9(tmp_path / "host", options="root=/dev/sda1 quiet quiet ro")
    path = f"{ENTRIES}/{MACHINE}-5.14.0-503.11.1.el9_5.x86_64.conf"
    once = real(root, "quiet", "")
    assert options(once, path) == "root=/dev/sda1 quiet ro"
    root2 = rhel9(tmp_path / "host2", options="root=/dev/sda1 quiet quiet ro")
    assert predicted(root2, "quiet", "") == once
    root3 = rhel9(tmp_path / "host3", options="root=/dev/sda1 quiet quiet ro")
    twice = real(root3, "quiet quiet", "")
    assert options(twice, path) == "root=/dev/sda1 ro"


def test_future_kernels_file_is_made_from_the_last_entry_and_default_grub_is_rewritten(
    tmp_path: Path,
) -> None:
    """Since grubby 8.40-64 `--update-kernel=ALL` writes /etc/kernel/cmdline (from the last
    entry, `sort -Vr`: the rescue one) and GRUB_CMDLINE_LINUX, which replaces every line that
    starts with that name, a GRUB_CMDLINE_LINUX_DEFAULT line too."""
    root = rhel9(tmp_path / "host")
    write(root, model.ETC_DEFAULT_GRUB, RHEL9_DEFAULT_GRUB + 'GRUB_CMDLINE_LINUX_DEFAULT="nosmt"\n')
    expected = predicted(root, "", "nohz=on")
    after = real(root, "", "nohz=on")
    assert after == expected
    assert after[model.KERNEL_CMDLINE].decode() == RHEL9_OPTIONS + " nohz=on\n"
    grub = after[model.ETC_DEFAULT_GRUB].decode()
    assert "GRUB_CMDLINE_LINUX_DEFAULT" not in grub
    assert grub.count('GRUB_CMDLINE_LINUX="crashkernel=') == 2


@pytest.mark.parametrize(
    "saved",
    [
        None,
        "1",
        "2",
        f"{MACHINE}-5.14.0-427.13.1.el9_4.x86_64",
        "Rescue",
        "Red Hat Enterprise Linux (5.14.0-427.13.1.el9_4.x86_64) 9.4 (Plow)",
        "no-such-entry",
    ],
)
def test_the_default_entry_is_the_one_grubby_names(tmp_path: Path, saved: str | None) -> None:
    root = rhel9(tmp_path / "host", saved=saved)
    done = grubby(root, "--default-index")
    assert done.returncode == 0, done.stderr
    found = boot_of(root)
    default = found.default()
    assert default is not None
    if saved == "no-such-entry":
        # grubby names none; GRUB, not finding the default, boots entry 0.
        assert done.stdout.strip() == "" and found.entries.index(default) == 0
    else:
        assert found.entries.index(default) == int(done.stdout)


def test_entries_sort_as_sort_v_does() -> None:
    names = [
        f"{MACHINE}-0-rescue",
        f"{MACHINE}-5.14.0-70.13.1.el9_0.x86_64",
        f"{MACHINE}-5.14.0-427.13.1.el9_4.x86_64",
        f"{MACHINE}-5.14.0-427.13.1.el9_4.x86_64+debug",
        f"{MACHINE}-5.14.0-503.11.1.el9_5.x86_64",
        f"{MACHINE}-6.12.0-55.el10.x86_64",
        "rhel-4.18.0-80.1.2.el8_0.x86_64",
        "rhel-4.18.0-80.el8.x86_64",
        "fedora-6.9.7-200.fc40.x86_64~debug",
        "fedora-6.9.7-200.fc40.x86_64",
        "a.tar.gz",
        "a.tar",
    ]
    sort = shutil.which("sort")
    assert sort is not None
    done = subprocess.run(
        [sort, "-Vr"],
        input="\n".join(names) + "\n",
        capture_output=True,
        text=True,
        check=True,
        env={"LC_ALL": "C.UTF-8"},
    )
    texts = {f"{ENTRIES}/{n}.conf": "" for n in names}
    assert [e.id for e in model.entries(texts)] == done.stdout.split()


def test_the_emulator_leaves_what_the_real_grubby_leaves(tmp_path: Path) -> None:
    root = rhel9(tmp_path / "host", options=RHEL9_OPTIONS + " isolcpus=2 isolcpus=3")
    twin = tmp_path / "twin"
    shutil.copytree(root, twin, symlinks=True)
    argv = args_of("", "isolcpus=4-7")
    assert emulated(DirectoryHost(twin), argv).returncode == 0
    assert real(root, "", "isolcpus=4-7") == tree(twin)


def test_the_corpus_files_are_the_ones_source_md_names() -> None:
    listed = (CORPUS / "SOURCE.md").read_text()
    for path in CORPUS.rglob("*"):
        if path.is_file() and path.name != "SOURCE.md":
            assert f"`{path.relative_to(CORPUS)}`" in listed, path
    spec = (CORPUS / "grubby.spec").read_text()
    assert "install -T -m 0755 %{SOURCE1} %{buildroot}%{_sbindir}/grubby" in spec
    assert "Source1: grubby-bls" in spec
