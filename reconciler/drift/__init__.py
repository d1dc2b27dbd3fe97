"""`tune check`: how a host has drifted from its profile, and the metrics that say so."""
