# Copyright: tune developers
# Apache-2.0 (see the repository's LICENSE)

DOCUMENTATION = r"""
---
module: tune_verify
short_description: Judge the boot after a tune reboot-phase apply
version_added: "0.1.0"
description:
  - Runs C(tune verify --format json) on the managed host, after the reboot that a reboot-phase
    apply (M(tune.gpu.tune_apply) with C(phase=reboot), armed or not) prepared.
  - When the boot brought what the profile needs, tune keeps it (after a try-once boot, makes
    it the default) - C(verdict=held), C(changed=true).
  - When it did not, tune rolls the boot configuration back and the task fails -
    C(verdict=failed), C(rc=3), C(changed=true), C(msg) is tune's sentence saying what did not
    hold.
  - Before the reboot (the same boot as the apply), the task fails with C(verdict=not-rebooted)
    and writes nothing (tune's exit code 10; tune releases before it said 1).
  - With no reboot-phase apply pending, nothing happens - C(verdict=nothing-pending),
    C(changed=false).
  - Never reboots, drains or waits for anything.
options:
  executable:
    description:
      - The tune program on the managed host. Default, C(tune) on its C(PATH).
    type: path
  extra_args:
    description:
      - More arguments for C(tune verify) (for example C([--keep-on-regression])), each one argv
        word.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: none
    details: verify decides and writes (keeps or rolls back); check mode skips the task.
  diff_mode:
    support: none
notes:
  - The contract is docs/engines/ansible.md in tune's repository.
author:
  - tune developers
"""

EXAMPLES = r"""
- name: Reboot when a boot is pending
  ansible.builtin.reboot:
  when: boot.reboot_required

- name: Keep the new boot configuration, or roll it back
  tune.gpu.tune_verify:
  when: boot.reboot_required
"""

RETURN = r"""
verdict:
  description:
    - C(held) (kept), C(failed) (rolled back), C(not-rebooted) (the reboot has not happened
      yet), C(nothing-pending).
  returned: always
  type: str
  sample: held
run:
  description: The run whose boot was judged, when tune said it.
  returned: when verdict is held
  type: str
held:
  description: What tune found held after the boot, one line each.
  returned: when verdict is held
  type: list
  elements: str
promoted:
  description: Whether a try-once boot's configuration was made the default.
  returned: when verdict is held
  type: bool
rc:
  description: tune's exit code.
  returned: failure
  type: int
msg:
  description: On failure, tune's own sentence.
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tune.gpu.plugins.module_utils.tune_cli import (
    APPLY_FAILED,
    COMMON_OPTIONS,
    HOST_ERROR,
    IN_SYNC,
    NOT_REBOOTED,
    document,
    fail,
    run_tune,
)

ARGUMENT_SPEC = dict(**COMMON_OPTIONS)
# tune releases before exit code 10 said "not rebooted yet" with 1, in this sentence.
NOT_REBOOTED_SENTENCE = "has not rebooted since run"


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if module.check_mode:
        module.exit_json(skipped=True, changed=False, msg="tune verify decides and writes: skipped")
    rc, out, err, argv = run_tune(module, ["verify", "--format", "json"], cwd=module.tmpdir)
    if rc == NOT_REBOOTED or (rc == HOST_ERROR and NOT_REBOOTED_SENTENCE in (err or "")):
        fail(module, rc, out, err, argv, verdict="not-rebooted")
    if rc == APPLY_FAILED:
        fail(module, rc, out, err, argv, changed=True, verdict="failed")
    verified = document(out)
    if rc != IN_SYNC or verified is None or verified.get("kind") != "verify":
        fail(module, rc, out, err, argv, verdict="error")
    if verified.get("status") == "nothing-pending":
        module.exit_json(changed=False, verdict="nothing-pending")
    module.exit_json(
        changed=True,
        verdict="held",
        run=verified.get("run"),
        held=verified.get("held") or [],
        promoted=bool(verified.get("promoted")),
        kept_gates=verified.get("kept_gates") or [],
    )


if __name__ == "__main__":
    main()
