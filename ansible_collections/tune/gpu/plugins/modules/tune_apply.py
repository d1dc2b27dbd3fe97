# Copyright: tune developers
# Apache-2.0 (see the repository's LICENSE)

DOCUMENTATION = r"""
---
module: tune_apply
short_description: Make a GPU host match a tune profile
version_added: "0.1.0"
description:
  - Runs C(tune apply PROFILE --yes --format json) on the managed host; tune must be installed
    there. tune journals every change before it writes it, reads it back, and rolls the whole
    run back on any failure.
  - In check mode, runs C(tune plan --format json) instead, which writes nothing on the host
    (its saved plan goes to the module's temporary directory, removed after the task).
  - In diff mode, shows each knob's before and after (the plan's C(current) and C(desired), as
    tune's own text shows them).
  - C(changed) is true only when the run wrote (tune reports a run with changes).
    C(reboot_required) says whether a boot is pending on the host, whoever prepared it, not
    whether this run changed boot configuration.
  - This module never reboots, drains or waits. Reboot with M(ansible.builtin.reboot) when
    C(reboot_required), then run M(tune.gpu.tune_verify).
options:
  profile:
    description:
      - The profile on the managed host, as C(tune apply) takes it (a path, a bundled profile's
        name or a URL).
    type: str
    required: true
  profile_digest:
    description:
      - The profile's digest (C(sha256:...)); tune refuses a profile that reads as another,
        before it reads the host. C(tune plan) prints it.
    type: str
  phase:
    description:
      - C(runtime) writes live settings only (C(--runtime-only)); C(reboot) only boot
        configuration (C(--reboot-phase)); C(all) both, tune's default.
    type: str
    choices: [all, runtime, reboot]
    default: all
  arm:
    description:
      - With C(phase=reboot), arrange a try-once boot instead of writing the boot configuration
        for good (C(tune apply --reboot-phase --arm)); the boot after the next reboot falls back
        to the old configuration unless C(tune.gpu.tune_verify) keeps the new one.
      - The host is not rebooted.
    type: bool
    default: false
  executable:
    description:
      - The tune program on the managed host. Default, C(tune) on its C(PATH).
    type: path
  extra_args:
    description:
      - More arguments for C(tune apply), and in check mode for C(tune plan), after the others
        (for example C([--no-persist])). Each is one argv word; no shell is involved.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - Exit codes and outputs are tune's; the contract is docs/engines/ansible.md in tune's
    repository.
  - A failed run is rolled back by tune before the task fails; the task's C(msg) is tune's
    sentence and C(rc) its exit code.
author:
  - tune developers
"""

EXAMPLES = r"""
- name: Live settings of the pinned profile
  tune.gpu.tune_apply:
    profile: /etc/tune/profiles/blackwell-8x.yaml
    profile_digest: "{{ tune_profile_digest }}"
    phase: runtime

- name: Boot configuration, armed for one try-once boot
  tune.gpu.tune_apply:
    profile: /etc/tune/profiles/blackwell-8x.yaml
    phase: reboot
    arm: true
  register: boot

- name: Reboot when a boot is pending
  ansible.builtin.reboot:
  when: boot.reboot_required

- name: What would change (writes nothing)
  tune.gpu.tune_apply:
    profile: blackwell-8x
  check_mode: true
  diff: true
"""

RETURN = r"""
changes:
  description:
    - The knobs the run changed (check mode, would change), one per knob, from tune's plan.
    - C(current) and C(desired) are tune's values (a string, a list of lines, or null when
      absent); C(shown) is the pair as tune's text shows it.
  returned: always
  type: list
  elements: dict
  sample:
    - id: sysctl:kernel.numa_balancing
      kind: sysctl
      target: kernel.numa_balancing
      phase: runtime
      current: "1"
      desired: "0"
      shown: {current: "1", desired: "0"}
      reason: automatic NUMA page migration moves pinned memory
run:
  description: The id of tune's run (its journal on the host), null when nothing was written.
  returned: always
  type: str
  sample: 20261207T061646Z-7752b4
reboot_required:
  description:
    - True when a boot is pending on the host - a reboot-phase apply waiting for its reboot
      (this run's or an earlier one's), or boot configuration written and not yet running.
    - In check mode, also true when the plan would change boot configuration.
  returned: always
  type: bool
pending:
  description:
    - What the host has configured but not running once the task is over (in check mode, now),
      from C(tune plan) - entries with C(action) C(reboot to apply) wait for the next boot,
      those with C(restart) for that unit's restart.
  returned: always
  type: list
  elements: dict
  sample:
    - id: cmdline:amd_pstate
      running: null
      configured: active
      action: reboot to apply
skipped:
  description: Changes tune left out (C(--skip-missing)), each with tune's line.
  returned: when not in check mode
  type: list
  elements: dict
plan:
  description: tune's plan document (C(tune plan --format json)) this task acted on.
  returned: always
  type: dict
rc:
  description: tune's exit code (on success there is none to report - Ansible fails any result
    with a non-zero C(rc), and C(tune plan) exits 2 when there are changes).
  returned: failure
  type: int
msg:
  description: On failure, tune's own sentence (the last paragraph of its standard error).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tune.gpu.plugins.module_utils.tune_cli import (
    CHANGES,
    COMMON_OPTIONS,
    IN_SYNC,
    document,
    fail,
    message,
    run_tune,
)

ARGUMENT_SPEC = dict(
    profile={"type": "str", "required": True},
    profile_digest={"type": "str"},
    phase={"type": "str", "choices": ["all", "runtime", "reboot"], "default": "all"},
    arm={"type": "bool", "default": False},
    **COMMON_OPTIONS,
)
PHASE_FLAGS = {"all": [], "runtime": ["--runtime-only"], "reboot": ["--reboot-phase"]}
# The fields of a change that the module returns; the rest (fix, how, label...) is in `plan`.
CHANGE_FIELDS = ("id", "kind", "target", "phase", "current", "desired", "shown", "reason")


def changes_of(plan):
    return [{k: c.get(k) for k in CHANGE_FIELDS if k in c} for c in plan.get("changes") or []]


def reboots_pending(plan):
    """The plan's pending entries that wait for a boot (the rest wait for a unit's restart)."""
    return [p for p in plan.get("pending") or [] if not p.get("restart")]


def shown(change, side):
    """One knob's value as tune's text shows it; a whole file, line by line."""
    value = change.get("current" if side == "before" else "desired")
    if change.get("whole_file") and isinstance(value, list):
        return value
    said = (change.get("shown") or {}).get("current" if side == "before" else "desired")
    if said is None:
        said = "(absent)" if value is None else str(value)
    return [said]


def diff_of(plan, host):
    """Ansible's before/after: a line per knob (`id = value`), a line per line of a whole file."""
    before, after = [], []
    for change in plan.get("changes") or []:
        for side, lines in (("before", before), ("after", after)):
            lines.extend(f"{change['id']} = {line}" for line in shown(change, side))
    return {
        "before_header": f"{host} (now)",
        "after_header": f"{host} (profile {plan.get('profile')})",
        "before": "\n".join(before) + ("\n" if before else ""),
        "after": "\n".join(after) + ("\n" if after else ""),
    }


