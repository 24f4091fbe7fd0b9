"""scidmz.api."""
