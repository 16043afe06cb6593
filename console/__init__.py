"""leasectl: an operator console for long-running agent tool calls kept in PostgreSQL."""

__version__ = "0.1.0"
