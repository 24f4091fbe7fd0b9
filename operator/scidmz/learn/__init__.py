"""scidmz.learn."""
