"""`tune audit`: find what is wrong with a GPU host without a profile, and write the profile
that fixes it. `rules/` holds the rules (one module per area), `engine.audit` runs them on one
observation, `suggest.py` writes the profile, `render.py` the reports. Nothing is imported
here, so that registering the command costs other commands nothing."""
