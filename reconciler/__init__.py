"""tune: tuning-as-code for Linux GPU inference hosts."""

__version__ = "0.1.0"
