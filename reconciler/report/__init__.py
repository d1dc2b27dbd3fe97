"""`tune report`: the record of one run, read back from its journal."""
