"""Facts of a host that several consumers share (kinds, checks, the audit): the kernel command
line, LXC container configs, PCI configuration space, parsed from observed files."""
