"""scidmz.control."""