def status_reboot_pending(module):
    """status.json's `reboot_pending` (`tune status --format json`), or None where this tune
    has no `status` command or no answer."""
    rc, out, _err, _argv = run_tune(module, ["status", "--format", "json"], extra=False)
    found = document(out) if rc == IN_SYNC else None
    value = found.get("reboot_pending") if found else None
    return value if isinstance(value, bool) else None


def profile_args(params, phases=True):
    args = [params["profile"]]
    if params.get("profile_digest"):
        args += ["--profile-digest", params["profile_digest"]]
    return args + (PHASE_FLAGS[params["phase"]] if phases else [])


def plan_of(module, phases=True, extra=True):
    """`tune plan --format json`, its saved plan kept in the module's own temporary directory
    (removed with it): (plan or None, rc, stdout, stderr, argv)."""
    args = ["plan", *profile_args(module.params, phases), "--format", "json"]
    args += ["--save", f"{module.tmpdir}/plan.json"]
    rc, out, err, argv = run_tune(module, args, cwd=module.tmpdir, extra=extra)
    plan = document(out)
    if rc not in (IN_SYNC, CHANGES) or plan is None or plan.get("kind") != "plan":
        return None, rc, out, err, argv
    return plan, rc, out, err, argv


def plan_only(module):
    """Check mode: the plan, and what it would leave waiting for a boot."""
    plan, rc, out, err, argv = plan_of(module)
    if plan is None:
        fail(module, rc, out, err, argv)
    boot_changes = any(c.get("phase") == "reboot" for c in plan.get("changes") or [])
    required = boot_changes or bool(reboots_pending(plan)) or bool(status_reboot_pending(module))
    return plan, {
        "changed": bool(plan.get("changes")),
        "run": None,
        "reboot_required": required,
        "pending": plan.get("pending") or [],
    }


def pending_after(module, done):
    """Whether a boot is pending once the run is over, and what the host has configured but
    not running: a boot this run armed or prepared (`boot_pending`), status.json's record, or
    the host's plan (both phases: what waits for the boot is no phase's change any more)."""
    required = bool(done.get("boot_pending")) or bool(status_reboot_pending(module))
    plan, rc, _out, err, _argv = plan_of(module, phases=False, extra=False)
    if plan is None:
        module.warn(f"tune plan after the apply failed (exit {rc}): {message(err, rc)}")
        return required, []
    return required or bool(reboots_pending(plan)), plan.get("pending") or []


def apply(module):
    params = module.params
    args = ["apply", *profile_args(params), "--yes", "--format", "json"]
    if params["arm"]:
        args.append("--arm")
    rc, out, err, argv = run_tune(module, args, cwd=module.tmpdir)
    done = document(out)
    if rc != IN_SYNC or done is None or done.get("kind") != "apply":
        fail(module, rc, out, err, argv, apply=done)
    run = done.get("run")
    required, pending = pending_after(module, done)
    return done.get("plan") or {}, {
        "changed": run is not None and bool(done.get("writes")),
        "run": run,
        "reboot_required": required,
        "pending": pending,
        "skipped": done.get("skipped") or [],
    }


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if module.params["arm"] and module.params["phase"] != "reboot":
        module.fail_json(msg="arm needs phase=reboot: it arms the boot configuration only.")
    plan, result = plan_only(module) if module.check_mode else apply(module)
    host = (plan.get("host") or {}).get("name") or "host"
    result.update(changes=changes_of(plan), plan=plan)
    if module._diff and plan.get("changes"):
        result["diff"] = diff_of(plan, host)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
