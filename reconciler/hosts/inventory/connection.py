"""Where and how to reach an inventory host: the connection variables tune honours, read the
way Ansible's ssh connection reads them, and those it cannot honour, refused by name."""

from __future__ import annotations

from typing import Any

from ...core.errors import InventoryError
from ...facts import numbers
from ..targets import Target, host_problem, user_problem
from .values import Unknowable

# Each field of a Target, from the LAST of these variables that is set: the order of the ssh
# connection plugin's option `vars`, which Ansible's config manager walks letting each defined
# one replace the one before (so ansible_ssh_host beats ansible_host).
CONNECTION_VARS = {
    "host": ("ansible_host", "ansible_ssh_host"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "identity_file": ("ansible_private_key_file", "ansible_ssh_private_key_file"),
    "become": ("ansible_become", "ansible_sudo"),
    "become_method": ("ansible_become_method",),
    "become_user": ("ansible_become_user", "ansible_sudo_user"),
    "connection": ("ansible_connection",),
}
# Options Ansible passes to ssh that change where or how it connects: tune reads ssh_config
# instead, so a run that ignored them would reach another way than Ansible does.
SSH_ARGS = ("ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args")
SSH_CONNECTIONS = (None, "ssh", "smart", "paramiko", "paramiko_ssh", "ansible.builtin.ssh")
TRUE = frozenset({"true", "yes", "on", "1", "y", "t"})
FALSE = frozenset({"false", "no", "off", "0", "n", "f"})


def to_target(name: str, variables: dict[str, Any], source: str) -> Target:
    def pick(field: str) -> Any:
        for key in reversed(CONNECTION_VARS[field]):
            value = variables.get(key)
            if isinstance(value, Unknowable):
                raise InventoryError(
                    f"{value.where}: {key} of {name} is {value.why}; tune cannot read it "
                    "(write the value plainly, or set it in ~/.ssh/config)."
                )
            if value not in (None, ""):
                return value
        return None

    said = f"{source}: {name}:"
    for key in SSH_ARGS:
        if variables.get(key):
            raise InventoryError(
                f"{said} {key} is set; tune does not pass options to ssh: put them in an "
                "ssh_config (~/.ssh/config or --ssh-config), which tune reads."
            )
    connection = pick("connection")
    if connection not in SSH_CONNECTIONS:
        raise InventoryError(f"{said} ansible_connection={connection}; tune connects over SSH.")
    port = _port(pick("port"), said)
    become = _boolean(pick("become"), f"{said} ansible_become")
    if become:
        method, user = pick("become_method"), pick("become_user")
        if method not in (None, "sudo"):
            raise InventoryError(f"{said} ansible_become_method={method}; tune uses sudo.")
        if user not in (None, "root"):
            raise InventoryError(f"{said} ansible_become_user={user}; tune works as root.")
    user, key = pick("user"), pick("identity_file")
    host = str(pick("host") or name)
    user = None if user is None else str(user)
    # The name too: a hook is given it (TUNE_HOST), and it is the host where ansible_host is not
    # set.
    for what, problem in (
        ("the inventory name", host_problem(name)),
        ("ansible_host", host_problem(host)),
        ("ansible_user", None if user is None else user_problem(user)),
    ):
        if problem is not None:
            raise InventoryError(f"{said} {what}: {problem}; tune refuses the host.")
    return Target(
        name=name,
        host=host,
        user=user,
        port=port,
        identity_file=None if key is None else str(key),
        sudo=become,
    )


def _port(value: Any, said: str) -> int | None:
    """A port as ssh takes one: decimal digits alone (no sign, no space, no `yes`)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        port: int | None = value
    else:
        port = numbers.unsigned(value) if isinstance(value, str) else None
    if port is None:
        raise InventoryError(f"{said} ansible_port '{value}' is not a number.")
    if not 0 < port < 65536:
        raise InventoryError(f"{said} ansible_port {port} is out of range.")
    return port


def _boolean(value: Any, what: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise InventoryError(f"{what} {value!r} is not a boolean.")
