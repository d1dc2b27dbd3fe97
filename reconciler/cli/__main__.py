"""`python -m reconciler.cli`: the `tune` command."""

from .main import main

main()
