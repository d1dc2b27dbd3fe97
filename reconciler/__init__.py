"""tune: tuning-as-code for Linux GPU inference hosts."""

import os

# The one place the version is written: pyproject.toml reads it (tool.setuptools.dynamic).
__version__ = "0.2.0"

# tune uses no pydantic plugins; without this, pydantic scans every installed distribution's
# entry points on the first model it builds, a fixed cost of each `tune` process. Children
# (probe commands) get the environment without it: see `child_environment`.
_OWN_SETTING = "PYDANTIC_DISABLE_PLUGINS" not in os.environ
if _OWN_SETTING:
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"


def child_environment() -> dict[str, str]:
    """This process's environment, less what tune set only for itself."""
    env = dict(os.environ)
    if _OWN_SETTING:
        env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    return env
