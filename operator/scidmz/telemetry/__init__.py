"""scidmz.telemetry."""
