"""leasectl's rules, with no I/O and no UI: the states and what may follow what, the actions an
operator may take and what each may apply to, the one filter grammar, the one ownership replay,
the rows that cross layers. The database enforces the protocol (migrations/); these are the same
rules as the console, the CLI and the worker read them (import-linter keeps this package free of
database drivers, terminals and files: pyproject.toml)."""
