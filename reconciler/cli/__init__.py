"""The `tune` command: options, subcommands, and the only place errors become exit codes."""

# Before the commands' modules make their classes: the methods dataclasses generates for them,
# compiled once and kept (`core.generated`).
from ..core import generated

generated.install()
