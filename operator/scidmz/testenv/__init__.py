"""scidmz.testenv."""
