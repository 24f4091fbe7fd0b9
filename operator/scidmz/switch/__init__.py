"""scidmz.switch."""
