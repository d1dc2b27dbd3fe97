"""The flow of a command: `tune apply`'s two phases over one host or many, above the engines
(`apply`) and the boot (`boot`) it drives. It returns data and asks only the questions it must;
the CLI renders what comes back."""
