"""``python -m scidmz.cli``: the same command as the ``scidmz`` entry point."""

from scidmz.cli import app

app()
