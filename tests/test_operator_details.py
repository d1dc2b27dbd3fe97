"""Issue #33, item 9: the small things an operator of many hosts trips on, each once."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from conftest import BLACKWELL, PROJECT, UNTUNED, copy_host, run_tune

from reconciler.core.errors import HostError
from reconciler.hosts.directory import SnapshotHost
from reconciler.hosts.fleet import HostResult
from reconciler.plan.make import make_plan
from reconciler.plan.observe import observe
from reconciler.profile.load import load_profile
from reconciler.render import audit_fleet, fleet

TUNE = PROJECT / "reconciler"  # only its path, for the bundled profiles' directory


def test_audit_write_profile_refuses_to_overwrite_a_file_without_force(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: mine\n")
    refused = run_tune("audit", "--root", UNTUNED, "--write-profile", mine)
    assert refused.code == 64
    assert f"{mine}: exists; --force replaces it." in refused.err
    assert mine.read_text() == "name: mine\n"
    forced = run_tune("audit", "--root", UNTUNED, "--write-profile", mine, "--force")
    assert forced.code == 2, forced.err
    assert mine.read_text() != "name: mine\n"
    fresh = tmp_path / "fresh.yaml"
    assert run_tune("audit", "--root", UNTUNED, "--write-profile", fresh).code == 2
    assert run_tune("validate", fresh).code == 0


def test_a_plan_saved_to_dash_is_refused_not_written_to_a_file_named_dash(tmp_path: Path) -> None:
    refused = run_tune("plan", BLACKWELL, "--root", UNTUNED, "--save", "-")
    assert refused.code == 64
    assert "--save -: a saved plan is a file `tune apply FILE` reads" in refused.err
    assert not (tmp_path / "-").exists()


def test_quiet_has_its_short_form() -> None:
    quiet = run_tune("check", BLACKWELL, "--root", UNTUNED, "-q")
    loud = run_tune("check", BLACKWELL, "--root", UNTUNED, "--quiet")
    since = re.compile(r" since \S+$", re.M)  # when each drift was first seen: this second
    assert (quiet.code, since.sub("", quiet.out)) == (loud.code, since.sub("", loud.out))
    assert quiet.out.startswith("DRIFT ")
    assert "-q, --quiet" in run_tune("check", "--help").out


def test_one_host_is_one_host_not_one_hosts() -> None:
    from reconciler.core.words import counted

    assert counted(1, "host") == "1 host"
    assert counted(0, "host") == "0 hosts"
    assert counted(2, "wave") == "2 waves"
    loaded = load_profile(BLACKWELL)
    plan = make_plan(loaded, observe(SnapshotHost(UNTUNED, name="u"), loaded.profile))
    assert fleet.totals([HostResult("u", value=plan)]).startswith("1 host: 0 in sync,")
    down = [HostResult[object]("d", error=HostError("d: refused."))]
    assert audit_fleet.totals(down).startswith("1 host: 0 clean,")  # type: ignore[arg-type]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_rollout_of_one_host_asks_in_the_singular_and_never_suggests_dry_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\ng1 ansible_host=127.0.0.1 ansible_port=1\n")
    rollout = ("apply", "blackwell-8x", "--reboot", "-i", inventory)
    # No terminal: refused before any host is reached. A rollout has no --dry-run to offer.
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    refused = run_tune(*rollout)
    assert refused.code == 7, refused.err
    assert "`tune apply --yes` goes ahead" in refused.err
    assert "--dry-run" not in refused.err
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    declined = run_tune(*rollout)
    assert declined.code == 7, declined.err
    assert "Roll blackwell-8x out to 1 host in 1 wave (1), rebooting each?" in declined.out


def test_a_markdown_plan_is_titled_a_plan_not_an_audit() -> None:
    shown = run_tune("plan", BLACKWELL, "--root", UNTUNED, "--format", "markdown")
    assert shown.out.startswith("# Plan: gpu-node-07 against profile `blackwell-8x`\n")
    assert "Host audit" not in shown.out


def test_bundled_profiles_are_named_by_their_bundled_name() -> None:
    bundled = str(TUNE / "profiles")
    valid = run_tune("validate", "blackwell-8x")
    assert valid.out.startswith("blackwell-8x: valid profile 'blackwell-8x' (with base-gpu-")
    assert bundled not in valid.out
    exported = run_tune("export", "machineconfig", "blackwell-8x")
    assert "# Made by `tune export machineconfig blackwell-8x` (sha256:" in exported.out
    assert bundled not in exported.out
    # A path the operator gave stays the path the operator gave.
    mine = run_tune("validate", BLACKWELL)
    assert mine.out.startswith(f"{BLACKWELL}: valid profile")


def test_a_dry_run_on_a_snapshot_names_the_snapshot_s_journal(tmp_path: Path) -> None:
    root = copy_host(UNTUNED, tmp_path / "host")
    shown = run_tune("apply", BLACKWELL, "--root", root, "--runtime-only", "--dry-run")
    assert shown.code == 0, shown.err
    said = shown.out.splitlines()[1]
    assert said == (
        f"Each change is journaled under {root}/var/lib/tune/runs/ before its write, "
        f"with {root}/run/tune/tune.lock held."
    )


def test_the_examples_fill_in_the_command_and_leave_the_prose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reconciler.cli import installed

    monkeypatch.setattr(installed, "tune_command", lambda: "/opt/venv/bin/tune")
    for name in ("systemd", "cron", "slurm"):
        printed = run_tune("examples", name).out.splitlines()
        directory = installed.examples_directory() / name
        sources = [
            line for path in sorted(directory.iterdir()) for line in path.read_text().splitlines()
        ]
        comments = [line for line in printed if line.startswith("#") and "# ==> " not in line]
        assert [line for line in sources if line.startswith("#")] == comments, name
    service = run_tune("examples", "systemd", "tune-check.service").out
    assert "ExecStart=/opt/venv/bin/tune check --quiet" in service
    assert "# tune check only reads; enforce it." in service


def test_refused_without_a_terminal_names_dry_run_only_where_it_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reconciler.cli.consent import confirm
    from reconciler.core.errors import NotConfirmed

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(NotConfirmed, match="`--dry-run` shows"):
        confirm("Apply?", yes=False, command="tune apply")
    with pytest.raises(NotConfirmed) as refused:
        confirm("Go on?", yes=False, command="tune rollout resume", dry_run=False)
    assert "--dry-run" not in str(refused.value)
