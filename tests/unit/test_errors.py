"""Database errors become errors a person can act on: the SQLSTATE decides, not the text."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors

from console.db.connect import translate_error
from console.shared import errors as ours


def error(sqlstate: str, message: str = "boom") -> psycopg.Error:
    return errors.lookup(sqlstate)(message)


@pytest.mark.parametrize("sqlstate, kind, exit_code, says", [
    ("55P03", ours.RowLocked, 1, "row is locked by another transaction"),
    ("40P01", ours.Deadlocked, 1, "rolled back, nothing changed"),
    ("57014", ours.StatementTimedOut, 1, "statement timeout"),
    ("25006", ours.ReadOnlySession, 1, "read-only"),
    ("42501", ours.PermissionDenied, 1, "permission denied"),
    ("22P02", ours.BadInput, 2, "bad input"),
    ("23514", ours.BadInput, 2, "bad input"),
    ("42P01", ours.SchemaError, 1, "leasectl migrate"),
    ("08006", ours.DatabaseUnavailable, 1, "connection lost"),
    ("57P01", ours.DatabaseUnavailable, 1, "connection lost"),
    ("57P05", ours.DatabaseUnavailable, 1, "connection lost"),  # idle_session_timeout ended the session
    ("25P03", ours.DatabaseUnavailable, 1, "connection lost"),  # so did idle_in_transaction_session_timeout
])
def test_sqlstates(sqlstate, kind, exit_code, says):
    translated = translate_error(error(sqlstate), "queries/x.sql")
    assert type(translated) is kind and translated.exit_code == exit_code
    assert says in str(translated) + (translated.hint or "")


def test_a_protocol_violation_is_refused_by_the_database_exit_3():
    class Violation(psycopg.Error):
        sqlstate = "LCS01"

    translated = translate_error(Violation("illegal transition running -> queued"), "queries/x.sql")
    assert isinstance(translated, ours.ProtocolViolation) and translated.exit_code == 3
    assert "refused by the database" in str(translated)


def test_anything_else_names_the_query():
    translated = translate_error(error("XX000", "weird"), "queries/views/triage.sql")
    assert type(translated) is ours.LeasectlError and "queries/views/triage.sql" in str(translated)


def test_exit_codes_are_the_contract():
    assert ours.BadInput.exit_code == 2 and ours.ProtocolViolation.exit_code == 3 and ours.EXIT_REFUSED == 3
    assert ours.ReadOnlySession.exit_code == 1 and ours.PermissionDenied.exit_code == 1, \
        "not allowed is not refused by a guard"


def test_a_deadlock_is_a_lock_wait_its_sender_may_retry():
    """The worker's final writes, its heartbeat and the console's actions retry or explain a
    RowLocked; a deadlock rolled the statement back just the same, so it takes the same road."""
    translated = translate_error(error("40P01", "deadlock detected"), "queries/worker/complete_and_claim.sql")
    assert isinstance(translated, ours.RowLocked)
