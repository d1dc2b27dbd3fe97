"""JSON Schemas of every command's `--format json` (`tune schema --plan`, `--check`, ...).

Written as data, beside the documents they describe (`documents.py`); the tests validate each
command's real output against its schema. A document may gain fields without a new
`format_version` (objects stay open); it may not lose or retype one.
"""

from __future__ import annotations

from typing import Any

from .documents import FORMAT_VERSION, KINDS

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
TEXT: Schema = {"type": ["string", "null"]}  # absent on the host, or not recorded
COUNT: Schema = {"type": "integer", "minimum": 0}
STRINGS: Schema = {"type": "array", "items": STRING}
# A knob's value: a normalised string, a list of lines, or null when the host lacks the knob.
VALUE: Schema = {"type": ["string", "array", "null"], "items": STRING}


def record(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """An object with these fields (and perhaps more: documents grow)."""
    return {
        "type": "object",
        "required": list(required),
        "properties": required | (optional or {}),
    }


def listed(item: Schema) -> Schema:
    return {"type": "array", "items": item}


HOST = record({"name": STRING}, {"source": STRING, "kernel": TEXT, "boot_id": TEXT})
PHASE: Schema = {"enum": ["runtime", "reboot"]}
# A change as the plan and `tune check` give it: the knob, its values and why, then everything
# the text and Markdown views show of it (`changes.py`), so that no consumer needs the text.
CHANGE = record(
    {
        "id": STRING,
        "kind": STRING,
        "target": STRING,
        "current": VALUE,
        "desired": VALUE,
        "phase": PHASE,
        "priority": {"enum": ["P0", "P1", "P2"]},
        "reason": STRING,
        # The profile entry it comes from (`governor` on each CPU) and the CPU or device it is
        # of ("" for a knob of none): changes of one entry with equal values fold into a line.
        "setting": STRING,
        "subject": STRING,
        "entry": STRING,
        # The folded line it is in (`cpu governor on 128 CPUs (cpu0-127)`), shared by the
        # line's changes.
        "label": STRING,
        "fix": STRING,  # the command that makes it by hand, "" where there is none
        "whole_file": {"type": "boolean"},  # the values are a file's lines (`target`)
        "shown": record({"current": STRING, "desired": STRING}),
        "takes_effect": STRING,
        "how": STRING,  # when, and the command that applies its phase alone
    },
    {
        "optional": {"type": "boolean"},
        # Where a value is a list of lines: the lines the change adds and removes.
        "lines": record({"added": STRINGS, "removed": STRINGS}),
    },
)
# A knob already in sync: which, its value, and the line it folds into (`changes.in_sync_json`).
IN_SYNC = record(
    {
        "id": STRING,
        "kind": STRING,
        "target": STRING,
        "entry": STRING,
        "current": VALUE,
        "label": STRING,
        "shown": record({"current": STRING}),
    }
)
PENDING = record(
    {
        "id": STRING,
        "running": VALUE,
        "configured": VALUE,
        "action": STRING,
        "kind": STRING,
        "target": STRING,
        "until": STRING,
        "shown": record({"running": STRING, "configured": STRING}),
    },
    {"restart": STRING},
)
CHECK = record(
    {
        "id": STRING,
        "name": STRING,
        "ok": {"type": "boolean"},
        "observed": TEXT,
        "expected": STRING,
        "remedy": STRING,
    }
)
NOTE = record({"about": STRING, "message": STRING})
# The text's words: a change is a profile entry that differs (`changes`: a governor on 128 CPUs
# is one change), a write one knob it writes (`writes`: that governor is 128 writes). Format 1
# counted the writes as `changes`, `runtime` and `reboot`.
SUMMARY = record(
    dict.fromkeys(
        ("changes", "runtime", "reboot", "in_sync", "pending", "checks", "failed_checks"), COUNT
    )
    | {"entries": record(dict.fromkeys(("changes", "runtime", "reboot", "in_sync"), COUNT))}
    | {"writes": record(dict.fromkeys(("total", "runtime", "reboot"), COUNT))}
)
PLAN_BODY: dict[str, Schema] = {
    "status": {"enum": ["in-sync", "changes"]},
    "profile": STRING,
    "changes": listed(CHANGE),
    "pending": listed(PENDING),
    "checks": listed(CHECK),
    "notes": listed(NOTE),
    "in_sync_knobs": listed(IN_SYNC),
    "summary": SUMMARY,
}
RUN_ID: Schema = {"type": ["string", "null"]}
GATE = record({"probe": STRING, "message": STRING})
PROBE = record(
    {
        "name": STRING,
        "unit": STRING,
        "values": listed({"type": "number"}),
        "median": {"type": ["number", "null"]},
        "error": TEXT,
    }
)
ROLLED_BACK = record(
    {
        "run": STRING,
        "status": {"enum": ["rolled-back", "already-rolled-back", "failed"]},
        "restored": COUNT,
        "unchanged": COUNT,
        "failures": STRINGS,
    }
)
RUN_ROW = record(
    {
        "run_id": STRING,
        "started": TEXT,
        "finished": TEXT,
        "profile": TEXT,
        "phase": TEXT,
        "outcome": STRING,
        "changes": COUNT,  # profile entries the run changed
        "writes": COUNT,  # knobs it wrote
    }
)
FINDING = record(
    {"id": STRING, "priority": STRING, "actionable": {"type": "boolean"}, "observed": TEXT}
)


def _document(kind: str, body: dict[str, Schema], host: Schema | None = HOST) -> Schema:
    head: dict[str, Schema] = {"format_version": {"const": FORMAT_VERSION}, "kind": {"const": kind}}
    # A fleet names each document's host as its inventory or -H did.
    return record(head | ({"host": host} if host else {}) | body, {"target": STRING})


def _error(kind: str) -> Schema:
    """A host a fleet command could not read or work on."""
    return _document(kind, {"status": {"const": "error"}, "error": STRING})


BODIES: dict[str, dict[str, Schema]] = {
    "plan": PLAN_BODY,
    "check": {
        "status": STRING,
        "compared": {"type": "boolean"},
        "profile": STRING,
        "drift": listed(CHANGE),
        "not_applied": listed(CHANGE),
        "failed_checks": listed(CHECK),
        "changed_after_apply": {
            "anyOf": [
                {"type": "null"},
                listed(
                    record(
                        {
                            "id": STRING,
                            "current": VALUE,
                            "written": VALUE,
                            "shown": record({"current": STRING, "written": STRING}),
                            "first_seen": TEXT,
                        }
                    )
                ),
            ]
        },
        "pending": listed(PENDING),
        "in_sync": COUNT,
        "notes": listed(NOTE),
        "undone": {"type": "boolean"},  # runs recorded, none that applied is in effect
        "summary": record(
            dict.fromkeys(
                ("drift", "not_applied", "in_sync", "pending", "checks", "failed_checks"), COUNT
            )
            # Profile entries, as the text counts them; `compared`: those in sync or drifted.
            | {
                "entries": record(
                    dict.fromkeys(("drift", "compared", "not_applied", "in_sync"), COUNT)
                )
            }
        ),
    },
    "apply": {
        "status": {"enum": ["applied", "in-sync", "rolled-back", "error", "dry-run"]},
        # The profile entries the run changed and the knobs it wrote (null: none ran).
        "changes": {"type": ["integer", "null"]},
        "writes": {"type": ["integer", "null"]},
        "run": RUN_ID,
        # What --skip-missing left out: the change and, in the host's words, what it lacks.
        "skipped": listed(record({"id": STRING, "reason": STRING})),
    },
    "rollback": {"runs": listed(ROLLED_BACK)},
    "verify": {
        "status": {"enum": ["verified", "nothing-pending"]},
        "run": RUN_ID,
        "held": STRINGS,
        "promoted": {"type": "boolean"},
        "kept_gates": listed(GATE),
    },
    # status.json's fields (`steps.status.Status`): null where not known yet.
    "status": {
        "profile": TEXT,
        "profile_digest": TEXT,
        "updated": TEXT,
        "updated_by": {"enum": ["apply", "verify", "check", "rollback", None]},
        "boot_id": TEXT,
        "in_sync": {"type": ["boolean", "null"]},
        "drift": {"anyOf": [COUNT, {"type": "null"}]},
        "reboot_pending": {"type": "boolean"},
        "armed": {"type": "boolean"},
        "pending_run": TEXT,
        "last_run": TEXT,
        "last_verification": {
            "anyOf": [
                {"type": "null"},
                record(
                    {
                        "boot_id": STRING,
                        "run_id": STRING,
                        "verdict": {"enum": ["held", "failed", "not-rebooted"]},
                        "at": STRING,
                    }
                ),
            ]
        },
    },
    "history": {"runs": listed(RUN_ROW)},
    "report": {
        "run": record({"run_id": STRING, "outcome": STRING, "profile": TEXT, "phase": TEXT}),
        "changes": {"type": "array"},
        "probes": {"type": "array"},
    },
    "audit": {
        "status": {"enum": ["clean", "actionable"]},
        "findings": listed(FINDING),
        "good": {"type": "array"},
        "not_issues": {"type": "array"},
    },
    "probe": {"probes": listed(PROBE), "gates": listed(GATE)},
    "snapshot": {"archive": STRING, "files": COUNT, "profile": STRING},
    "validate": {
        "profile": STRING,
        "valid": {"type": "boolean"},
        "name": TEXT,
        "files": STRINGS,
        "problems": STRINGS,
    },
    "profiles": {
        "profiles": listed(record({"name": STRING, "description": TEXT, "path": STRING})),
    },
    "config": {
        # A setting's value is what its key takes: a path, a number, a flag, or null (unset).
        "settings": listed(record({"key": STRING, "value": {}, "source": STRING})),
    },
}
ROLLOUT_STATES = {"enum": ["not-started", "in-flight", "done", "failed", "rolled-back"]}
CONFIGURATION = {"enum": ["prior", "new", "pending", "unknown"]}
# A rollout: each host as it moves (a JSON line, with `host`), and the rollout itself (`tune
# rollout status`, the last line of a rollout): null `rollout` when none is journaled.
ROLLOUT_HOST = _document(
    "rollout",
    {
        "rollout": STRING,
        "wave": COUNT,
        "state": ROLLOUT_STATES,
        "step": STRING,
        "configuration": CONFIGURATION,
        "run": TEXT,
        # The profile entries its run changes and the knobs it writes; `changes` is null in a
        # rollout a tune of format 1 journaled (it counted the writes).
        "changes": {"anyOf": [COUNT, {"type": "null"}]},
        "writes": COUNT,
        "exit_code": {"type": ["integer", "null"]},
        "why": TEXT,
        "elapsed_s": {"type": ["number", "null"]},
    },
    record({"name": STRING}),
)
ROLLOUT = record(
    {
        "format_version": {"const": FORMAT_VERSION},
        "kind": {"const": "rollout"},
        "rollout": TEXT,
    },
    {
        "profile": STRING,
        "digest": STRING,
        "stopped": TEXT,
        "waves": listed(STRINGS),
        "counts": {"type": "object", "additionalProperties": COUNT},
        "configurations": {"type": "object", "additionalProperties": STRINGS},
        "hosts": listed(ROLLOUT_HOST),
    },
)
# `tune rollout list`: every rollout the controller knows, newest first; a journal it cannot
# read, with why.
ROLLOUT_LISTED = record(
    {
        "rollout": STRING,
        "created": STRING,
        "state": {"enum": ["finished", "stopped", "interrupted"]},
        "profile": STRING,
        "stopped": TEXT,
        "hosts": COUNT,
        "waves": COUNT,
        "counts": {"type": "object", "additionalProperties": COUNT},
    }
)
ROLLOUT_UNREADABLE = record({"rollout": STRING, "state": {"const": "unreadable"}, "error": STRING})
ROLLOUT_LIST = record(
    {
        "format_version": {"const": FORMAT_VERSION},
        "kind": {"const": "rollout"},
        "rollouts": listed({"anyOf": [ROLLOUT_LISTED, ROLLOUT_UNREADABLE]}),
    }
)
# The commands that take several hosts write a list of the one-host documents.
FLEET = frozenset({"plan", "check", "apply", "audit", "history"})
# What reads no host: a profile, or tune itself.
NO_HOST = frozenset({"validate", "profiles", "config"})


def schema_of(kind: str) -> Schema:
    if kind == "rollout":
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"tune rollout status --format json, format_version {FORMAT_VERSION}; "
            "each line of a rollout's --format json; tune rollout list --format json",
            "anyOf": [ROLLOUT, ROLLOUT_HOST, ROLLOUT_LIST],
        }
    one = _document(kind, BODIES[kind], None if kind in NO_HOST else HOST)
    if kind == "apply":  # a fleet's apply or dry run shows each host's plan
        one["properties"]["plan"] = _document("plan", PLAN_BODY)
    if kind in FLEET:
        one = {"anyOf": [one, _error(kind)]}
        shape: Schema = {"anyOf": [one, listed(one)]}
    else:
        shape = one
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"tune {kind} --format json, format_version {FORMAT_VERSION}",
        **shape,
    }


SCHEMAS: dict[str, Schema] = {kind: schema_of(kind) for kind in KINDS}
