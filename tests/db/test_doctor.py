"""`leasectl doctor` on real databases: what it reports, and that it says what to fix."""

from __future__ import annotations

from console.operator.doctor import diagnose
from tests.helpers import ensure_login, register_tool


def by_name(checks):
    return {c.name: c for c in checks}


def test_healthy_database(db):
    checks = by_name(diagnose(db.dsn))
    assert checks["schema"].status == "ok"
    assert checks["state machine"].status == "ok"
    assert checks["heartbeat updates"].status == "ok"
    assert checks["row security"].status == "ok"
    assert not [name for name in checks if name.startswith("shared worker login")]
    assert all(c.status != "fail" for c in checks.values())


def test_empty_database_says_to_migrate(empty_db):
    checks = by_name(diagnose(empty_db.dsn))
    assert checks["schema"].status == "fail" and "leasectl migrate" in checks["schema"].fix


def test_unreachable_database_is_a_failed_check_not_a_crash():
    checks = diagnose("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert checks[0].name == "connection" and checks[0].status == "fail"


def test_disabled_trigger_tight_tool_auto_tool_and_lease_index(db):
    with db.connect() as conn:
        register_tool(conn, "tight", lease_seconds=31, heartbeat_seconds=10, missed_heartbeats=2, jitter_seconds=10)
        # an auto-registered tool (from before 0016, or where tools.allow_auto_register is on)
        conn.execute("update leasectl_settings set value = 'true' where name = 'tools.allow_auto_register'")
        conn.execute("insert into tool_jobs (idempotency_key, payload, tool) values ('k', '{}', 'mystery')")
        conn.execute("alter table tool_jobs disable trigger tool_jobs_guard_update")
        conn.execute("create index bad_idx on tool_jobs (lease_until)")
    checks = by_name(diagnose(db.dsn))
    assert checks["state machine"].status == "fail" and "tool_jobs_guard_update" in checks["state machine"].detail
    assert checks["tool tight"].status == "warn" and "barely" in checks["tool tight"].detail
    assert checks["tool mystery"].status == "warn" and "automatically" in checks["tool mystery"].detail
    assert checks["heartbeat updates"].status == "warn" and "DROP INDEX bad_idx" in checks["heartbeat updates"].fix


def test_login_role_without_timeouts_gets_the_commands(db, pg_server):
    with pg_server.admin() as admin:
        ensure_login(admin, "lc_doctor_login", "leasectl_operator")
    checks = by_name(diagnose(db.dsn))
    fix = checks["login roles"].fix
    assert "ALTER ROLE lc_doctor_login SET statement_timeout = '10s';" in fix
    assert "lock_timeout" in fix and "idle_in_transaction_session_timeout" in fix


def test_row_security_turned_off_is_a_failure(db):
    with db.connect() as conn:
        conn.execute("alter table tool_jobs disable row level security")
    check = by_name(diagnose(db.dsn))["row security"]
    assert check.status == "fail" and "any call" in check.detail
    assert check.fix == "ALTER TABLE tool_jobs ENABLE ROW LEVEL SECURITY;"


def test_a_login_that_is_worker_and_operator_cannot_be_bound(db, pg_server):
    with pg_server.admin() as admin:
        ensure_login(admin, "lc_doctor_dual", "leasectl_worker")
        ensure_login(admin, "lc_doctor_dual", "leasectl_operator")
    check = by_name(diagnose(db.dsn))["worker login lc_doctor_dual"]
    assert check.status == "warn" and "leasectl_operator" in check.detail
    assert "identity cannot be bound" in check.detail
    assert "REVOKE leasectl_operator FROM lc_doctor_dual" in check.fix


def test_shadowing_says_the_guards_search_pg_temp_last_and_what_temp_costs(db):
    check = by_name(diagnose(db.dsn))["temporary objects"]
    assert check.status == "ok" and "searches pg_temp last" in check.detail
    assert "leasectl_worker" in check.detail and "REVOKE TEMPORARY ON DATABASE" in check.detail


def test_a_guard_that_searches_pg_temp_first_fails_and_so_does_a_schema_workers_may_create_in(db):
    with db.connect() as conn:
        # what 0011's databases had: the guard searched a login's temporary tables first
        conn.execute("alter function leasectl_tool_jobs_guard() set search_path = pg_catalog, public")
        conn.execute("create schema loose")
        conn.execute("grant create on schema loose to leasectl_worker")
        conn.execute("revoke temporary on database " + conn.info.dbname + " from public")
    checks = by_name(diagnose(db.dsn))
    assert checks["temporary objects"].status == "fail"
    assert "leasectl_tool_jobs_guard()" in checks["temporary objects"].detail
    assert "leasectl migrate" in checks["temporary objects"].fix
    assert checks["schemas"].status == "warn" and "leasectl_worker in loose" in checks["schemas"].detail
    with db.connect() as conn:
        conn.execute("alter function leasectl_tool_jobs_guard() set search_path = pg_catalog, public, pg_temp")
    check = by_name(diagnose(db.dsn))["temporary objects"]
    assert check.status == "ok" and "may create them" not in check.detail, "TEMPORARY taken from PUBLIC"


def test_a_login_that_turned_its_own_timeout_off_gets_the_command_again(db, pg_server):
    with pg_server.admin() as admin:
        ensure_login(admin, "lc_doctor_zero", "leasectl_worker")
        for setting, value in (("statement_timeout", "5s"), ("lock_timeout", "2s"),
                               ("idle_in_transaction_session_timeout", "0")):
            admin.execute(f"alter role lc_doctor_zero set {setting} = '{value}'")
    try:
        fix = by_name(diagnose(db.dsn))["login roles"].fix
        assert "ALTER ROLE lc_doctor_zero SET idle_in_transaction_session_timeout = '30s';" in fix
        assert "ALTER ROLE lc_doctor_zero SET lock_timeout" not in fix
    finally:
        with pg_server.admin() as admin:
            admin.execute("alter role lc_doctor_zero reset all")


def test_a_server_without_standbys_says_what_an_acknowledged_completion_is_worth(db):
    # the HA tier (tests/ha/test_failover.py) sees the synchronous and the standby answers
    check = by_name(diagnose(db.dsn))["replication"]
    assert check.status == "ok" and "no standby" in check.detail and "disk" in check.detail


def test_history_says_its_size_and_start_and_flags_a_missing_month_and_rows_in_the_default(db):
    from datetime import UTC, datetime

    import humanize

    from tests.db.history import months_ago

    checks = by_name(diagnose(db.dsn))
    assert checks["history"].status == "ok", checks["history"]
    assert "nothing archived" in checks["history"].detail and "partitions through" in checks["history"].detail
    with db.connect() as conn:
        register_tool(conn, "search")
        conn.execute("insert into tool_jobs (idempotency_key, payload, tool) values ('k', '{}', 'search')")
        assert "events/day" in by_name(diagnose(db.dsn))["history"].detail
        # a history of a moment (counted as an hour): its growth is this month's bytes, 24 times a day,
        # not the empty indexes of the months ahead as well
        this_month = conn.execute(f"select pg_total_relation_size('job_events_{datetime.now(UTC):%Y_%m}') as b, "
                                  "(select sum(pg_total_relation_size(inhrelid)) from pg_inherits "
                                  " where inhparent = 'job_events'::regclass) as all_b").fetchone()
        assert this_month["all_b"] > 2 * this_month["b"], "the months ahead weigh as much as this one"
        detail = by_name(diagnose(db.dsn))["history"].detail
        assert f"~{humanize.naturalsize(this_month['b'] * 24, binary=True)}/day" in detail, detail
        conn.execute(f"drop table job_events_{months_ago(-1):%Y_%m}")  # next month's, empty
        assert by_name(diagnose(db.dsn))["history"].status == "warn"
        now = datetime.now(UTC)
        conn.execute(f"alter table job_events detach partition job_events_{now:%Y_%m}")
        conn.execute("insert into tool_jobs (idempotency_key, payload, tool) values ('k2', '{}', 'search')")
    history = by_name(diagnose(db.dsn))["history"]
    assert history.status == "fail" and "job_events_default" in history.detail and "migrate" in history.fix
