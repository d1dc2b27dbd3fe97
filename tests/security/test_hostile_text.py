"""Text from a hostile host: file names, file contents and configs that try to act on the
terminal or the reader instead of being shown."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import BLACKWELL, TUNED, UNTUNED, copy_host, run_tune, write
from markdown_view import shown as rendered
from small_host import SmallHost, build, listing
from ssh_fixture import SshLab, StartLab, sshd_available

from reconciler.core.printable import UNSAFE, printable
from reconciler.hosts import known_hosts

FORGED = "    ~ sysctl vm.forged: 1 -> 2"
# Terminal controls (ESC, CR, a newline that starts a forged plan line) and a bidi override.
HOSTNAME = f"gpu01\x1b[2J\r\n{FORGED}\u202e"
KERNEL = "6.14.8-2-pve\x1b]0;owned\x07"
SWAPPINESS = "60\x1b[8m"  # conceal what follows
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    root = copy_host(UNTUNED, tmp_path / "hostile")
    write(root, "/proc/sys/kernel/hostname", HOSTNAME + "\n")
    write(root, "/proc/sys/kernel/osrelease", KERNEL + "\n")
    write(root, "/proc/sys/vm/swappiness", SWAPPINESS + "\n")
    return root


def assert_shown_not_acted_on(text: str) -> None:
    assert not RAW.search(text), RAW.findall(text)
    assert FORGED not in text.splitlines()


@pytest.mark.parametrize(
    "command",
    [
        ("plan", BLACKWELL),
        ("plan", BLACKWELL, "--format", "markdown"),
        ("check", BLACKWELL),
        ("check", BLACKWELL, "--quiet"),
        ("audit",),
        ("audit", "--format", "markdown"),
    ],
    ids=lambda c: " ".join(str(w) for w in c[:1] + c[2:]) or "text",
)
def test_host_text_reaches_the_terminal_escaped_never_as_controls(
    hostile: Path, command: tuple[str | Path, ...]
) -> None:
    result = run_tune(*command, "--root", hostile)
    assert result.code in (0, 2), result.err
    assert_shown_not_acted_on(result.out + result.err)
    shown = printable(SWAPPINESS if "--quiet" in command else KERNEL)
    assert shown in (rendered(result.out) if "markdown" in command else result.out)


def test_json_keeps_the_hosts_exact_text(hostile: Path) -> None:
    result = run_tune("plan", BLACKWELL, "--root", hostile, "--format", "json")
    host = json.loads(result.out)["host"]
    assert (host["name"], host["kernel"]) == (HOSTNAME, KERNEL)


def test_a_file_name_on_the_host_cannot_forge_a_plan_line(tmp_path: Path) -> None:
    root = copy_host(UNTUNED, tmp_path / "host")
    name = f"nvme0n1\n{FORGED}\u202e"
    write(root, f"/sys/block/{name}/queue/scheduler", "[none] mq-deadline\x1b[2J\n")
    profile = write(tmp_path, "/p.yaml", "name: p\nsysfs:\n  /sys/block/*/queue/scheduler: kyber\n")
    result = run_tune("plan", profile, "--root", root, "--no-persist")
    assert result.code == 2, result.err
    assert_shown_not_acted_on(result.out)
    assert printable(f"/sys/block/{name}/queue/scheduler") in result.out


def test_an_error_quoting_a_value_is_one_line_a_problem(tmp_path: Path) -> None:
    profile = write(
        tmp_path, "/p.yaml", 'name: p\nsysctl: {a: 1, a: "x\\n' + FORGED + '\\u001b[2J"}\n'
    )
    result = run_tune("validate", profile)
    assert result.code == 65
    assert_shown_not_acted_on(result.err)
    assert len(result.err.splitlines()) == 1, result.err


def test_printable_text_never_confuses_two_values() -> None:
    values = [
        "\x1b",
        "\\x1b",
        "\\\x1b",
        "\\\\x1b",
        "a\\",
        "a\\\\",
        "\n",
        "\\n",
        "\u202e",
        "\\u202e",
    ]
    shown = [printable(v) for v in values]
    assert len(set(shown)) == len(values), shown


def test_every_character_printable_leaves_as_it_is_is_one_it_need_not_escape() -> None:
    """`printable` shows text that `str.isprintable` passes and that has no backslash as it
    is: so no such character may be one `UNSAFE` escapes, in the Unicode of this Python."""
    for code in range(0x110000):
        char = chr(code)
        if char.isprintable() and char != "\\":
            assert UNSAFE.search(char) is None, hex(code)


SECRET = "root:$y$j9T$SeCrEtHaSh:19000:0:99999:7:::\nsvc:*Tok3nS3cret*:19000::::::\n"


@pytest.mark.parametrize(
    "secret",
    [SECRET, "key: {a: *Tok3nS3cret}\n", "k: v\nk: SeCrEt\n"],
    ids=["shadow", "alias", "dup"],
)
def test_extends_never_shows_the_text_of_a_file_that_is_not_a_profile(
    tmp_path: Path, secret: str
) -> None:
    target = write(tmp_path, "/secret", secret)
    target.chmod(0o600)
    profile = write(tmp_path, "/p.yaml", f"name: p\nextends: {target}\n")
    for command in ("validate", "plan"):
        result = run_tune(command, profile, *(("--root", UNTUNED) if command == "plan" else ()))
        assert result.code == 65, result.err
        assert "SeCrEt" not in result.err and "Tok3n" not in result.err, result.err


TMPFILES = shutil.which("systemd-tmpfiles")


def test_a_percent_in_a_sysfs_value_is_written_as_it_is_at_boot(tmp_path: Path) -> None:
    """systemd-tmpfiles expands `%a` (to the architecture) and refuses unknown specifiers; the
    boot-time line tune writes must give the kernel the profile's value, and stay in sync."""
    root = build(tmp_path / "host", SmallHost())
    attribute = "/sys/module/nvme_core/parameters/note"
    write(root, attribute, "none\n")
    value = "50%a %q 1"
    profile = write(tmp_path, "/p.yaml", f"name: p\nsysfs:\n  {attribute}: '{value}'\n")
    assert run_tune("apply", profile, "--runtime-only", "--root", root, "--yes").code == 0
    assert run_tune("plan", profile, "--root", root).code == 0  # applied is in sync
    if TMPFILES is None:
        pytest.skip("systemd-tmpfiles is not installed: cannot replay the boot")
    # The boot, replayed by systemd-tmpfiles itself inside a scratch root (never this host).
    boot = tmp_path / "boot"
    write(boot, attribute, "")
    config = (root / "etc/tmpfiles.d/tune.conf").read_text()
    replay = subprocess.run(
        [TMPFILES, f"--root={boot}", "--create", "/dev/stdin"],
        input=config, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stderr
    assert (boot / attribute.lstrip("/")).read_text() == value


PASSWD = (
    "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)


def test_an_lxc_path_to_a_file_that_is_not_a_container_config_is_never_edited(
    tmp_path: Path,
) -> None:
    root = build(tmp_path / "host", SmallHost())
    write(root, "/etc/passwd", PASSWD)
    profile = write(
        tmp_path, "/p.yaml", "name: p\nlxc:\n  - {path: /etc/passwd, memlock: unlimited}\n"
    )
    assert run_tune("validate", profile).code == 0  # a path is a path; the host decides
    planned = run_tune("plan", profile, "--root", root)
    assert planned.code == 1
    assert "/etc/passwd is not an LXC container config (line 1 is neither" in planned.err
    applied = run_tune("apply", profile, "--root", root, "--yes")
    assert applied.code == 1, applied.out
    assert (root / "etc/passwd").read_text() == PASSWD


@pytest.mark.parametrize(
    ("path", "text", "code"),
    [
        ("/srv/ct/web.conf", "lxc.uts.name = web\nlxc.rootfs.path = dir:/srv/ct/web\n", 2),
        ("/srv/ct/101.conf", "arch: amd64\nhostname: web\n\n[snap1]\narch: amd64\n", 2),
        # A container the host does not have is a note wherever it is (a fleet's hosts need
        # not all have it), not a change: apply creates no config, here or elsewhere (below).
        ("/srv/ct/missing.conf", None, 0),
        ("/var/lib/lxc/web/config", None, 0),
    ],
)
def test_an_lxc_path_elsewhere_is_edited_only_when_it_reads_as_a_config(
    tmp_path: Path, path: str, text: str | None, code: int
) -> None:
    root = build(tmp_path / "host", SmallHost())
    if text is not None:
        write(root, path, text)
    profile = write(tmp_path, "/p.yaml", f"name: p\nlxc:\n  - {{path: {path}, memlock: '1'}}\n")
    planned = run_tune("plan", profile, "--root", root, "--no-persist")
    assert planned.code == code, planned.out + planned.err
    if text is None:  # nothing to edit: apply creates no config, here or elsewhere
        before = listing(root)  # tune's journal (under var/) and lock (run/) aside
        run_tune("apply", profile, "--root", root, "--yes", "--no-persist")
        assert not (root / path.lstrip("/")).exists()
        assert {p for p in listing(root) if not p.startswith(("var", "run"))} == {
            p for p in before if not p.startswith(("var", "run"))
        }


# ---------------------------------------------------------------------------------------------
# known_hosts as OpenSSH reads it


def hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


@pytest.mark.parametrize(
    ("patterns", "host", "matched"),
    [
        ("gpu01,gpu02", "gpu02", True),
        ("gpu*", "GPU17", True),
        ("gpu?", "gpu17", False),
        ("[gpu01]:2222", "[gpu01]:2222", True),
        ("gpu01", "[gpu01]:2222", False),
        ("*.lab,!bad.lab", "bad.lab", False),  # a negated match rules the whole line out
        ("!bad.lab,*.lab", "good.lab", True),
        ("!gpu01", "gpu01", False),
        ("!gpu01", "gpu02", False),  # a negation alone matches nothing
        (hashed("gpu01"), "gpu01", True),
        (hashed("gpu01"), "gpu02", False),
        ("|1|garbage", "gpu01", False),
    ],
)
def test_a_known_hosts_line_matches_a_host_as_openssh_matches_it(
    patterns: str, host: str, matched: bool
) -> None:
    assert known_hosts.matches(tuple(patterns.split(",")), host) is matched


def test_known_hosts_lines_openssh_skips_are_skipped_not_fatal() -> None:
    key = base64.b64encode(b"\0\0\0\x0bssh-ed25519").decode()
    parsed = known_hosts.parse(
        "# comment\n\n"
        f"@cert-authority *.lab ssh-ed25519 {key} ca\n"
        f"@revoked * ssh-ed25519 {key}\n"
        f"@bogus gpu01 ssh-ed25519 {key}\n"
        "gpu01 ssh-ed25519\n"
        "gpu01 ssh-ed25519 not*base64\n"
        f"  gpu02   ssh-ed25519   {key}   comment with words\n",
        "kh",
    )
    assert [(k.marker, k.patterns, k.where) for k in parsed.keys] == [
        ("@cert-authority", ("*.lab",), "kh:3"),
        ("@revoked", ("*",), "kh:4"),
        (None, ("gpu02",), "kh:8"),
    ]
    assert [s.split(":")[1] for s in parsed.skipped] == ["5", "6", "7"]


needs_sshd = pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")


def lab_key(lab: SshLab) -> str:
    return " ".join((lab.base / "ssh_host_ed25519_key.pub").read_text().split()[:2])


@needs_sshd
def test_bad_and_certificate_lines_in_known_hosts_lock_no_host_out(start_lab: StartLab) -> None:
    lab = start_lab({"h1": TUNED})
    with lab.known_hosts.open("a") as lines:
        lines.write(f"@cert-authority *.example.org {lab_key(lab)}\n")
        lines.write("gpu01 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAAQC7\n")  # a torn RSA key
        lines.write("garbage\n@bogus x y z\n")
    result = run_tune("plan", BLACKWELL, "--ssh-config", lab.config, "-H", "h1")
    assert result.code == 0, result.out + result.err
    assert result.err.count("line ignored") == 3, result.err


@needs_sshd
def test_a_revoked_host_key_is_refused_even_where_another_line_accepts_it(
    start_lab: StartLab,
) -> None:
    lab = start_lab({"h1": TUNED})
    with lab.known_hosts.open("a") as lines:
        lines.write(f"@revoked * {lab_key(lab)}\n")
    for extra in ((), ("--accept-new-host-keys",)):
        result = run_tune("plan", BLACKWELL, "--ssh-config", lab.config, "-H", "h1", *extra)
        assert result.code == 1
        assert f"the host key of [127.0.0.2]:{lab.port['h1']} (ssh-ed25519 key" in result.err
        assert "is REVOKED" in result.err
    assert lab.exec_requests() == {}, "nothing runs on a host with a revoked key"


@needs_sshd
def test_a_negated_pattern_keeps_its_line_from_vouching_for_the_host(
    start_lab: StartLab,
) -> None:
    lab = start_lab({"h1": TUNED})
    name = f"[127.0.0.2]:{lab.port['h1']}"
    lab.known_hosts.write_text(f"{name},!{name} {lab_key(lab)}\n")
    result = run_tune("plan", BLACKWELL, "--ssh-config", lab.config, "-H", "h1")
    assert result.code == 1
    assert f"unknown host key for {name}" in result.err
    assert lab.exec_requests() == {}


def test_apply_and_the_report_of_its_run_show_a_hostile_hosts_text_escaped(hostile: Path) -> None:
    dry = run_tune("apply", BLACKWELL, "--runtime-only", "--root", hostile, "--dry-run")
    applied = run_tune("apply", BLACKWELL, "--runtime-only", "--root", hostile, "--yes")
    assert applied.code == 0, applied.err
    report = run_tune("report", "--root", hostile)
    assert report.code == 0, report.err
    for result in (dry, applied, report):
        assert_shown_not_acted_on(result.out + result.err)
        assert printable(SWAPPINESS) in result.out


@pytest.mark.parametrize(
    "text",
    [
        "db_password_is_hunter2: yes\n",  # a mapping, but no profile section
        "hunter2: &a 1\nsecret: *hunter2\n",  # a syntax error that quotes an alias
        "hunter2: 1\nhunter2: 2\n",  # a duplicate key, quoted with its values
    ],
    ids=["no section", "undefined alias", "duplicate key"],
)
def test_a_file_that_is_not_a_profile_is_never_quoted(tmp_path: Path, text: str) -> None:
    """`tune validate FILE` as root, FILE not a profile (issue #30): the diagnostic says where
    and why, and quotes nothing of a file until it reads as a profile."""
    secret = tmp_path / "secret.txt"
    secret.write_text(text)
    for args in (["validate", secret], ["validate", "--format", "json", secret]):
        result = run_tune(*args)
        assert result.code == 65
        assert "hunter2" not in result.out + result.err
