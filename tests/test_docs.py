"""The documentation an operator finds: the README is the short first page, everything it used to
hold is a page of the site in docs/ (built by `mkdocs build --strict` in .ci/run), each knob kind
has its page from its own docstring, and what the docs point to ships in the wheel."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import click
import pytest
from conftest import HOSTS, PROJECT, run_tune

from reconciler.kinds import REGISTRY
from reconciler.kinds.base import Kind

README = PROJECT / "README.md"
DOCS = PROJECT / "docs"
# The README's two commands: the first one a stranger runs, and the test command .ci/run runs.
INSTALL_AND_PLAN = (
    "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/tune plan blackwell-8x"
    " --root examples/hosts/rtx6000bw-untuned"
)
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/pytest"
# Every section heading of the README before it became the site (1,599 lines, 2026-12-07): each
# is a heading of some page now.
OLD_HEADINGS = [
    "What it does",
    "Conventions",
    "Profiles",
    "How each knob is read and compared",
    "Audit: what is wrong with a host, without a profile",
    "Snapshots",
    "Drift detection: `tune check`",
    "Wiring it to cron, systemd and node_exporter",
    "Applying: `tune apply --runtime-only`",
    "Persistence",
    "A snapshot is a host too",
    "The run journal",
    "Proof that tuning helped: probes and `tune report`",
    "The reboot phase: `tune apply --reboot-phase`, `tune verify`",
    "`--arm`: the try-once boot, for whoever reboots",
    "`tune status`: what tune last left on the host",
    "`--reboot`: a safe reboot, verified",
    "Security model",
    "How the code is laid out",
    "Tests and benchmarks",
    "Remote hosts and fleets",
    "Applying over SSH: `tune apply --runtime-only -H`",
    "Rolling out over a fleet: `tune apply --reboot -i INVENTORY`",
    "Host keys",
    "Pull mode: each host checks (and applies) a profile it is given",
    "Testing against real SSH servers",
    "End-to-end tests on a real kernel",
]


def headings(markdown: str) -> list[str]:
    """The ATX headings of a Markdown text, outside fenced code."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            found.append(match[1].strip())
    return found


def pages() -> dict[str, str]:
    return {str(p.relative_to(DOCS)): p.read_text() for p in sorted(DOCS.rglob("*.md"))}


def test_the_readme_is_the_short_first_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 200
    commands = re.findall(r"```sh\n(.*?)\n```", text, re.S)
    assert commands[:2] == [INSTALL_AND_PLAN, TEST_COMMAND]


def test_ci_runs_exactly_the_readme_s_test_command_and_builds_the_site_strictly() -> None:
    ci = (PROJECT / ".ci/run").read_text()
    assert TEST_COMMAND in ci
    assert re.search(r"^\.venv/bin/mkdocs build --strict\b", ci, re.M)
    config = (PROJECT / "mkdocs.yml").read_text()
    for check in ("unrecognized_links", "anchors", "not_found", "omitted_files"):
        assert re.search(rf"^  {check}: warn$", config, re.M), check


def test_every_section_the_readme_dropped_is_a_heading_of_the_site() -> None:
    on_pages = {heading for text in pages().values() for heading in headings(text)}
    missing = [h for h in OLD_HEADINGS if h not in on_pages]
    assert missing == []


def test_the_heading_reader_skips_code() -> None:
    assert headings("# a\n```sh\n# not a heading\n```\n### b\n#c\n") == ["a", "b"]


def test_every_page_is_in_the_site_s_navigation() -> None:
    config = (PROJECT / "mkdocs.yml").read_text()
    listed = set(re.findall(r"([\w/-]+\.md)$", config, re.M))
    assert set(pages()) == listed


def test_the_readme_s_example_profile_is_valid_and_plans(tmp_path: Path) -> None:
    (example,) = re.findall(r"```yaml\n(.*?)```", README.read_text(), re.S)
    profile = tmp_path / "my-gpu-node.yaml"
    profile.write_text(example)
    assert run_tune("validate", profile).code == 0
    planned = run_tune(
        "plan", profile, "--root", HOSTS / "rtx6000bw-untuned", "--save", tmp_path / "p.json"
    )
    assert planned.code == 2, planned.err


