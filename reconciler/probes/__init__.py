"""Probes: measurements that show whether tuning helped (bandwidth, tokens per second).

A probe is an argv (no shell) or a builtin; its metric is a number parsed from its output. Probes
run before and after each apply phase, and gates decide whether a phase made things worse.
"""
