"""Facts of a host that several consumers share (the knob kinds, `checks`, the audit, boot
verification), parsed from observed `Files`: PCI devices and their configuration space, CPUs,
the running kernel, kernel modules, NUMA nodes, sysctl names, the kernel command line, LXC
container configs. Each module owns the kernel paths it reads. Kinds import facts, never the
other way."""