KINDS = [kind for kind in REGISTRY if not kind.persistence]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.section or k.kind)
def test_each_kind_has_its_page_with_its_docstring_and_its_row(kind: Kind[Any]) -> None:
    name = kind.section or kind.kind
    page = DOCS / "kinds" / f"{name}.md"
    text = page.read_text()
    doc = (sys.modules[type(kind).__module__].__doc__ or "").strip()
    assert doc in text, f"{page}: copy the docstring of {type(kind).__module__} again"
    assert f"| {kind.reads} | {kind.compared} |" in text
    assert f"({name}.md)" in (DOCS / "kinds/index.md").read_text()


def package_data() -> list[str]:
    pyproject = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    globs: list[str] = pyproject["tool"]["setuptools"]["package-data"]["reconciler"]
    return globs


def test_every_example_tune_examples_prints_is_package_data() -> None:
    """`tune examples` lists reconciler/examples/*/*: each file there is in the wheel, the alert
    rules among them (the source tree's examples/ links to them)."""
    examples = PROJECT / "reconciler/examples"
    files = [p.relative_to(examples.parent).as_posix() for p in examples.glob("*/*")]
    assert "examples/prometheus/tune-alerts.yml" in files
    assert {f.split("/")[1] for f in files} == {
        "cron",
        "kubernetes",
        "prometheus",
        "slurm",
        "systemd",
    }
    unshipped = [f for f in files if not any(fnmatch(f, g) for g in package_data())]
    assert unshipped == []
    assert (PROJECT / "examples/prometheus").resolve() == examples / "prometheus"


def test_the_alert_rules_print_as_they_are() -> None:
    """The rules name tune's commands to a person; they run none, so no path is filled in."""
    shown = run_tune("examples", "prometheus", "tune-alerts.yml")
    assert shown.code == 0
    rules = PROJECT / "reconciler/examples/prometheus/tune-alerts.yml"
    assert shown.out == rules.read_text()


def test_the_changelog_keeps_a_changelog_with_short_entries() -> None:
    """Keep a Changelog: Unreleased on top, then each release with its date; an entry is one or
    two lines, its details being in the docs."""
    text = (PROJECT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(.+?)\](?: - (\d{4}-\d\d-\d\d))?$", text, re.M)
    assert releases[:2] == [("Unreleased", ""), ("0.2.0", "2026-12-07")]
    sections = set(re.findall(r"^### (.+)$", text, re.M))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    entries = re.findall(r"^- .*(?:\n  .*)*", text, re.M)
    assert len(entries) > 50
    long = [e.splitlines()[0] for e in entries if len(e.splitlines()) > 2]
    assert long == []
    assert max(len(line) for line in text.splitlines()) <= 100


def test_troubleshooting_lists_every_message_the_code_writes_out() -> None:
    """The catalogue on docs/troubleshooting.md is the code's: a message added, changed or
    removed fails here until `python tests/error_catalogue.py --write` rewrites the page."""
    import error_catalogue

    page = (DOCS / "troubleshooting.md").read_text()
    assert error_catalogue.on_page(page) == error_catalogue.catalogue()
    found = error_catalogue.messages()
    assert len(found) > 200
    assert {m.error for m in found} >= {"HostError", "UsageError", "ProfileError", "NotConfirmed"}
    text = " ".join(m.text for m in found)
    assert "must run as root" in text and "connection refused" in text


def test_the_catalogue_reads_messages_as_an_operator_sees_them() -> None:
    from error_catalogue import text_of

    def parsed(source: str) -> str | None:
        call = ast.parse(source).body[0]
        assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
        return text_of(call.value.args[0])

    assert parsed('HostError(f"{path}: cannot read {why}.")') == "…: cannot read …."
    assert parsed('HostError("a " + f"b {x}")') == "a b …"
    assert parsed("HostError(message)") is None


def test_the_json_page_names_every_schema_tune_publishes() -> None:
    from reconciler.cli.main import cli

    assert isinstance(cli, click.Group)
    context = click.Context(cli)
    schema = cli.get_command(context, "schema")
    assert schema is not None
    flags = {opt for p in schema.params if getattr(p, "is_flag", False) for opt in p.opts} - {
        "--help",
        "-h",
    }
    page = (DOCS / "reference/json.md").read_text()
    assert flags and {f for f in flags if f"`tune schema {f}`" not in page} <= {"--profile"}
