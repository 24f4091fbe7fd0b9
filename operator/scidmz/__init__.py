"""scidmz: keeps Science DMZ transfers at their target rate on a shared campus link."""

__version__ = "0.1.0"
