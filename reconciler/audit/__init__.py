"""`tune audit`: find what is wrong with a GPU host without a profile, and write the profile
that fixes it. `rules/` holds the rules (one module per area), `engine.audit` runs them on one
observation, `suggest.py` writes the profile; the reports are renderers (`render.audit`,
`render.audit_fleet`) and the command is `cli.audit`. Nothing is imported here."""
