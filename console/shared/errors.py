"""Errors a user can read. Each carries the CLI exit code it maps to.

Exit codes (contract): 0 done, 1 anything else, 2 bad input, 3 refused by a guard, 4 a violation
found by `audit verify`. "Not allowed" (a read-only session, a role without the privilege) is not
"refused by a guard" (the call changed since you looked): it exits 1.
"""

from __future__ import annotations

EXIT_OK, EXIT_OTHER, EXIT_BAD_INPUT, EXIT_REFUSED, EXIT_VIOLATION = 0, 1, 2, 3, 4


class LeasectlError(Exception):
    """Base class: the message is meant for a human, no traceback needed."""

    exit_code = EXIT_OTHER
    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class BadInput(LeasectlError):
    """Unknown or ambiguous id, bad option value."""

    exit_code = EXIT_BAD_INPUT


class DatabaseUnavailable(LeasectlError):
    """Cannot connect, or the connection was lost."""


class OutcomeUnknown(DatabaseUnavailable):
    """The connection was lost while an action was being committed: the server may have committed
    it and died before saying so. Never sent again on its own (the journal says what happened);
    still an outage, so whatever shows "database unreachable" shows it for this one too."""


class RowLocked(LeasectlError):
    """lock_timeout: another transaction holds the row. Distinct from a slow statement."""


class Deadlocked(RowLocked):
    """deadlock_detected: PostgreSQL rolled the statement back to break a cycle of lock waits.
    Nothing of it happened, so whoever sent it may send it again, as after a lock timeout."""


class StatementTimedOut(LeasectlError):
    """statement_timeout: the statement itself ran too long."""


class PayloadSearchTimedOut(StatementTimedOut):
    """A `payload:` filter's search ran past the session's statement timeout: the filter's answer
    is unknown (not "no calls"), and the way out is a narrower filter, not a healthier database."""


class ReadOnlySession(LeasectlError):
    """The session is read-only (by --read-only, or the role cannot write): not allowed."""


class PermissionDenied(LeasectlError):
    """The database role lacks the privilege: not allowed."""


class ProtocolViolation(LeasectlError):
    """The database's state machine refused the change (SQLSTATE class LC)."""

    exit_code = EXIT_REFUSED


class SchemaError(LeasectlError):
    """The schema is missing, out of date, newer than this leasectl, or was altered."""
