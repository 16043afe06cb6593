"""`leasectl migrate`: apply the numbered plain-SQL files of migrations/, once each.

Idempotent (applied versions are skipped), serialised by an advisory lock, each file in its own
transaction, its checksum recorded; refuses a database whose schema is newer than this code, or
whose applied migrations were edited afterwards. Behind a connection pooler in transaction mode
the lock is taken for one transaction, in which every pending file is applied (console.db.pooler).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from console.db import sql
from console.db.connect import Conn, execute_script, run, run_one
from console.db.pooler import per_transaction
from console.shared.errors import RowLocked, SchemaError, StatementTimedOut

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path
    script: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.script.encode()).hexdigest()


@dataclass
class MigrationReport:
    applied: list[str] = field(default_factory=list)
    version: int | None = None
    known_version: int = 0
    notices: list[str] = field(default_factory=list)


def discover(directory: Path | None = None) -> list[Migration]:
    root = directory or sql.migrations_dir()
    found = []
    for path in sorted(root.glob("*.sql")):
        m = _FILE.match(path.name)
        if not m:
            raise SchemaError(f"migration file {path.name} is not named NNNN_name.sql")
        found.append(Migration(int(m.group(1)), path.stem, path, path.read_text(encoding="utf-8")))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise SchemaError("two migration files share a version number")
    return found


def known_version() -> int:
    return max((m.version for m in discover()), default=0)


def applied_versions(conn: Conn) -> dict[int, dict]:
    present = run_one(conn, "meta/ledger_exists")
    if not present or not present["present"]:
        return {}
    return {row["version"]: row for row in run(conn, "meta/migrations_applied")}


def check_compatible(conn: Conn) -> int:
    """The schema version, or a SchemaError telling the user what to run."""
    applied = applied_versions(conn)
    known = known_version()
    if not applied:
        raise SchemaError("this database has no leasectl schema", hint="run `leasectl migrate`")
    current = max(applied)
    if current > known:
        raise SchemaError(
            f"the database schema (version {current}) is newer than this leasectl knows ({known})",
            hint="upgrade leasectl",
        )
    if current < known:
        raise SchemaError(
            f"the database schema is at version {current}; this leasectl needs {known}",
            hint="run `leasectl migrate`",
        )
    return current


# migration 0021 partitioned job_events by month; migrate keeps this many months' partitions ahead
PARTITIONED_HISTORY = 21
PARTITIONS_AHEAD = 2


LOCK_WAIT_S = 600.0


def migrate(conn: Conn, *, target: int | None = None, lock_wait_s: float = LOCK_WAIT_S) -> MigrationReport:
    """Apply pending migrations. `conn` must be in autocommit mode (each file gets a transaction).

    Another migrator's lock is waited for up to `lock_wait_s` (two deploys starting at once: the
    second finds the schema done), whatever the session's own timeouts. A migration's statements
    run without a statement timeout (they last as long as the data: 0021 copies the whole history);
    its table locks wait only the session's lock_timeout, so that an ALTER queued behind a long
    transaction does not stop every worker queued behind it."""
    migrations = discover()
    report = MigrationReport(known_version=max((m.version for m in migrations), default=0))

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary and diag.message_primary.startswith("leasectl:"):
            report.notices.append(diag.message_primary)

    conn.add_notice_handler(on_notice)
    try:
        with _migration_lock(conn, lock_wait_s):
            _apply(conn, migrations, report, target)
            if (report.version or 0) >= PARTITIONED_HISTORY:
                # every run, pending migrations or not: the history's next months exist before they begin
                run(conn, "meta/ensure_event_partitions", ahead=PARTITIONS_AHEAD)
    finally:
        conn.remove_notice_handler(on_notice)
    return report


@contextmanager
def _migration_lock(conn: Conn, wait_s: float) -> Iterator[None]:
    """The migrators' advisory lock, held while the block runs, waited for up to `wait_s`. Behind a
    transaction pooler a lock of the session would stay on whichever server connection took it: the
    block is then one transaction, and the lock is that transaction's
    (meta/migrate_lock_transaction.sql). Straight to the server the wait has a transaction of its
    own, for its timeouts; the session's lock outlives it."""
    setup = per_transaction(conn)
    wait = f"{max(1, round(wait_s * 1000))}ms"
    with conn.transaction() if setup is not None else nullcontext():
        try:
            with conn.transaction():  # pooled: a savepoint of the block's, whose settings outlive it
                run(conn, "meta/lock_wait_local", lock_timeout=wait, statement_timeout=wait)
                run(conn, "meta/migrate_lock" if setup is None else "meta/migrate_lock_transaction")
            if setup is not None:  # the migrations' table locks wait as the session's other statements do
                run(conn, "meta/lock_wait_local", lock_timeout=setup["lock_timeout"],
                    statement_timeout=setup["statement_timeout"])
        except (RowLocked, StatementTimedOut):
            # the lock is an advisory one, not a call's row: say whose it is and where to look
            raise SchemaError(f"another session held leasectl's migration lock for {wait_s:g} s: another "
                              "`leasectl migrate` is still running, or a session took the lock and keeps it",
                              hint="wait for it, or find it: select pid, usename, application_name from pg_locks "
                                   "join pg_stat_activity using (pid) where locktype = 'advisory'") from None
        try:
            yield
        finally:
            if setup is None:
                try:
                    run(conn, "meta/migrate_unlock")
                except Exception:  # noqa: BLE001 - the lock dies with the session anyway
                    pass


def _apply(conn: Conn, migrations: list[Migration], report: MigrationReport, target: int | None) -> None:
    run(conn, "meta/migrations_table")
    applied = applied_versions(conn)
    newest = max(applied, default=0)
    if newest > report.known_version:
        raise SchemaError(
            f"the database schema (version {newest}) is newer than this leasectl knows "
            f"({report.known_version}); refusing to touch it",
            hint="upgrade leasectl",
        )
    for m in migrations:
        recorded = applied.get(m.version)
        if recorded and recorded["checksum"] and recorded["checksum"] != m.checksum:
            raise SchemaError(
                f"migration {m.name} was changed after it was applied "
                f"(recorded {recorded['checksum'][:12]}, file {m.checksum[:12]})",
                hint="never edit an applied migration: add a new one",
            )
    for m in migrations:
        if target is not None and m.version > target:
            break
        if m.version in applied:
            if applied[m.version]["checksum"] is None:  # applied by psql -f
                run(conn, "meta/migrations_record", version=m.version, name=m.name,
                    checksum=m.checksum)
            continue
        try:
            with conn.transaction():
                run(conn, "meta/statement_timeout_local", statement_timeout="0")
                execute_script(conn, m.script)
                run(conn, "meta/migrations_record", version=m.version, name=m.name,
                    checksum=m.checksum)
        except RowLocked:
            # a table lock, not a call's row: the file's transaction is rolled back whole
            raise SchemaError(f"{m.name} waited longer than lock_timeout for a table lock and was not applied "
                              "(nothing of it was written)",
                              hint="a long transaction holds a lock on a table it changes: find it in "
                                   "pg_stat_activity (state, xact_start), then run `leasectl migrate` again") from None
        report.applied.append(m.name)
    report.version = max(applied_versions(conn), default=None)
