"""scidmz.netsim."""
