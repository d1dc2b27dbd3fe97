# Copyright: tune developers
# Apache-2.0 (see the repository's LICENSE)
"""What the tune.gpu modules share: finding `tune` on the managed host, running it with
`--format json`, and reading what it said. Runs on the managed host under whatever Python it
has (3.8 on older LTS distributions): standard library and ansible's module_utils only."""

import json

# tune's exit codes that the modules tell apart (README "Conventions", core/errors.py).
IN_SYNC = 0
HOST_ERROR = 1
CHANGES = 2
APPLY_FAILED = 3
# `tune verify` before the boot that tune armed or prepared: the same boot id.
NOT_REBOOTED = 10

COMMON_OPTIONS = {
    "executable": {"type": "path"},
    "extra_args": {"type": "list", "elements": "str", "default": []},
}


def tune_command(module):
    """The argv prefix for tune: `executable`, or `tune` on the managed host's PATH (and the
    sbin directories, as ansible looks there too)."""
    executable = module.params.get("executable")
    if executable:
        return [executable]
    return [module.get_bin_path("tune", required=True)]


def run_tune(module, args, cwd=None, extra=True):
    """`tune ARGS...` on the managed host, with the task's `extra_args` unless not `extra`:
    (rc, stdout, stderr, argv). Never through a shell: profile paths and digests are argv
    words."""
    argv = tune_command(module) + list(args)
    if extra:
        argv += list(module.params.get("extra_args") or [])
    rc, out, err = module.run_command(argv, cwd=cwd)
    return rc, out, err, argv


def message(err, rc):
    """tune's own sentence for a failure: the last paragraph of its standard error (before it,
    a JSON run may have written the plan it showed and its progress)."""
    paragraphs = [p.strip() for p in (err or "").split("\n\n") if p.strip()]
    if paragraphs:
        return paragraphs[-1]
    return f"tune exited {rc} and said nothing on standard error"


def document(out):
    """The one JSON document tune wrote on standard output, or None."""
    text = (out or "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def fail(module, rc, out, err, argv, changed=False, **extra):
    """The task failed, with tune's sentence as `msg` and its exit code as `rc`."""
    module.fail_json(
        msg=message(err, rc), rc=rc, stdout=out, stderr=err, cmd=argv, changed=changed, **extra
    )
