"""The read side: observe a host in one batch, diff it against a profile, and the plan as data."""
