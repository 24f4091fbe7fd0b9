"""The real-TCP lab: the paper testbed in network namespaces."""
