"""Profiles: the YAML that declares a host's desired state, its schema, and the validated cache."""
