"""Hosts: this machine, a snapshot directory or archive, an SSH host, and fleets of them. Each
answers one batched `Request` with `Files`; only the write side calls their write methods."""
