"""`--write-profile`: the profile that fixes every actionable finding, in the contract format.

Each entry carries the finding's priority and reason (what `tune plan` shows); the comment above
it names the finding and what the audit saw. Findings tune cannot fix are listed in the header.
"""

from __future__ import annotations

import io
import re
import textwrap
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarint import HexInt

from ..profile.load import model as profile_model
from ..profile.load import profile_keys
from .fixes import Anchor, meta, place
from .model import Finding, Report, phase_label

WIDTH = 100
EVIDENCE_SHOWN = 3


def profile_name(host: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", host).strip("-.")
    return f"{base}-audit" if base else "audit"


def suggested_profile(report: Report) -> str:
    data: dict[str, Any] = {}
    comments: dict[Anchor, list[str]] = {}
    for finding in report.actionable:
        entry_meta = meta(finding.priority.value, finding.reason)
        for fix in finding.fixes:
            comments.setdefault(place(data, fix, entry_meta), []).extend(_about(finding))
    root = CommentedMap()
    root["name"] = profile_name(report.host.name)
    root["description"] = f"Fixes what tune audit found on {report.host.name}"
    for section in profile_keys(profile_model()):
        if section in data:
            root[section] = _commented(data[section], (section,), comments)
    root.yaml_set_start_comment("\n".join(_header(report)))
    yaml = YAML()
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = WIDTH
    out = io.StringIO()
    yaml.dump(root, out)
    # ruamel leaves a space where it folds a long scalar; YAML drops it when reading.
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def _header(report: Report) -> list[str]:
    host = report.host
    count = len(report.actionable)
    lines = [
        f"Written by `tune audit` on {host.name} ({host.source}, kernel {host.kernel or '?'}).",
        f"Fixes the {count} actionable findings: `tune plan --no-persist` of this file on that "
        "host lists exactly them (`tune plan` adds the boot-time files that keep them)."
        if count
        else "The audit found nothing actionable: this profile changes nothing.",
    ]
    if host.tune_files:
        owned = ", ".join(host.tune_files)
        lines.append("")
        lines += _wrap(
            f"This host has boot-time files from an earlier `tune apply` ({owned}). tune "
            "rewrites them from the profile it applies: add these entries to the profile that "
            "wrote them rather than applying this file alone."
        )
    rest = [f for f in report.findings if not f.actionable]
    if rest:
        lines += ["", "Not fixed by this profile:"]
        for finding in rest:
            lines += _wrap(
                f"- {finding.id} ({finding.priority.value}, {phase_label(finding)}): "
                f"{finding.observed}; {finding.fix}"
            )
    return lines


def _about(finding: Finding) -> list[str]:
    shown = list(finding.evidence[:EVIDENCE_SHOWN])
    more = len(finding.evidence) - len(shown)
    head = f"{finding.id} ({finding.priority.value}, {phase_label(finding)}): "
    lines = _wrap(head + finding.observed)
    lines += _wrap("evidence: " + "; ".join(shown) + (f"; and {more} more" if more else ""))
    return lines


def _wrap(line: str) -> list[str]:
    return textwrap.wrap(line, WIDTH - 8, subsequent_indent="  ", break_on_hyphens=False) or [""]


def _commented(node: Any, path: Anchor, comments: dict[Anchor, list[str]]) -> Any:
    """Plain profile data as ruamel nodes, with each finding's comment before its entry."""
    indent = 2 * (len(path) - 1)  # a nested mapping or a list item both indent by two
    if isinstance(node, dict):
        out = CommentedMap()
        for key, value in node.items():
            out[key] = _commented(value, (*path, key), comments)
            if (*path, key) in comments:
                text = "\n".join(comments[(*path, key)])
                out.yaml_set_comment_before_after_key(key, before=text, indent=indent + 2)
            if key in ("vendor", "device", "class", "class_prefix") and isinstance(value, int):
                out[key] = HexInt(value, width=4 if key != "class_prefix" else 2)
        return out
    if isinstance(node, list):
        seq = CommentedSeq()
        for index, item in enumerate(node):
            seq.append(_commented(item, (*path, index), comments))
            if (*path, index) in comments:
                text = "\n".join(comments[(*path, index)])
                seq.yaml_set_comment_before_after_key(index, before=text, indent=indent + 2)
        return seq
    return node
