"""`tune status`: status.json (`steps.status.Status`) as a few lines for an operator, as
`tuned-adm active` says which profile is active, and as the JSON document an engine reads."""

from __future__ import annotations

import json
from typing import Any

from ..core.printable import printable
from ..core.words import counted
from ..steps.status import Status
from . import documents
from .style import styler


def text(host: str, status: Status, color: bool) -> str:
    style = styler(color)
    if status.updated is None:
        return (
            f"No status on {printable(host)}: tune has not applied, verified or checked a "
            "profile here.\n"
        )
    digest = f" ({status.profile_digest})" if status.profile_digest else ""
    if status.in_sync is None:
        state = "not known (run tune check)"
    elif status.in_sync:
        state = style("in sync", fg="green")
    else:
        # status.json counts the knobs that drifted (`drift`), not the profile entries.
        said = "drift" if status.drift is None else f"drift: {counted(status.drift, 'knob')}"
        state = style(said, fg="red", bold=True)
    if status.armed:
        reboot = f"armed (run {status.pending_run}): the next boot takes the new configuration"
    elif status.reboot_pending:
        run = f" (run {status.pending_run})" if status.pending_run else ""
        reboot = f"pending{run}: the new boot configuration waits for the next boot"
    else:
        reboot = "none pending"
    check = status.last_verification
    verified = (
        f"{check.verdict} (run {check.run_id}, boot {check.boot_id}, {check.at})"
        if check is not None
        else "none"
    )
    lines = [
        f"Profile: {printable(status.profile or '(none)')}{digest}",
        f"State: {state}",
        f"Reboot: {reboot}",
        f"Last verification: {verified}",
        f"Last run: {status.last_run or 'none'}",
        f"Updated: {status.updated} by tune {status.updated_by} (boot {status.boot_id})",
    ]
    return "\n".join(lines) + "\n"


def document(host: str, status: Status) -> dict[str, Any]:
    """The fields of status.json as the file has them (a newer tune's too), in the document
    every command writes; its `format_version` is the document's."""
    fields: dict[str, Any] = json.loads(status.to_json())
    fields.pop("format_version", None)
    return documents.document("status", documents.named(host), fields)
