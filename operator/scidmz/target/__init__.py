"""scidmz.target."""
