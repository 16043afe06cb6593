"""Through a connection pooler: PgBouncer in transaction mode, and the poolers that work like it.

A pooler in transaction mode (PgBouncer's `pool_mode = transaction`) gives a client a server
connection for one transaction at a time, and the next transaction may run on another one, shared
with every client of the same login and database. What that changes for leasectl, and what it
does instead (README, "Through PgBouncer"):

* **no session state**: a `SET` made for a session (our timeouts, read-only, the auditor role, the
  display clock) would be missing from our next transaction and present in other clients' ones.
  Behind such a pooler, connect() sets nothing for the session; every transaction sets our limits
  for itself (queries/meta/transaction_setup.sql, `set_config(..., true)`), in the same round trip
  as its first statement (a pipeline: for a lone statement, the implicit transaction of the
  extended protocol holds both). DateStyle is the exception: poolers keep it per client;
* **no prepared statements**: psycopg prepares a statement on its sixth run on a connection, and
  the prepared statement lives on one server connection -- the next transaction may find it
  missing ("prepared statement "_pg3_0" does not exist") or another client's of the same name
  ("already exists"). Off behind a transaction pooler (prepare_threshold None), unless
  LEASECTL_POOLER_PREPARES says the pooler keeps them per client (PgBouncer >= 1.21 with
  max_prepared_statements > 0);
* **no LISTEN**: the subscription would stay on one server connection, whose notifications reach
  no client. The console polls (every 2 s, with a note saying why "● live" never shows), the
  supervisor ticks on its interval; workers never listened;
* **the migrator's lock** is taken for one transaction, and every pending migration is applied in
  it.

How leasectl knows: `LEASECTL_POOLER` (auto, none, session, transaction). `auto`, the default,
asks the server which process answers the new connection (queries/meta/backend.sql, one round
trip when it connects) and compares it with the process id the connection was given at startup:
a pooler hands its clients a cancel key of its own (it must: it routes their cancel requests), so
they differ; straight to the server, or through a plain TCP proxy, they are the same. A pooler
found that way is taken to pool by transaction -- the mode whose rules every other mode also
keeps; `LEASECTL_POOLER=session` says it keeps sessions (LISTEN, session settings and prepared
statements then work as without it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg.pq import TransactionStatus

from console.db import sql
from console.shared.config import SessionLimits
from console.shared.errors import BadInput

Row = dict[str, Any]
PoolerSetting = Literal["auto", "none", "session", "transaction"]
POOLER_SETTINGS: tuple[PoolerSetting, ...] = ("auto", "none", "session", "transaction")
_TRUE = ("1", "on", "true", "yes")
_FALSE = ("", "0", "off", "false", "no")


def pooler_setting() -> PoolerSetting:
    """LEASECTL_POOLER, read at each connection (a test or a program may change it)."""
    value = os.environ.get("LEASECTL_POOLER", "").strip().lower() or "auto"
    for setting in POOLER_SETTINGS:
        if value == setting:
            return setting
    raise BadInput(f"LEASECTL_POOLER={value!r} is not one of {', '.join(POOLER_SETTINGS)}",
                   hint="auto finds a pooler by itself; transaction or session say which kind stands in between")


def pooler_prepares() -> bool:
    """LEASECTL_POOLER_PREPARES: the pooler keeps prepared statements per client in transaction mode."""
    value = os.environ.get("LEASECTL_POOLER_PREPARES", "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadInput(f"LEASECTL_POOLER_PREPARES={value!r} is neither on nor off")


@dataclass(frozen=True)
class Pooler:
    """A connection pooler between leasectl and the server, as one connection found it."""

    mode: Literal["transaction", "session"]
    how: str  # how leasectl knows, in words: the setting, or what gave the pooler away
    prepares: bool = False  # statements may be prepared (a session pool, or a pooler that keeps them)

    @property
    def keeps_sessions(self) -> bool:
        return self.mode == "session"

    def changes(self) -> list[str]:
        """What leasectl does differently through this pooler, one sentence each (`leasectl doctor`)."""
        if self.keeps_sessions:
            return ["nothing: the pooler keeps each client's session, so leasectl's session settings, "
                    "prepared statements and LISTEN/NOTIFY work as without it"]
        return [
            "no session state: leasectl's timeouts (statement_timeout, lock_timeout, "
            "idle_in_transaction_session_timeout), read-only mode and role are set in every transaction "
            "(set_config(..., true), in the round trip of its first statement), never for the session",
            ("prepared statements on: LEASECTL_POOLER_PREPARES says the pooler keeps them per client" if self.prepares
             else "prepared statements off: the pooler would hand them to other clients' transactions "
                  "(LEASECTL_POOLER_PREPARES=on if it keeps them per client, as PgBouncer >= 1.21 with "
                  "max_prepared_statements does)"),
            "no LISTEN/NOTIFY: the console polls (its header shows ○ polling, never ● live) and the "
            "supervisor ticks on its interval, so a change shows up to one poll later",
            "`leasectl migrate` holds its lock for one transaction and applies every pending migration in it",
            "pg_stat_activity lists the pooler's server connections: client_addr is the pooler's, "
            "application_name the last client's",
        ]


def judge(setting: PoolerSetting, *, started_as: int | None, answered_by: int | None) -> Pooler | None:
    """The pooler a connection goes through, if any: from the setting, else (auto) from whether the
    server process that answers (`answered_by`, pg_backend_pid()) is the one the connection was
    given at startup (`started_as`, psycopg's info.backend_pid)."""
    prepares = pooler_prepares()
    if setting == "none":
        return None
    if setting == "session":
        return Pooler("session", "LEASECTL_POOLER=session", prepares=True)
    if setting == "transaction":
        return Pooler("transaction", "LEASECTL_POOLER=transaction", prepares=prepares)
    if started_as is None or answered_by is None or started_as == answered_by:
        return None
    return Pooler("transaction", f"found: server process {answered_by} answers a connection that started as "
                  f"process {started_as}, the mark of a pooler (LEASECTL_POOLER=session if it keeps sessions)",
                  prepares=prepares)


class LeasectlConnection(psycopg.Connection[Row]):
    """psycopg's connection, which remembers the pooler it goes through and, behind one in
    transaction mode, the settings every transaction must set for itself (`per_transaction`:
    queries/meta/transaction_setup.sql's parameters). Direct, it is psycopg's connection as is."""

    pooler: Pooler | None = None
    per_transaction: dict[str, Any] | None = None
    # a transaction opened by transaction() whose settings are not sent yet: they go with its first
    # statement (send()), which may have to come before them (a SET TRANSACTION)
    setup_due: bool = False

    @contextmanager
    def transaction(self, savepoint_name: str | None = None,
                    force_rollback: bool = False) -> Iterator[psycopg.Transaction]:
        outermost = self.per_transaction is not None and self.pgconn.transaction_status == TransactionStatus.IDLE
        with super().transaction(savepoint_name, force_rollback) as tx:
            # a savepoint opened before its transaction's first statement leaves the settings due
            self.setup_due = outermost or self.setup_due
            try:
                yield tx
            finally:
                if outermost:
                    self.setup_due = False


def per_transaction(conn: psycopg.Connection[Row]) -> dict[str, Any] | None:
    """The settings each transaction of `conn` sets for itself, or None where the session keeps them."""
    return conn.per_transaction if isinstance(conn, LeasectlConnection) else None


def pooler_of(conn: psycopg.Connection[Row]) -> Pooler | None:
    return conn.pooler if isinstance(conn, LeasectlConnection) else None


def can_listen(conn: psycopg.Connection[Row]) -> bool:
    """Whether LISTEN on `conn` would hear anything: not behind a pooler in transaction mode."""
    return per_transaction(conn) is None


def transaction_setup(limits: SessionLimits, *, read_only: bool) -> dict[str, Any]:
    """queries/meta/transaction_setup.sql's parameters for a session with these limits."""
    return {
        "statement_timeout": f"{limits.statement_timeout_ms}ms",
        "lock_timeout": f"{limits.lock_timeout_ms}ms",
        "idle_in_transaction_session_timeout": f"{limits.idle_in_transaction_ms}ms",
        "plan_cache_mode": limits.plan_cache_mode,
        "work_mem": f"{limits.work_mem_mb}MB" if limits.work_mem_mb else None,
        "read_only": read_only,
        "role": None,
        "clock": None,
    }


def _due(conn: psycopg.Connection[Row]) -> dict[str, Any] | None:
    """The settings to send with the statement about to go, if it opens a transaction of a
    connection behind a transaction pooler: a lone statement (autocommit; without it psycopg's
    BEGIN goes first), or the first of a transaction() block."""
    if not isinstance(conn, LeasectlConnection) or conn.per_transaction is None:
        return None
    if conn.setup_due:
        conn.setup_due = False
        return conn.per_transaction
    if conn.pgconn.transaction_status == TransactionStatus.IDLE:
        return conn.per_transaction
    return None


def send(conn: psycopg.Connection[Row], query: sql.Query, values: Mapping[str, Any]) -> psycopg.Cursor[Row]:
    """Execute `query`: as psycopg does, or, behind a transaction pooler at the start of a
    transaction, pipelined with the transaction's settings -- one round trip for both; a lone
    statement and its settings share the implicit transaction that lasts until the pipeline's
    Sync. A SET TRANSACTION must precede any query of its transaction: it goes first."""
    setup = _due(conn)
    if setup is None:
        return conn.execute(query.text, values)
    settings = sql.load("meta/transaction_setup")
    with conn.pipeline():
        if query.sets_transaction:
            cursor = conn.execute(query.text, values)
            conn.execute(settings.text, setup)
        else:
            conn.execute(settings.text, setup)
            cursor = conn.execute(query.text, values)
    return cursor


def set_up_transaction(conn: psycopg.Connection[Row]) -> None:
    """Send the settings of a transaction() block behind a transaction pooler now, if its first
    statement goes other than through send() (a server-side cursor, a migration's script). Nothing
    otherwise."""
    if isinstance(conn, LeasectlConnection) and conn.per_transaction is not None and conn.setup_due:
        conn.setup_due = False
        conn.execute(sql.load("meta/transaction_setup").text, conn.per_transaction)


__all__ = ["POOLER_SETTINGS", "LeasectlConnection", "Pooler", "PoolerSetting", "can_listen", "judge",
           "per_transaction", "pooler_of", "pooler_prepares", "pooler_setting", "send", "set_up_transaction",
           "transaction_setup"]
