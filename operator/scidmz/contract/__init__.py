"""The contracts the parts of scidmz share, and nothing else: the network state y(t) and its
wire codec, the P4 pipeline's names and encodings, the shaper's sizing rule and the numba
helper. telemetry, control, switch and netsim depend on this package, not on each other."""
