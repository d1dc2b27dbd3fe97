"""Inventory values tune cannot know without Ansible itself, kept where they were read.

A value encrypted with Ansible Vault or written as a Jinja template is read as `Unknowable`,
not as text: only when tune needs that variable (to know where and how to connect) does it
become an error, naming the file and line. A vaulted database password in `group_vars/all`
is not tune's business; a templated `ansible_host` is, and tune never guesses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.bounded import (
    MAX_INVENTORY_BYTES,
    MAX_INVENTORY_VALUES,
    TooManyValues,
    counting_composer,
    read_bounded,
)
from ...core.errors import InventoryError, reason

VAULT_HEADER = "$ANSIBLE_VAULT;"
TEMPLATE_MARKS = ("{{", "{%")


@dataclass(frozen=True)
class Unknowable:
    """A value tune cannot read: `where` is "file:line", `why` finishes "it is ..."."""

    where: str
    why: str


def text_value(value: str, where: str) -> str | Unknowable:
    """A plain string as Ansible would see it, or why tune cannot know what it stands for."""
    if value.lstrip().startswith(VAULT_HEADER):
        return Unknowable(where, "encrypted with Ansible Vault")
    if any(mark in value for mark in TEMPLATE_MARKS):
        return Unknowable(where, "a Jinja template")
    return value


def read_text(path: str | Path, what: str) -> str:
    """A file of the inventory; one encrypted as a whole with Ansible Vault is refused (tune
    cannot know which variables it sets)."""
    try:
        text = read_bounded(path, MAX_INVENTORY_BYTES, what).decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(f"{path}: cannot read {what} ({reason(exc)}).") from exc
    if text.lstrip().startswith(VAULT_HEADER):
        raise InventoryError(
            f"{path}:1: the file is encrypted with Ansible Vault; tune cannot decrypt it "
            "(keep connection variables in a plain file)."
        )
    return text


def load_yaml(text: str, source: str) -> Any:
    """YAML as Ansible's loader reads it: `!vault` and templated strings become `Unknowable`,
    `!unsafe` is plain text, any other tag is an error naming the line."""
    # Only YAML inventories pay for the YAML parser: `tune plan -H` over a fleet does not.
    from ruamel.yaml import YAML
    from ruamel.yaml.constructor import SafeConstructor
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.nodes import Node, ScalarNode

    def where(node: Node) -> str:
        return f"{source}:{node.start_mark.line + 1}"

    class AnsibleConstructor(SafeConstructor):
        def construct_yaml_str(self, node: Node) -> Any:
            return text_value(super().construct_yaml_str(node), where(node))

        def construct_vault(self, node: Node) -> Unknowable:
            return Unknowable(where(node), "encrypted with Ansible Vault")

        def construct_unsafe(self, node: Node) -> Any:
            if not isinstance(node, ScalarNode):
                raise InventoryError(f"{where(node)}: !unsafe on something not a string.")
            return str(node.value)

    for tag, construct in (
        ("tag:yaml.org,2002:str", AnsibleConstructor.construct_yaml_str),
        ("!vault", AnsibleConstructor.construct_vault),
        ("!unsafe", AnsibleConstructor.construct_unsafe),
    ):
        AnsibleConstructor.add_constructor(tag, construct)

    yaml = YAML(typ="safe", pure=True)
    yaml.Constructor = AnsibleConstructor
    yaml.Composer = counting_composer(MAX_INVENTORY_VALUES)
    try:
        return yaml.load(text)
    except TooManyValues as exc:
        raise InventoryError(
            f"{source}:{exc.line}: more than {exc.limit:,} keys, values and list items (aliases "
            "count what they repeat), the most tune reads in an inventory file."
        ) from None
    except RecursionError:
        raise InventoryError(f"{source}: nested too deep for tune to read.") from None
    except ValueError:
        # A scalar YAML resolves to a number or a date that Python will not build: an integer
        # of more than 4,300 digits (CVE-2020-10735's limit), a 13th month.
        raise InventoryError(
            f"{source}: a value tune cannot read (an integer of thousands of digits, or a date "
            "that does not exist)."
        ) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "not valid YAML"
        raise InventoryError(f"{source}{line}: {problem}.") from exc
    except YAMLError as exc:
        raise InventoryError(f"{source}: not valid YAML ({exc}).") from exc
