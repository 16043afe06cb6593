"""Least privilege by GRANT: what each group role can and cannot do, from a real login."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from tests.helpers import FAST, claim, enqueue, ensure_login, register_tool, start_side_effect

LOGINS = {"lc_test_worker": "leasectl_worker", "lc_test_operator": "leasectl_operator",
          "lc_test_auditor": "leasectl_auditor"}


def as_role(db, login):
    conn = psycopg.connect(make_conninfo(db.dsn, user=login), autocommit=True, row_factory=dict_row)
    return conn


@pytest.fixture
def outcome_unknown_call(db):
    with db.connect() as c:
        register_tool(c, "pay", "mutating_unverifiable", **FAST)
        e = enqueue(c, "pay")
        job = claim(c, "w1")
        start_side_effect(c, job, "w1")
        c.execute("update tool_jobs set state='outcome_unknown' where id=%s", (e["id"],))
        return e["id"]


def test_auditor_cannot_write_even_with_read_only_turned_off(db, logins, outcome_unknown_call):
    with as_role(db, "lc_test_auditor") as conn:
        conn.execute("set default_transaction_read_only = off")
        assert conn.execute("select count(*) as n from tool_jobs").fetchone()["n"] == 1
        for stmt in ("update tool_jobs set state='queued'",
                     "insert into job_events (job_id, kind) select id, 'note' from tool_jobs",
                     "delete from tool_jobs",
                     "insert into tools (name, side_effect, lease_seconds, heartbeat_seconds) "
                     "values ('x','read_only',10,1)"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(stmt)


def test_worker_cannot_approve_a_retry(db, logins, outcome_unknown_call):
    with as_role(db, "lc_test_worker") as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("update tool_jobs set retry_approved_by='w9', retry_approved_at=now(), "
                         "state='queued' where id=%s", (outcome_unknown_call,))
        from console.db.connect import run_one
        from console.shared.errors import PermissionDenied

        with pytest.raises(PermissionDenied):
            run_one(conn, "operator/approve_retry", job_id=outcome_unknown_call,
                    seen_state="outcome_unknown", seen_token=1, operator="w9", reason="me")


def test_worker_cannot_forge_operator_events(db, logins, outcome_unknown_call):
    with as_role(db, "lc_test_worker") as conn, pytest.raises(psycopg.Error, match="only an operator"):
        conn.execute("insert into job_events (job_id, kind, actor) values (%s, 'operator_cancel', 'ceo')",
                     (outcome_unknown_call,))


def test_worker_runs_the_whole_protocol(db, logins):
    with db.connect() as admin:
        register_tool(admin, "search", "read_only", **FAST)
    from tests.helpers import complete, heartbeat, sweep

    # a worker login owns calls as itself or <login>:<name> (migration 0005; see test_trust.py)
    me = "lc_test_worker:w1"
    with as_role(db, "lc_test_worker") as conn:
        e = enqueue(conn, "search")
        job = claim(conn, me)
        assert heartbeat(conn, job, me)
        assert complete(conn, job, me)["state"] == "succeeded"
        assert sweep(conn) == []
        assert e["id"] == job["id"]


def test_operator_cannot_take_ownership_but_can_act(db, logins, outcome_unknown_call):
    with as_role(db, "lc_test_operator") as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("update tool_jobs set owner_id='op' where id=%s", (outcome_unknown_call,))
        # since 0005 no direct UPDATE at all: an operator acts only through queries/operator/,
        # whose functions journal the decision in the same statement
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("update tool_jobs set state='queued', retry_approved_by='op', retry_approved_at=now() "
                         "where id=%s", (outcome_unknown_call,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("insert into job_events (job_id, kind, actor) values (%s, 'operator_cancel', 'op')",
                         (outcome_unknown_call,))
        from tests.helpers import approve

        row = approve(conn, outcome_unknown_call, "outcome_unknown", 1, operator="op")
        assert row["state"] == "queued"


@pytest.mark.parametrize("login", list(LOGINS))
def test_nobody_can_change_history(db, logins, outcome_unknown_call, login):
    with as_role(db, login) as conn:
        for stmt in ("update job_events set actor='x'", "delete from job_events", "truncate job_events"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(stmt)


def test_group_roles_carry_timeouts(db, logins):
    with db.connect() as conn:
        rows = conn.execute(
            "select r.rolname, s.setconfig from pg_db_role_setting s join pg_roles r on r.oid = s.setrole "
            "where r.rolname like 'leasectl\\_%'").fetchall()
        settings = {r["rolname"]: " ".join(r["setconfig"]) for r in rows}
    for role in ("leasectl_worker", "leasectl_operator", "leasectl_auditor"):
        for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"):
            assert name in settings[role], (role, name)


def test_worker_cannot_forge_the_ownership_timeline(db, logins, outcome_unknown_call):
    from console.db.connect import run_one
    from console.shared.errors import LeasectlError

    with as_role(db, "lc_test_worker") as conn:
        with pytest.raises(LeasectlError, match="written by the database itself"):
            run_one(conn, "worker/record_event", job_id=outcome_unknown_call, kind="claimed",
                    actor="evil", fencing_token=99, details=None)
        # not even from a trigger of its own (a temporary table: TEMP is granted to PUBLIC)
        conn.execute("create temp table sneaky (x int)")
        conn.execute(
            "create function pg_temp.forge() returns trigger language plpgsql as $$ begin "
            "insert into public.job_events (job_id, kind, actor, fencing_token) "
            f"values ('{outcome_unknown_call}', 'claimed', 'evil', 99); return new; end $$")
        conn.execute("create trigger forge after insert on sneaky for each row execute function pg_temp.forge()")
        with pytest.raises(psycopg.Error, match="written by the database itself"):
            conn.execute("insert into sneaky values (1)")


def test_the_control_plane_role_runs_a_shutdown_and_nobody_else_writes_records(db, pg_server, logins):
    from console.control.supervisor import tick
    from tests.helpers import give_grant, register_tree, request_shutdown

    with pg_server.admin() as admin:
        ensure_login(admin, "lc_test_supervisor", "leasectl_supervisor")
    with db.connect() as c:
        register_tree(c, {"planner-1": None, "code-1": "planner-1"})
        give_grant(c, "code-1")
    with as_role(db, "lc_test_operator") as operator:
        assert request_shutdown(operator, "planner-1", "drain", window=0.2, operator="op") is not None
        with pytest.raises(psycopg.Error) as refused:
            operator.execute("insert into reconciliation_records (shutdown_id, written_by) "
                             "select id, 'op' from shutdowns")
        assert refused.value.sqlstate == "42501"
    with as_role(db, "lc_test_worker") as worker:
        with pytest.raises(psycopg.Error) as refused:
            worker.execute("insert into shutdowns (root_agent_id, mode, requested_by, reason, window_seconds) "
                           "values ('code-1', 'abort', 'code-1', 'x', 1)")
        assert refused.value.sqlstate == "42501"
    with as_role(db, "lc_test_supervisor") as supervisor:
        import time
        for _ in range(50):
            tick(supervisor, supervisor_id="sup", sweep=True)
            if supervisor.execute("select state from shutdowns").fetchone()["state"] == "terminated":
                break
            time.sleep(0.1)
        record = supervisor.execute("select * from reconciliation_records").fetchone()
    assert record is not None and record["grants_revoked"][0]["revoked_by"] == "control-plane"
    with as_role(db, "lc_test_auditor") as auditor:
        assert auditor.execute("select count(*) as n from reconciliation_records").fetchone()["n"] == 1
        with pytest.raises(psycopg.Error):
            auditor.execute("update agents set last_seen_at = now()")
