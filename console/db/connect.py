"""Connections with our own limits, query execution by file name, and error translation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg.rows import dict_row
from pydantic import BaseModel, TypeAdapter

from console.db import sql
from console.db.pooler import (
    LeasectlConnection,
    Pooler,
    PoolerSetting,
    judge,
    per_transaction,
    pooler_setting,
    send,
    set_up_transaction,
    transaction_setup,
)
from console.shared.config import APPLICATION_NAME, CONSOLE_LIMITS, SessionLimits
from console.shared.dsn import mask_secrets
from console.shared.errors import (
    BadInput,
    DatabaseUnavailable,
    Deadlocked,
    LeasectlError,
    OutcomeUnknown,
    PermissionDenied,
    ProtocolViolation,
    ReadOnlySession,
    RowLocked,
    SchemaError,
    StatementTimedOut,
)

Row = dict[str, Any]
Conn = psycopg.Connection[Row]


def connect(
    dsn: str,
    *,
    limits: SessionLimits = CONSOLE_LIMITS,
    read_only: bool = False,
    application_name: str = APPLICATION_NAME,
    autocommit: bool = True,
    connect_timeout: int = 5,
) -> Conn:
    """Open a session with application_name and our timeouts; read-only in the database if asked.

    Behind a connection pooler in transaction mode (console.db.pooler: LEASECTL_POOLER, or found
    by itself) nothing is set for the session: the timeouts and read-only mode go with every
    transaction instead, and no statement is prepared."""
    try:
        conn = LeasectlConnection.connect(
            dsn,
            autocommit=autocommit,
            row_factory=dict_row,
            application_name=application_name,
            connect_timeout=connect_timeout,
        )
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(f"cannot connect to the database: {mask_secrets(_first_line(exc), dsn)}",
                                  hint="check --dsn, LEASECTL_DSN, DATABASE_URL or PG* variables") from None
    except psycopg.ProgrammingError as exc:  # a malformed conninfo string, which libpq quotes: masked
        raise BadInput(f"bad connection string: {mask_secrets(_first_line(exc), dsn)}") from None
    try:
        conn.pooler = find_pooler(conn)
        if conn.pooler is None or conn.pooler.keeps_sessions:
            run(
                conn,
                "meta/session_setup",
                statement_timeout=f"{limits.statement_timeout_ms}ms",
                lock_timeout=f"{limits.lock_timeout_ms}ms",
                idle_in_transaction_session_timeout=f"{limits.idle_in_transaction_ms}ms",
                read_only="on" if read_only else "off",
                plan_cache_mode=limits.plan_cache_mode,
                work_mem=f"{limits.work_mem_mb}MB" if limits.work_mem_mb else None,
            )
        else:
            if not conn.pooler.prepares:
                conn.prepare_threshold = None
            conn.per_transaction = transaction_setup(limits, read_only=read_only)
            if not autocommit:  # the question above opened a transaction: the next one sets our limits
                conn.commit()
    except BaseException:
        conn.close()
        raise
    return conn


def find_pooler(conn: Conn, setting: PoolerSetting | None = None) -> Pooler | None:
    """The pooler `conn` goes through (console.db.pooler), by LEASECTL_POOLER or, with `auto`, by
    asking the server which process answers (queries/meta/backend.sql, one round trip). Behind a
    transaction pooler, a server that writes dates other than in ISO is asked to write them in ISO
    for this client (meta/datestyle_iso.sql: a pooler keeps DateStyle per client), as
    session_setup does for a session of our own."""
    setting = setting or pooler_setting()
    if setting in ("none", "session"):
        return judge(setting, started_as=None, answered_by=None)
    row = run_one(conn, "meta/backend")
    assert row is not None  # `Zero rows: never`
    pooler = judge(setting, started_as=conn.info.backend_pid, answered_by=row["backend_pid"])
    if pooler is not None and not pooler.keeps_sessions and not row["iso_dates"]:
        run(conn, "meta/datestyle_iso")
    return pooler


def assume_auditor(conn: Conn) -> None:
    """Make a read-only session read-only by privilege too: the leasectl_auditor role, where the
    login may take it (meta/assume_auditor.sql) -- behind a transaction pooler, in each transaction."""
    setup = per_transaction(conn)
    if setup is None:
        run(conn, "meta/assume_auditor")
        return
    row = run_one(conn, "meta/auditor_role")
    if row is not None:
        setup["role"] = row["role"]


def set_display_clock(conn: Conn, clock: str | None) -> None:
    """Pin the read views' clock (leasectl_now()) to an instant, or back to now() with None
    (meta/display_clock.sql) -- behind a transaction pooler, in each transaction."""
    setup = per_transaction(conn)
    if setup is None:
        run(conn, "meta/display_clock", clock=clock)
    else:
        setup["clock"] = clock


def run(conn: Conn, name: str, /, **params: Any) -> list[Row]:
    """Execute `queries/<name>.sql` with named parameters; return its rows (empty if none)."""
    query = sql.load(name)
    values = query.bind(params)
    try:
        # always a mapping, even empty: psycopg then un-escapes the %% the loader wrote
        cur = send(conn, query, values)
        return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise translate_error(exc, query.path) from exc


def run_one(conn: Conn, name: str, /, **params: Any) -> Row | None:
    rows = run(conn, name, **params)
    return rows[0] if rows else None


def ping(conn: Conn) -> None:
    """One round trip (queries/meta/ping.sql): DatabaseUnavailable if the connection is dead."""
    run(conn, "meta/ping")


@contextmanager
def action_transaction(conn: Conn, what: str, *, look: str) -> Iterator[None]:
    """BEGIN ... COMMIT around an action, whose lost connection is told apart by when it was lost.

    Before COMMIT was sent (at BEGIN, or in any statement of the block) the transaction cannot
    have committed -- PostgreSQL rolls back a transaction whose session ends -- so nothing was
    applied, and the DatabaseUnavailable raised says so: sending it again is safe. While COMMIT
    was in flight the server may have committed and died before answering: that is
    OutcomeUnknown, which nothing retries (`look` says where the truth is: the journal). BEGIN
    and COMMIT are psycopg's, not `run`'s, so their errors are translated here."""
    committing = False
    try:
        with conn.transaction():
            yield
            committing = True
    except (psycopg.Error, DatabaseUnavailable) as exc:
        error = exc if isinstance(exc, LeasectlError) else translate_error(exc, what)
        if not isinstance(error, DatabaseUnavailable):
            if error is exc:
                raise
            raise error from exc
        if committing:
            raise OutcomeUnknown(f"database unreachable: the connection was lost while {what} was being "
                                 "committed; it is unknown whether it was applied",
                                 hint=f"do not simply send it again: {look}") from exc
        raise DatabaseUnavailable(f"{error}. {what[0].upper()}{what[1:]} was not committed: nothing was "
                                  "applied") from exc


Model = TypeVar("Model", bound=BaseModel)


@cache
def _list_of(model: type[BaseModel]) -> TypeAdapter[Any]:
    return TypeAdapter(list[model])  # type: ignore[valid-type]


def rows_as(model: type[Model], rows: list[Row]) -> list[Model]:
    """`rows` as `model`s, validated in one call and strictly: psycopg has already typed every
    value (datetime, UUID, int), so nothing needs coercing, and over 100,000 rows one strict list
    validation takes about half the time of a lax model_validate per row (tests/bench/audit.py's
    jobs --at)."""
    return _list_of(model).validate_python(rows, strict=True)


def lines_as(model: type[Model], lines: list[str]) -> list[Model]:
    """Rows the server wrote as JSON objects (one per line), as `model`s: validated strictly from
    the JSON in one call, without building a dict per row first."""
    return _list_of(model).validate_json("[" + ",".join(lines) + "]", strict=True)


def execute_script(conn: Conn, script: str) -> None:
    """Run a whole migration file as the server would from psql -f (no parameters)."""
    try:
        set_up_transaction(conn)  # a script is many statements: it cannot share a pipeline
        conn.execute(script.encode(), prepare=False)
    except psycopg.Error as exc:
        raise translate_error(exc, "migration") from exc


def translate_error(exc: psycopg.Error, where: str) -> LeasectlError:
    """Turn a driver error into one a person can act on. The SQLSTATE decides, not the text."""
    state = exc.sqlstate or ""
    detail = _first_line(exc)
    if isinstance(exc, pgerrors.LockNotAvailable) or state == "55P03":
        return RowLocked("row is locked by another transaction (lock_timeout)",
                         hint="someone holds a lock on this call; try again, or find the "
                              "blocking session in pg_stat_activity")
    if isinstance(exc, pgerrors.DeadlockDetected) or state == "40P01":
        return Deadlocked("deadlock with another transaction: the statement was rolled back, nothing changed",
                          hint="another session locked the same rows in the other order; try again")
    if isinstance(exc, pgerrors.QueryCanceled) or state == "57014":
        return StatementTimedOut(f"statement timeout: {where} ran too long",
                                 hint="the database is slow or overloaded")
    if state == "25006":
        return ReadOnlySession("refused: this session is read-only")
    identity_hint = ("give the worker a worker_id bound to its login (queries/worker/check_identity.sql "
                     "says which), or give each worker its own login role")
    if state == "LCS08":  # a worker id not bound to the login: the database names both
        return PermissionDenied(detail, hint=exc.diag.message_hint or identity_hint)
    if state == "42501" and "row-level security" in detail:
        # RLS says only "new row violates row-level security policy" (no login, no worker id):
        # say what the rule is; a claim under a foreign id gets the named LCS08 above instead
        return PermissionDenied("this write would leave a call that is not yours: a leasectl_worker login owns "
                                "and writes calls only as <login> or <login>:<name>, <login> being its own "
                                f"role ({detail})", hint=identity_hint)
    if state == "42501":
        return PermissionDenied(f"permission denied: {detail}",
                                hint="your database role lacks the privilege for this action")
    if state.startswith("LC"):
        return ProtocolViolation(f"refused by the database: {detail}")
    if state in ("22P02", "22007", "22008", "22023", "23514", "23502", "23503", "23505", "22003"):
        return BadInput(f"bad input: {detail}")
    # the server ended the session: a restart or shutdown (57P01-57P03), pg_terminate_backend
    # (57P01), the database dropped (57P04), an idle or idle-in-transaction timeout (57P05, 25P03).
    # The connection is gone whatever the reason: dropped, and made again on the next use
    disconnected = state.startswith(("08", "57P")) or state == "25P03"
    if isinstance(exc, psycopg.OperationalError) or disconnected:
        return DatabaseUnavailable(f"database unreachable: connection lost ({detail})")
    if state in ("42P01", "42883", "42703"):
        return SchemaError(f"the schema is missing or out of date ({detail})",
                           hint="run `leasectl migrate`")
    return LeasectlError(f"database error in {where}: {detail}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
