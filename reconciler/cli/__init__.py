"""The `tune` command: options, subcommands, and the only place errors become exit codes."""
