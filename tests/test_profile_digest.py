"""Pull mode's profile: named by a path or a `file://` URL, pinned by `--profile-digest` to the
bytes of the profile and every parent it extends. A profile that is not the one pinned (an
edited parent, a sync halfway) exits 65 before the host is read, and nothing is written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
from conftest import run_tune, write
from small_host import SmallHost, build, listing

from reconciler.core.errors import ExitCode
from reconciler.profile.load import DigestMismatch, load_profile
from reconciler.profile.source import pinned

PARENT = "name: base\nsysctl:\n  vm.swappiness: 10\n"
CHILD = "name: gpu\nextends: base/parent.yaml\nsysctl:\n  kernel.numa_balancing: 0\n"
OTHER = "sha256:" + "0" * 64


@pytest.fixture
def released(tmp_path: Path) -> Path:
    """The profile as the operator's tooling syncs it: a directory with a parent beside it."""
    write(tmp_path, "/srv/tune/base/parent.yaml", PARENT)
    return write(tmp_path, "/srv/tune/gpu.yaml", CHILD)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    sysctls = {"vm.swappiness": "60", "kernel.numa_balancing": "1"}
    return build(tmp_path / "host", SmallHost(sysctls=sysctls))


def digest_of(profile: Path) -> str:
    done = run_tune("validate", profile, "--format", "json")
    assert done.code == ExitCode.IN_SYNC, done.err
    found = json.loads(done.out)["digest"]
    assert isinstance(found, str)
    return found


def test_the_digest_is_what_sha256sum_gives_for_the_files_in_reading_order(
    released: Path,
) -> None:
    # The documented recipe, with coreutils as the oracle: the profile first, then its parent.
    files = [released, released.parent / "base" / "parent.yaml"]
    recipe = "sha256sum \"$@\" | cut -d' ' -f1 | sha256sum | cut -d' ' -f1"
    done = subprocess.run(
        ["sh", "-c", recipe, "sh", *map(str, files)], capture_output=True, text=True, check=True
    )
    assert digest_of(released) == "sha256:" + done.stdout.strip()
    text = run_tune("validate", released).out
    assert text.rstrip().endswith(f"; sha256:{done.stdout.strip()}")


def test_plan_check_and_apply_take_a_file_url_and_its_digest(released: Path, host: Path) -> None:
    url, digest = released.as_uri(), digest_of(released)
    pin = ("--profile-digest", digest)
    assert run_tune("plan", url, *pin, "--root", host, "--no-persist").code == ExitCode.CHANGES
    assert run_tune("check", url, *pin, "--root", host).code == ExitCode.CHANGES
    applied = run_tune("apply", url, *pin, "--root", host, "--runtime-only", "--yes")
    assert applied.code == ExitCode.IN_SYNC, applied.err
    assert (host / "proc/sys/vm/swappiness").read_text() == "10\n"
    assert run_tune("check", url, *pin, "--root", host).code == ExitCode.IN_SYNC


@pytest.mark.parametrize("edited", ["the profile", "its parent"])
@pytest.mark.parametrize("command", ["plan", "check", "apply"])
def test_a_profile_that_is_not_the_one_pinned_exits_65_and_writes_nothing(
    released: Path, host: Path, edited: str, command: str
) -> None:
    digest = digest_of(released)
    # Read once with the old content: the cache must not answer for the new one.
    assert run_tune("validate", released, "--profile-digest", digest).code == ExitCode.IN_SYNC
    changed = released if edited == "the profile" else released.parent / "base" / "parent.yaml"
    changed.write_text(changed.read_text() + "  vm.dirty_ratio: 5\n")
    before = listing(host)
    extra = {"plan": ["--no-persist"], "check": [], "apply": ["--runtime-only", "--yes"]}
    done = run_tune(command, released.as_uri(), "--profile-digest", digest, "--root", host,
                    *extra[command])  # fmt: skip
    assert done.code == ExitCode.INVALID_PROFILE
    assert done.out == ""
    assert done.err == (
        f"{released}:1:1: this profile and its parents read as {digest_of(released)}, not the "
        f"{digest} --profile-digest pins (a sync in progress, or an edit); nothing was read "
        "from the host\n"
    )
    assert listing(host) == before


def test_a_sync_halfway_is_the_wrong_profile_before_it_is_a_broken_one(released: Path) -> None:
    digest = pinned(digest_of(released))
    released.write_text("name: gpu\nextends: base/parent.yaml\nsysctl: [\n")  # torn mid-copy
    with pytest.raises(DigestMismatch):
        load_profile(released, digest)
    # The same file unpinned is the syntax error it is.
    done = run_tune("validate", released)
    assert done.code == ExitCode.INVALID_PROFILE and "YAML syntax error" in done.err


def test_a_missing_parent_is_the_wrong_profile_too(released: Path) -> None:
    digest = pinned(digest_of(released))
    (released.parent / "base" / "parent.yaml").unlink()
    with pytest.raises(DigestMismatch):
        load_profile(released, digest)


def test_the_cached_profile_keeps_the_digest_of_what_was_read(released: Path) -> None:
    first = load_profile(released)
    again = load_profile(released, first.digest)  # a cache hit, pinned: accepted
    assert again.digest == first.digest
    with pytest.raises(DigestMismatch):
        load_profile(released, pinned(OTHER))


def test_a_percent_encoded_url_names_its_file(tmp_path: Path) -> None:
    target = write(tmp_path, "/srv/tune dir/gpu profile.yaml", PARENT)
    url = "file://" + quote(str(target))
    assert run_tune("validate", url).code == ExitCode.IN_SYNC
    assert run_tune("validate", url.replace("file://", "file://localhost")).code == 0


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("https://example.org/gpu.yaml", "never over https://"),
        ("s3://bucket/gpu.yaml", "never over s3://"),
        ("file://build-host/srv/gpu.yaml", "'build-host' is another host"),
        ("file:///srv/gpu.yaml#sha256=00", "no query or fragment"),
        ("file:///no/such/profile.yaml", "no such file"),
    ],
)
def test_other_urls_are_usage_errors(spec: str, said: str, host: Path) -> None:
    done = run_tune("check", spec, "--root", host)
    assert done.code == ExitCode.USAGE
    assert said in done.err


@pytest.mark.parametrize("value", ["sha256:12", "md5:" + "0" * 32, "0" * 64])
def test_a_digest_that_is_not_sha256_hex_is_a_usage_error(released: Path, value: str) -> None:
    done = run_tune("validate", released, "--profile-digest", value)
    assert done.code == ExitCode.USAGE
    assert "is not sha256: and 64 hexadecimal digits" in done.err


def test_a_digest_without_a_profile_is_a_usage_error(host: Path) -> None:
    done = run_tune("check", "--root", host, "--profile-digest", OTHER)
    assert done.code == ExitCode.USAGE
    assert "--profile-digest pins a profile file: give PROFILE too." in done.err
