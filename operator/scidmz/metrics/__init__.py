"""scidmz.metrics."""
